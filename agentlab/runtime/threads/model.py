"""The model protocol of the thread runtime, a scripted model, and an ``LLMClient`` adapter.

A model streams one assistant turn: text deltas (``str``) and at most a few tool calls
(:class:`~agentlab.core.records.ToolCall`, normally last). The runtime accumulates the
deltas, so cancelling the stream mid-way leaves a partial turn it can keep.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentlab.core.clock import Clock, RealClock
from agentlab.core.records import ToolCall
from agentlab.llm.client_stream import LLMStream
from agentlab.llm.encoded_history import EncodedHistory

if TYPE_CHECKING:
    from agentlab.runtime.services import RunServices

__all__ = ["LLMClientModel", "Model", "ScriptedModel"]


@runtime_checkable
class Model(Protocol):
    """Streams one assistant turn for a thread."""

    name: str

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        thread_id: str,
        turn: int,
    ) -> AsyncIterator[str | ToolCall]:
        """Yield text deltas and tool calls. ``turn`` counts the thread's completions."""
        ...


def _word_pool(seed: int, n_words: int = 3000) -> list[str]:
    rng = random.Random(seed)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    weights = [13, 9, 8, 8, 7, 7, 6, 6, 6, 4, 4, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1]
    return ["".join(rng.choices(letters, weights, k=rng.randint(2, 10))) for _ in range(n_words)]


class ScriptedModel:
    """A deterministic model for tests and benchmarks (no network, ~µs per turn).

    After a user/task message (or an event) it streams ``chunks`` text deltas of about
    ``chunk_chars`` characters and, when a tool named ``tool`` is offered, ends with a call
    to it; after a tool result it streams the same amount of text and ends the turn. Text
    comes from a fixed pool of seeded pseudo-words (compresses roughly like English), picked
    by a hash of ``(seed, thread, turn, chunk)`` so every run yields identical histories.

    Args:
        tool: name of the tool to call after user text (``None``: never call tools).
        chunks: text deltas per turn.
        chunk_chars: characters per delta.
        delay_s: clock time to wait before each delta (lets tests interrupt mid-stream).
        seed: text seed.
        clock: clock used for ``delay_s``.
        tool_args: arguments of the tool call (a function of the last message, or a dict).
    """

    name = "scripted"

    def __init__(
        self,
        *,
        tool: str | None = "work",
        chunks: int = 12,
        chunk_chars: int = 92,
        delay_s: float = 0.0,
        seed: int = 0,
        clock: Clock | None = None,
        tool_args: Callable[[dict[str, Any]], dict[str, Any]] | dict[str, Any] | None = None,
    ) -> None:
        self.tool, self.chunks, self.delay_s, self.seed = tool, chunks, delay_s, seed
        self.clock = clock or RealClock()
        self.tool_args = tool_args
        words = _word_pool(seed)
        rng = random.Random(seed + 1)
        pool: list[str] = []
        for _ in range(4096):  # precomputed deltas keep the model off the profile
            s = ""
            while len(s) < chunk_chars:
                s += rng.choice(words) + " "
            pool.append(s[:chunk_chars])
        self._pool = pool
        self.calls = 0
        self._tools_seen: list[dict[str, Any]] | None = None
        self._tools_ok = False

    def _args(self, last: dict[str, Any]) -> dict[str, Any]:
        if callable(self.tool_args):
            out: dict[str, Any] = self.tool_args(last)
            return out
        if isinstance(self.tool_args, dict):
            return dict(self.tool_args)
        return {"query": str(last.get("content") or "")[:40]}

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        thread_id: str,
        turn: int,
    ) -> AsyncIterator[str | ToolCall]:
        # reads the last message only: an AgentSystem hands it its history still encoded
        self.calls += 1
        h = zlib.crc32(f"{self.seed}:{thread_id}:{turn}".encode())
        pool, n = self._pool, len(self._pool)
        if self.delay_s:
            for i in range(self.chunks):
                await self.clock.sleep(self.delay_s)
                yield pool[(h + i * 2654435761) % n]
        else:  # the benchmark path: no per-chunk branch
            for i in range(self.chunks):
                yield pool[(h + i * 2654435761) % n]
        last = messages[-1] if messages else {}
        if self.tool and last.get("role") == "user" and self._offered(tools):
            yield ToolCall(id=f"call_{turn}", name=self.tool, arguments=self._args(last))

    def _offered(self, tools: list[dict[str, Any]]) -> bool:
        # The runtime passes the same schema list every time: remember the answer for it.
        if tools is not self._tools_seen:
            self._tools_seen = tools
            self._tools_ok = any(t["function"]["name"] == self.tool for t in tools)
        return self._tools_ok


class LLMClientModel:
    """Adapter from :class:`agentlab.llm.LLMClient` to :class:`Model`, streaming.

    Each completion is one ``client.stream(...)`` call: text deltas are yielded as they
    arrive (so an interrupt keeps the partial text), then the tool calls of the final
    ``stream.response``. If the runtime stops iterating (an interrupt), the client stream is
    closed at once, which releases its concurrency slot. The call record carries
    ``agent_id=<thread id>`` and labels ``{"stage": "thread_slice", "turn": n}``.

    Args:
        client: an ``LLMClient`` (or anything with the same ``stream`` method).
        per_call: ``per_call(messages) -> overrides`` merged into each call, e.g. to force a
            tool call after user text and none after a tool result with the simulator:
            ``lambda m: {"sim_tool_call_p": 1.0 if m[-1]["role"] == "user" else 0.0}``.
            ``messages`` is a read-only sequence: an ``AgentSystem`` hands a ``sim/``
            model its history still encoded (``llm.encoded_history.EncodedHistory``),
            other clients get a list.
        **overrides: passed to every call (``sim_completion_tokens=275``, ``temperature``).

    Example:
        >>> from agentlab.llm import LLMClient
        >>> model = LLMClientModel(LLMClient("sim/instant"), sim_tool_call_p=1.0)
    """

    def __init__(
        self,
        client: Any,
        *,
        per_call: Callable[[Sequence[dict[str, Any]]], dict[str, Any]] | None = None,
        **overrides: Any,
    ) -> None:
        self.client = client
        self.per_call = per_call
        self.overrides = overrides
        self.name = str(getattr(client, "model", "llm"))
        # a sim/ model is served in process (SimServer.plan reads the messages it is
        # given as a sequence): it may be handed an EncodedHistory as it stands
        self._in_process = self.name.startswith("sim/")
        self.responses = 0

    def record_to(self, services: RunServices) -> None:
        """Send this model's calls through ``services.llm``, so each lands in ``llm_calls``.

        :class:`~agentlab.runtime.threads.system.AgentSystem` does this when it has a run
        directory; a client that already records (a ``RecordingLLM``) is left as it is.
        """
        from agentlab.runtime.services import RecordingLLM

        if not isinstance(self.client, RecordingLLM):
            self.client = services.llm

    def open(
        self,
        messages: Sequence[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        thread_id: str,
        turn: int,
        whole_when_ready: bool = True,
    ) -> Any:
        """The client's stream of one completion, not started: iterating it yields the
        text deltas, then :meth:`finished` gives its tool calls. :meth:`stream` iterates
        it; ``AgentSystem`` iterates it directly (one async generator fewer per delta).

        ``whole_when_ready``: a reply the simulator has ready whole comes as one delta
        (``LLMStream.whole_when_ready``): ``AgentSystem`` joins the deltas, and nothing can
        happen between those of a ready reply. :meth:`stream` keeps the pieces for its
        consumers (a reply still being decoded streams in pieces either way)."""
        kw = self.overrides
        if self.per_call is not None:
            kw = {**kw, **self.per_call(messages)}
        if type(messages) is EncodedHistory and not self._in_process:
            messages = messages.as_list()  # a transport serializes the list it is given
        s = self.client.stream(
            messages,
            tools=tools or None,
            agent_id=thread_id,
            labels={"stage": "thread_slice", "turn": turn},
            **kw,
        )
        if type(s) is LLMStream:
            # No loop turn before the attempt starts (LLMStream._run): with an instant
            # simulator a slice then runs to its commit in one step instead of suspending
            # with its decoded history alive while every other ready thread decodes its
            # own (suspended_agents sim, 400 agents: GC 13 -> 1 us per completion,
            # KiB/idle 26 -> 16). A recording client (run_dir) keeps its records' order.
            s.start_at_once = True
            s.whole_when_ready = whole_when_ready
        return s

    async def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        thread_id: str,
        turn: int,
    ) -> AsyncIterator[str | ToolCall]:
        s = self.open(messages, tools, thread_id=thread_id, turn=turn, whole_when_ready=False)
        async with aclosing(s.__aiter__()) as deltas:
            async for delta in deltas:
                if delta:
                    yield delta
        for tc in self.finished(s):
            yield tc

    def answered(self, s: Any) -> tuple[str, list[ToolCall]] | None:
        """The text and tool calls of :meth:`open`'s stream ``s`` when the simulator answers
        it at once (``LLMStream.ready_text``: the call done with no async generator run;
        counted in ``responses``), else ``None`` with nothing done: iterate it, then
        :meth:`finished`. For ``AgentSystem``, which joins the deltas: the same text."""
        text = s.ready_text() if type(s) is LLMStream else None
        return None if text is None else (text, self.finished(s))

    def finished(self, s: Any) -> list[ToolCall]:
        """The tool calls of :meth:`open`'s stream ``s``, iterated to its end (counted in
        ``responses``)."""
        resp = s.response
        self.responses += 1
        return [] if resp is None else list(resp.tool_calls)
