"""Per-process registry of live LLM resources, keyed by client config and clock.

An :class:`~agentlab.llm.client.LLMClient` is only configuration; what it learns and owns
at run time (AIMD limiter, simulated server, usage totals, request-id counter) lives here,
created on first use. Entries are keyed by the client's JSON config and by its clock (all
``RealClock`` instances share one entry), so successive Ray tasks in one worker process —
each rebuilding the client from a pickle — reuse the same limiter and keep what it learned.
A fresh ``VirtualClock`` gets fresh state, which makes simulated studies reproducible.
Asyncio objects (the concurrency gate's waiters) are kept per event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import weakref
from typing import Any

from agentlab.core.clock import Clock, RealClock
from agentlab.core.records import Usage
from agentlab.llm.aimd import AIMDLimiter, ConcurrencyGate
from agentlab.llm.sim_backend import SimServer

__all__ = ["REAL_CLOCK", "Live", "get_live", "reset_live"]

#: the process-wide real clock every unpickled client uses
REAL_CLOCK = RealClock()


class Live:
    """Run-time state shared by every equal client in this process (and clock)."""

    __slots__ = (
        "__weakref__",
        "_counter",
        "_gates",
        "_last_gate",
        "_last_loop",
        "limiter",
        "prefix",
        "server",
        "usage",
    )

    def __init__(self, limiter: AIMDLimiter, server: SimServer | None, prefix: str) -> None:
        self.limiter = limiter
        self.server = server
        self.usage = Usage()
        self.prefix = prefix
        self._counter = itertools.count(1)
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ConcurrencyGate] = (
            weakref.WeakKeyDictionary()
        )
        self._last_loop: Any = None
        self._last_gate: ConcurrencyGate | None = None

    def next_id(self) -> str:
        """A request id unique in this process (counter-based: cheap)."""
        return f"{self.prefix}{next(self._counter)}"

    def gate(self) -> ConcurrencyGate:
        """The concurrency gate of the running event loop."""
        loop = asyncio.get_running_loop()
        if loop is self._last_loop and self._last_gate is not None:
            return self._last_gate
        g = self._gates.get(loop)
        if g is None:
            g = ConcurrencyGate(self.limiter)
            self._gates[loop] = g
        self._last_loop, self._last_gate = loop, g
        return g

    def use_gate(self, gate: ConcurrencyGate) -> None:
        """Make ``gate`` (over this limiter) the running event loop's gate.

        For the time server of a virtual run on Ray, whose gate also takes calls that
        queued before the server heard of them (``runtime/vclock_server.py``).
        """
        loop = asyncio.get_running_loop()
        self._gates[loop] = gate
        self._last_loop, self._last_gate = loop, gate

    def in_flight(self) -> int:
        """Calls in flight in all event loops of this process."""
        return sum(g.in_flight for g in self._gates.values())

    def export_state(self) -> dict[str, Any]:
        """Limiter, simulated server, usage and the request-id counter, JSON-safe."""
        n = next(self._counter)
        self._counter = itertools.count(n)  # peeked, not consumed
        u = self.usage
        return {
            "schema_version": 1,
            "next_request": n,
            "usage": [u.prompt_tokens, u.completion_tokens, u.calls, u.errors],
            "limiter": self.limiter.export_state(),
            "server": self.server.export_state() if self.server is not None else None,
        }

    def restore_state(self, state: dict[str, Any]) -> None:
        """Load :meth:`export_state` output (e.g. when a society resumes)."""
        self._counter = itertools.count(int(state["next_request"]))
        self.usage = Usage(*(int(x) for x in state["usage"]))
        self.limiter.restore_state(state["limiter"])
        if self.server is not None and state.get("server") is not None:
            self.server.restore_state(state["server"])


_REGISTRY: weakref.WeakKeyDictionary[Clock, dict[str, Live]] = weakref.WeakKeyDictionary()
_PROCESS_PREFIX = f"r{os.getpid():x}{os.urandom(2).hex()}-"


def get_live(
    key: str,
    clock: Clock,
    *,
    limiter_opts: dict[str, Any],
    sim: tuple[Any, int] | None,
) -> Live:
    """The live state for (config ``key``, ``clock``), created on first use.

    ``sim`` is ``(profile, seed)`` for simulated models, None for real providers.
    """
    if isinstance(clock, RealClock):
        clock = REAL_CLOCK
    per_clock = _REGISTRY.get(clock)
    if per_clock is None:
        per_clock = _REGISTRY[clock] = {}
    live = per_clock.get(key)
    if live is None:
        server = SimServer(sim[0], sim[1], clock) if sim is not None else None
        # Under a virtual clock ids restart per clock, so a rerun gives identical records.
        prefix = _PROCESS_PREFIX if not clock.is_virtual else f"v{len(per_clock)}-"
        live = per_clock[key] = Live(AIMDLimiter(**limiter_opts), server, prefix)
    return live


def reset_live() -> None:
    """Forget all live state in this process (tests; a new study in the same kernel)."""
    _REGISTRY.clear()
