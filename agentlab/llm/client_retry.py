"""The one retry/limiter loop of :class:`~agentlab.llm.client.LLMClient` (``complete``
and ``stream`` both run it), as the client's base class :class:`_RetryLoop`.

Each attempt queues (FIFO) for a limiter slot, runs on the simulated server, the lean
HTTP transport or litellm, feeds the limiter, and is listed in ``record.tries``; 429s,
timeouts and provider errors back off (seeded jitter, so virtual runs repeat) and retry;
malformed replies retry at once. ``_now`` is the same loop for a free-text call on an
instant server that finishes at its first attempt, with no coroutine at all; ``_ready``
and ``_ready_done`` the same for a streamed call's first attempt that an instant server
answers at once and well-formed (``LLMStream`` hands its pieces over in between).
"""

from __future__ import annotations

from typing import Any

from agentlab.core.clock import Clock
from agentlab.core.records import SCHEMA_VERSION as RECORD_SCHEMA_VERSION
from agentlab.core.records import CallRecord, LLMResponse, ToolCall
from agentlab.errors import BadResponseError, LLMError, RateLimitError
from agentlab.llm._live import Live
from agentlab.llm.aimd import AIMDLimiter, ConcurrencyGate
from agentlab.llm.client_stream import ReadyAttempt, StreamArgs, _Pipe
from agentlab.llm.sim_backend import SimResult
from agentlab.llm.sim_content import Rng
from agentlab.llm.structured import OutputSpec
from agentlab.llm.tokens import loads_like_json

__all__: list[str] = []

_BACKOFF_BASE_S = 0.5
_BACKOFF_CAP_S = 30.0


class _RetryLoop:
    """The calls of :class:`~agentlab.llm.client.LLMClient` (its only subclass), which
    holds the configuration these methods read."""

    __slots__ = ()

    model: str
    base_url: str | None
    api_key_env: str | None
    seed: int | None
    timeout: float
    max_retries: int
    _clock: Clock
    _transport: Any
    _wire_model: str

    def _now(
        self,
        live: Live,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        agent_id: str | None,
        labels: dict[str, Any],
    ) -> LLMResponse | None:
        """The retry loop of :meth:`_call` for a free-text call on an instant server, when
        it finishes at its first attempt (``SimServer.plan_instant``); else ``None``, with
        nothing done. ``labels`` (a dict of the caller's own) becomes the record's.

        Most calls of a simulated society are of this kind; this path makes them with no
        coroutine, no ``SimResult`` and no retry bookkeeping, for the same outcome.
        """
        gate = live.gate()
        limiter = live.limiter
        # The slot would be taken and handed back with no await in between, so nothing
        # can see it: only check that one is free with nobody queued ahead (the limit is
        # at least 1, so with nothing in flight it need not be looked at).
        in_flight = gate.in_flight
        if gate.waiters or (in_flight and in_flight >= limiter.limit):
            return None
        clock = self._clock
        start = clock.now()
        planned = live.server.plan_instant(messages, params, labels)  # type: ignore[union-attr]
        if planned is None:
            return None
        text, prompt_tokens, n, finish = planned
        end = clock.now()
        limiter.on_success(end - start, n, in_flight + 1, limiter.epoch, end, prompt_tokens)
        # every field in order (records.CallRecord): no keyword matching, no default factory
        rec = CallRecord(live.next_id(), self._wire_model, start, end, start, 0.0, agent_id,
                         labels, prompt_tokens, n, "ok", None, 1, False,
                         RECORD_SCHEMA_VERSION, [])  # fmt: skip
        usage = live.usage
        usage.prompt_tokens += prompt_tokens
        usage.completion_tokens += n
        usage.calls += 1
        return LLMResponse(text, rec, [], None, finish)

    async def _call(
        self,
        live: Live,
        messages: list[dict[str, Any]],
        spec: OutputSpec | None,
        tools: list[dict[str, Any]] | None,
        params: dict[str, Any],
        agent_id: str | None,
        labels: dict[str, Any] | None,
        prior: int,
        pipe: _Pipe | None,
    ) -> LLMResponse:
        """The one retry/limiter loop of ``complete`` and ``stream`` (``pipe`` set).

        Each attempt takes a limiter slot and runs; a call that needs more than one lists
        them all in ``record.tries`` (a first-attempt success leaves it empty). A
        rate limit, timeout or provider error feeds the limiter, backs off and retries; a
        malformed reply (unparseable tool arguments or structured output, empty text) is
        retried at once — unless a stream already delivered text, which a retry would
        duplicate. After ``max_retries`` retries the last error is raised.
        """
        server = live.server
        if pipe is None and spec is None and not tools and server is not None and server.instant:
            resp = self._now(live, messages, params, agent_id, dict(labels) if labels else {})
            if resp is not None:
                return resp
        if server is not None and server.profile.client_overhead_s > 0:
            await server.dispatch()
        rec = self._open(live, self._clock.now(), agent_id, labels, pipe is not None)
        return await self._serve(live, rec, messages, spec, tools, params, prior, pipe)

    def _open(
        self,
        live: Live,
        start: float,
        agent_id: str | None,
        labels: dict[str, Any] | None,
        stream: bool,
    ) -> CallRecord:
        """The front half of a call, at an explicit time: its request id and record.

        ``start`` is when the request was sent (after its client-CPU share,
        :meth:`SimServer.dispatch_at`). Ids are drawn in call order, as the shares are.
        """
        # every field in order, as in _now (no keyword matching, no default factory)
        return CallRecord(live.next_id(), self._wire_model, start, 0.0, None, None, agent_id,
                          dict(labels) if labels else {}, 0, 0, "ok", None, 1, stream,
                          RECORD_SCHEMA_VERSION, [])  # fmt: skip

    async def _serve(
        self,
        live: Live,
        rec: CallRecord,
        messages: list[dict[str, Any]],
        spec: OutputSpec | None,
        tools: list[dict[str, Any]] | None,
        params: dict[str, Any],
        prior: int,
        pipe: _Pipe | None,
    ) -> LLMResponse:
        """The back half of a call opened by :meth:`_open`, from its first gate entry on.

        Every attempt queues (FIFO) for a limiter slot, runs, and feeds the limiter; see
        :meth:`_call` for the retry rules. Everything here reads the clock as it runs.
        """
        server = live.server
        clock = self._clock
        gate = live.gate()
        limiter = live.limiter
        tries = rec.tries
        attempt = 0
        while True:
            epoch = gate.try_acquire()
            if epoch is None:  # no free slot: queue (FIFO) for one
                epoch = await gate.acquire()
            t0 = clock.now()
            try:
                if pipe is not None:
                    res = await pipe.send(
                        self, live, messages, spec, tools, params, prior + attempt, rec.labels
                    )
                elif server is not None:
                    res = server.plan(
                        messages,
                        attempt=prior + attempt,
                        spec=spec,
                        tools=tools,
                        params=params,
                        timeout=self.timeout,
                        labels=rec.labels,
                    )
                    # An instant answer that is already due needs no wait (no coroutine).
                    if res.fault is not None or res.req is not None or res.end > clock.now():
                        res = await server.wait(res, self.model)
                else:
                    res = await self._transport.acall(
                        clock, **self._lkw(messages, spec, tools, params, prior + attempt)
                    )
            except LLMError as exc:
                gate.release()
                t1 = clock.now()
                tries.append((attempt + 1, exc.code, t0, t1, str(exc)[:300]))
                if isinstance(exc, RateLimitError):
                    limiter.on_rate_limit(epoch, t1)
                elif exc.code == "timeout":
                    limiter.on_timeout(epoch, t1)
                if (
                    not exc.retryable
                    or attempt >= self.max_retries
                    or (pipe is not None and pipe.delivered)
                ):
                    self._fail(rec, exc, attempt, live)
                await self._backoff(rec, attempt)
                attempt += 1
                continue
            except BaseException:
                gate.release()
                raise
            t1 = self._settle(gate, limiter, epoch, t0, res)
            try:
                if spec is None and res.text and not res.tool_calls:
                    resp = LLMResponse(res.text, rec, [], None, res.finish_reason)
                else:
                    resp = self._parse(res, rec, spec)
            except BadResponseError as exc:
                # The server answered (so the limiter saw a healthy completion), but the
                # reply is unusable: retry at once, the draw of the next attempt differs.
                tries.append((attempt + 1, exc.code, t0, t1, str(exc)[:300]))
                if attempt >= self.max_retries or (pipe is not None and pipe.delivered):
                    self._fail(rec, exc, attempt, live)
                attempt += 1
                continue
            # not observable without streaming for real providers
            self._answered(live, rec, res, attempt, t0, t1, server is not None or pipe is not None)
            return resp

    def _ready(
        self, live: Live, args: StreamArgs, params: dict[str, Any], whole: bool
    ) -> ReadyAttempt | None:
        """The first attempt of a streamed call without structured output, planned, when
        an instant server answers it at once and well-formed
        (``SimServer.answers_at_once``), with the gate's slot taken; else ``None``, with
        nothing done. ``args``: the stream's call (``LLMStream``); ``whole``: its text
        as one piece (``SimServer.pieces_of``).

        What :meth:`_call` does up to the transport's first delta (the same request id,
        slot and plan), with no coroutine: ``LLMStream`` hands the pieces over and
        :meth:`_ready_done` ends the attempt (or ``gate.release()``, if the consumer left:
        no record, as :meth:`_serve` leaves none).
        """
        server = live.server
        if server is None or not server.answers_at_once(params):
            return None
        messages, _, tools, agent_id, labels, prior = args
        gate = live.gate()
        epoch = gate.try_acquire()
        if epoch is None:  # queue for a slot: _call
            return None
        clock = self._clock
        rec = self._open(live, clock.now(), agent_id, labels, True)  # made whole by _ready_done
        t0 = clock.now()
        try:
            res = server.plan(messages, attempt=prior, tools=tools, params=params,
                              timeout=self.timeout, labels=rec.labels)  # fmt: skip
        except BaseException:
            gate.release()
            raise
        # due when planned (an instant server's first token and end are the plan's time)
        return (rec, res, server.pieces_of(res, whole), gate, epoch, t0)

    def _ready_done(self, live: Live, ready: ReadyAttempt, first: float | None) -> LLMResponse:
        """The end of a :meth:`_ready` attempt whose pieces the consumer took (``first``:
        when the first text reached it): what :meth:`_serve` does after its transport."""
        rec, res, _, gate, epoch, t0 = ready
        res.first_token = first if first is not None else self._clock.now()
        t1 = self._settle(gate, live.limiter, epoch, t0, res)
        resp = self._parse(res, rec, None)  # well-formed: SimServer.answers_at_once
        self._answered(live, rec, res, 0, t0, t1, True)
        return resp

    def _settle(
        self, gate: ConcurrencyGate, limiter: AIMDLimiter, epoch: int, t0: float, res: SimResult
    ) -> float:
        """Hand an answered attempt's slot back and feed the limiter; returns the time."""
        in_flight = gate.in_flight
        gate.release()
        t1 = self._clock.now()
        limiter.on_success(t1 - t0, res.completion_tokens, in_flight, epoch, t1,
                                res.prompt_tokens - getattr(res, "cached_tokens", 0))  # fmt: skip
        return t1

    def _answered(
        self,
        live: Live,
        rec: CallRecord,
        res: SimResult,
        attempt: int,
        t0: float,
        t1: float,
        first_known: bool,
    ) -> None:
        """Complete the record and the usage of a call whose attempt ``attempt`` (0 =
        first) answered well: ``first_known``, the first token's time is observable."""
        if attempt:  # a first-attempt success leaves ``tries`` empty (nothing to add)
            rec.tries.append((attempt + 1, "ok", t0, t1, None))
        rec.attempts = attempt + 1
        rec.end = self._clock.now()
        rec.first_token = res.first_token if first_known else None
        rec.queue_wait = res.queue_wait
        rec.prompt_tokens = res.prompt_tokens
        rec.cached_tokens = getattr(res, "cached_tokens", 0)
        rec.completion_tokens = res.completion_tokens
        usage = live.usage
        usage.prompt_tokens += res.prompt_tokens
        usage.completion_tokens += res.completion_tokens
        usage.calls += 1

    def _lkw(
        self,
        messages: list[dict[str, Any]],
        spec: OutputSpec | None,
        tools: list[dict[str, Any]] | None,
        params: dict[str, Any],
        attempt: int,
    ) -> dict[str, Any]:
        # ``attempt`` (0 = first, counting the agent-step's earlier attempts) goes out as
        # the X-Agentlab-Attempt header, so sim-serve's fault draw follows the attempt.
        return {
            "model": self._wire_model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "messages": messages,
            "spec": spec,
            "tools": tools,
            "params": params,
            "seed": self.seed,
            "timeout": self.timeout,
            "attempt": attempt,
        }

    async def _backoff(self, rec: CallRecord, attempt: int) -> None:
        # Exponential backoff with jitter, drawn from a seeded stream so virtual runs repeat.
        u = Rng(hash(rec.request_id) if not self._clock.is_virtual else attempt * 7919).random()
        delay = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**attempt) * (0.5 + 0.5 * u)
        await self._clock.sleep(delay)

    def _fail(self, rec: CallRecord, exc: LLMError, attempt: int, live: Live) -> None:
        rec.end = self._clock.now()
        rec.outcome = exc.code
        rec.error = str(exc)
        rec.attempts = attempt + 1
        live.usage.calls += 1
        live.usage.errors += 1
        exc.record = rec  # type: ignore[attr-defined]
        raise exc

    def _parse(self, res: SimResult, rec: CallRecord, spec: OutputSpec | None) -> LLMResponse:
        """The response of a served attempt; raises ``BadResponseError`` if malformed."""
        resp = LLMResponse(res.text, rec, [], None, res.finish_reason)
        if res.tool_calls:
            resp.tool_calls = [_tool_call(*tc) for tc in res.tool_calls]
        elif spec is not None:
            resp.parsed = spec.parse(res.text)
        elif not res.text:
            raise BadResponseError(f"{self._wire_model}: empty completion (no text, no tool call)")
        return resp


def _tool_call(call_id: str, name: str, raw: str) -> ToolCall:
    try:
        args = loads_like_json(raw) if raw else {}  # json.loads' values, by orjson where it can
    except ValueError:
        raise BadResponseError(
            f"tool call {name!r} has malformed JSON arguments: {raw[:200]!r}"
        ) from None
    if not isinstance(args, dict):
        raise BadResponseError(f"tool call {name!r} arguments are not a JSON object: {raw[:200]!r}")
    return ToolCall(call_id, name, args)
