"""Running a planned attempt of the simulated server: waiting on the clock until the
engine has produced its tokens (:meth:`AttemptRunner.wait`), streaming them
(:meth:`AttemptRunner.chunks`), aborting it (:meth:`AttemptRunner.cancel`).

A mixin of :class:`~agentlab.llm.sim_backend.SimServer`, which plans the attempt.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, AsyncIterator

from agentlab.core.clock import Clock
from agentlab.errors import LLMTimeoutError, RateLimitError
from agentlab.llm.sim_engine import Engine, EngineRequest
from agentlab.llm.sim_profiles import SimProfile
from agentlab.llm.sim_result import SimResult

__all__ = ["AttemptRunner"]


class AttemptRunner:
    """The waits of :class:`~agentlab.llm.sim_backend.SimServer` (see the module docstring)."""

    clock: Clock
    engine: Engine
    profile: SimProfile
    faults: dict[str, int]

    def _refresh(self, res: SimResult, view: EngineRequest) -> None:
        if view.first_token is not None:
            res.first_token = view.first_token
        if view.end is not None:
            res.end = view.end
        elif view.aborted:
            res.end = math.inf
        if view.admitted is not None:
            res.queue_wait = max(0.0, view.admitted - view.arrival)
            res.cached_tokens = view.cached_tokens

    async def _until_token(self, res: SimResult, m: float) -> bool:
        """Sleep until token ``m`` of an engine request exists; False if its deadline hit."""
        req = res.req
        assert req is not None
        clock, engine = self.clock, self.engine
        while True:
            now = clock.now()
            engine.advance(now)
            t = req.time_of_token(m)
            if t is not None:  # the step producing it has started: its time is final
                if t > req.deadline:
                    await clock.sleep(req.deadline - now)
                    return False
                if t > now:
                    await clock.sleep(t - now)
                return True
            if req.aborted or now >= req.deadline:
                return False
            planned = engine.predict(req).time_of_token(m)
            if planned is not None and planned <= now + 1e-9:
                engine.replan()  # the plan fell behind the committed steps (KV limits)
                planned = engine.predict(req).time_of_token(m)
            target = req.deadline if planned is None else min(planned, req.deadline)
            if target <= now + 1e-9:  # zero-length steps due now: run them
                engine.advance(now, inclusive=True)
                if req.time_of_token(m) is None and not req.aborted and now < req.deadline:
                    raise RuntimeError(f"simulator engine made no progress at t={now}")
                continue
            await clock.sleep(target - now)

    async def wait(self, res: SimResult, model: str) -> SimResult:
        """Sleep until the answer is complete (or raise the fault when it is due)."""
        clock = self.clock
        if res.fault is None and res.req is not None:
            ok = await self._until_token(res, res.req.output)
            self._refresh(res, res.req)
            if ok:
                return res
            res.fault, res.fault_at = "timeout", res.req.deadline
        if res.fault is not None:
            delay = res.fault_at - clock.now()
            if delay > 0:
                await clock.sleep(delay)
            raise self._fault_error(res, model)
        delay = res.end - clock.now()
        if delay > 0:
            await clock.sleep(delay)
        return res

    async def chunks(
        self, res: SimResult, model: str, pieces: int | None = None
    ) -> AsyncIterator[str]:
        """Yield the text in about ``stream_chunks`` pieces (or ``pieces``, e.g. one per
        token as vLLM streams) as its tokens are produced."""
        parts = split_pieces(res.text, piece_count(res, pieces or self.profile.stream_chunks))
        due = self.due(res, model, len(parts))
        try:
            async for i in due:
                if parts[i] or i == 0:
                    yield parts[i]
        finally:  # closed with this one (a consumer's break): no finalizer task left behind
            await due.aclose()

    async def due(self, res: SimResult, model: str, k: int) -> AsyncGenerator[int, None]:
        """Yield ``0 .. k - 1``, each once the engine has produced the tokens of that many
        equal shares of the reply (share ``i`` ends at token ``1 + (n - 1) * i / (k - 1)``;
        the last at the reply's end), raising the reply's fault when it is due: the clock
        of a stream of ``k`` pieces (:meth:`chunks`; sim-serve's tool-call deltas)."""
        if res.fault == "rate_limited" or (res.fault and res.fault_at <= res.first_token):
            await self.wait(res, model)  # raises
        n = res.completion_tokens
        for i in range(k):
            if res.req is not None and res.fault is None:
                m = 1 + (n - 1) * i / (k - 1) if k > 1 else float(n)
                if not await self._until_token(res, m):
                    res.fault, res.fault_at = "timeout", res.req.deadline
                    await self.wait(res, model)  # raises the timeout mid-stream
            else:
                t = res.first_token + ((res.end - res.first_token) * i / (k - 1) if k > 1 else 0.0)
                if res.fault is not None and t > res.fault_at:
                    await self.wait(res, model)  # raises the timeout mid-stream
                delay = t - self.clock.now()
                if delay > 0:
                    await self.clock.sleep(delay)
            yield i
        if res.req is not None:
            self._refresh(res, res.req)
        if res.fault is not None:
            await self.wait(res, model)

    def ready_pieces(self, res: SimResult, whole: bool = False) -> list[str] | None:
        """What :meth:`chunks` would yield, as a list, when it would yield it all without a
        wait (no engine request, no fault, the last piece due already); else ``None``.
        ``whole``: the text as one piece.

        An instant server's replies are all of this kind: the stream then hands them over
        with no generator resumed per piece (see ``client_stream._Pipe``).
        """
        if res.fault is not None or res.req is not None:
            return None
        if max(res.first_token, res.end) > self.clock.now():
            return None
        return self.pieces_of(res, whole)

    def pieces_of(self, res: SimResult, whole: bool = False) -> list[str]:
        """What :meth:`chunks` yields for a reply with no engine request and no fault, as
        a list (``whole``: the text as one piece), whether or not it is due yet."""
        if whole:
            return [res.text]
        return split_pieces(res.text, piece_count(res, self.profile.stream_chunks))

    def cancel(self, res: SimResult) -> None:
        """Abort a planned request now (its client went away), as vLLM aborts a request
        whose connection closed: the engine drops it at the next step boundary, freeing
        its slot and budget, and requests behind it move up (their waits re-predict)."""
        if res.fault == "cancelled":
            return
        now = self.clock.now()
        req = res.req
        if req is not None:
            self.engine.advance(now)
            if req.end is not None and req.end <= now:
                return  # already answered
            if not req.done:
                req.deadline = min(req.deadline, now)
                self.engine.version += 1  # the future changed: predictions are stale
        res.fault, res.fault_at = "cancelled", now

    def _fault_error(self, res: SimResult, model: str) -> Exception:
        if res.malformed:  # the malformed reply never reached the client
            res.malformed = False
            self.faults["malformed"] -= 1
        if res.fault in ("rate_limited", "timeout"):
            self.faults[res.fault] += 1
        if res.fault == "rate_limited":
            return RateLimitError(f"{model}: rate limited (simulated 429)")
        if res.fault == "cancelled":
            return LLMTimeoutError(f"{model}: request cancelled by its client (simulated)")
        return LLMTimeoutError(f"{model}: no complete answer before the timeout (simulated)")


def piece_count(res: SimResult, pieces: int) -> int:
    """How many pieces a reply streams in: ``pieces``, or fewer for fewer tokens or
    characters (at least one: an empty text is one empty piece)."""
    return max(1, min(pieces, res.completion_tokens, len(res.text) or 1))


def split_pieces(text: str, k: int) -> list[str]:
    """``text`` cut into ``k`` pieces of about equal length (none empty while ``k`` <=
    ``len(text)``): what :meth:`AttemptRunner.chunks` yields and
    :meth:`AttemptRunner.ready_pieces` hands over at once."""
    n = len(text)
    return [text[n * i // k : n * (i + 1) // k] for i in range(k)]
