"""The model protocol of the thread runtime, a scripted model, and an ``LLMClient`` adapter.

A model streams one assistant turn: text deltas (``str``) and at most a few tool calls
(:class:`~agentlab.core.records.ToolCall`, normally last). The runtime accumulates the
deltas, so cancelling the stream mid-way leaves a partial turn it can keep.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from agentlab.core.clock import Clock, RealClock
from agentlab.core.records import ToolCall

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
        tool_args: Any = None,
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

    def _args(self, last: dict[str, Any]) -> dict[str, Any]:
        if callable(self.tool_args):
            out: dict[str, Any] = self.tool_args(last)
            return out
        if isinstance(self.tool_args, dict):
            return dict(self.tool_args)
        return {"query": str(last.get("content") or "")[:40]}

    async def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        thread_id: str,
        turn: int,
    ) -> AsyncIterator[str | ToolCall]:
        self.calls += 1
        h = zlib.crc32(f"{self.seed}:{thread_id}:{turn}".encode())
        pool, n = self._pool, len(self._pool)
        for i in range(self.chunks):
            if self.delay_s:
                await self.clock.sleep(self.delay_s)
            yield pool[(h + i * 2654435761) % n]
        last = messages[-1] if messages else {}
        if (
            self.tool
            and last.get("role") in {"user"}
            and any(t["function"]["name"] == self.tool for t in tools)
        ):
            yield ToolCall(id=f"call_{turn}", name=self.tool, arguments=self._args(last))


class LLMClientModel:
    """Adapter from :class:`agentlab.llm.LLMClient` to :class:`Model`.

    Uses ``client.stream(...)`` when the client has it (text deltas as they arrive), else
    ``client.complete(...)``; tool calls come from the final response. ``overrides`` are
    passed to every call (e.g. ``sim_tool_call_p=1.0`` for the simulator).
    """

    def __init__(self, client: Any, **overrides: Any) -> None:
        self.client = client
        self.overrides = overrides
        self.name = str(getattr(client, "model", "llm"))

    async def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        thread_id: str,
        turn: int,
    ) -> AsyncIterator[str | ToolCall]:
        labels = {"stage": "thread_slice", "turn": turn}
        resp = await self.client.complete(
            messages, tools=tools or None, agent_id=thread_id, labels=labels, **self.overrides
        )
        if resp.text:
            yield resp.text
        for tc in resp.tool_calls:
            yield tc
