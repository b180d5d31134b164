"""Spans of a thread system: thread → slice → call.

One trace per thread. Each slice is an ``agent.slice`` span (``invoke_agent``: the slice
is one invocation of the thread's agent); the completion it makes is its ``llm.call``
child (through the run's ``RecordingLLM``, which takes the slice as the current span), and
a tool it dispatches is an ``execute_tool`` child (``thread.tool``) that lasts from the
dispatch to the tool's final result (it ends after its slice: the thread was suspended
meanwhile). The thread's own span is derived at export from its slices
(:mod:`agentlab.store.span_tree`): its ids come from (run, thread id), so slices that
different workers ran, before and after a crash, all meet under it. Runtime tools
(``send_message``, ``spawn_agent``...) act inside the slice and get no span of their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agentlab.store.span_tree import derived_ids
from agentlab.store.trace import Tracer, genai_agent_attrs, genai_tool_attrs, get_tracer

if TYPE_CHECKING:
    from agentlab.core.clock import Clock
    from agentlab.core.records import ToolCall
    from agentlab.runtime.threads.records import Delivery

__all__ = ["ThreadSpans", "traced_send"]

_THREAD = "agentlab.thread.id"


class _System(Protocol):
    """What the span hooks read of an :class:`~agentlab.runtime.threads.system.AgentSystem`
    (a protocol, so this module does not import the system that imports it)."""

    run_dir: Path | None
    clock: Clock

    def _slice(self, seq: int, d: Delivery, hot: Any) -> Awaitable[tuple[str, Any]]: ...

    def send(self, d: Delivery) -> Any: ...


class ThreadSpans:
    """Writes the slice and tool spans of one :class:`AgentSystem` with a run directory."""

    def __init__(self, run_dir: Path, clock: Clock) -> None:
        self.tracer: Tracer = get_tracer(run_dir, clock=clock)
        self.run_id = Path(run_dir).name  # as RunServices names the run

    @staticmethod
    def attach(system: _System) -> tuple[ThreadSpans | None, Any]:
        """``(spans, run_slice)`` for ``system``: ``(None, system._slice)`` without a run
        directory, else its spans and ``_slice`` wrapped by :meth:`wrap`."""
        if system.run_dir is None:
            return None, system._slice
        spans = ThreadSpans(system.run_dir, system.clock)
        return spans, spans.wrap(system._slice)

    def thread_parent(self, thread_id: str) -> tuple[str, str]:
        """The ids of the thread's (derived) root span."""
        return derived_ids(self.run_id, "thread", thread_id)

    def wrap(
        self, run_slice: Callable[[int, Delivery, Any], Awaitable[tuple[str, Any]]]
    ) -> Callable[[int, Delivery, Any], Awaitable[tuple[str, Any]]]:
        """``run_slice`` inside an ``agent.slice`` span (the current span while it runs)."""
        tracer = self.tracer

        async def traced(seq: int, d: Delivery, hot: Any) -> tuple[str, Any]:
            tid = d.thread_id
            attrs = genai_agent_attrs(tid, tid)
            attrs[_THREAD] = tid
            attrs["gen_ai.conversation.id"] = tid
            attrs["agentlab.delivery"] = d.kind
            span = tracer.open_span("agent.slice", self.thread_parent(tid), **attrs)
            token = tracer.activate(span)
            try:
                action, hot = await run_slice(seq, d, hot)
            except BaseException as exc:
                tracer.extend([tracer.finish_row(span, "error", repr(exc)[:300])])
                raise
            finally:
                tracer.deactivate(token)
            tracer.extend([tracer.finish_row(span, "ok", None, **{"agentlab.action": action})])
            return action, hot

        return traced

    def tool_send(
        self, send: Callable[[Delivery], Any], thread_id: str, call_id: str, name: str
    ) -> Callable[[Delivery], Any]:
        """``send`` that ends the tool's ``execute_tool`` span at its final result."""
        tracer = self.tracer
        attrs = genai_tool_attrs(name, call_id, thread_id)
        attrs[_THREAD] = thread_id
        span = tracer.open_span("thread.tool", Tracer.current_span() or self.thread_parent(
            thread_id), kind="internal", **attrs)  # fmt: skip

        def traced(d: Delivery) -> Any:
            if getattr(d, "final", True) and not span.ended:
                failed = isinstance(d.payload, str) and d.payload.startswith("error: ")
                tracer.extend(
                    [
                        tracer.finish_row(
                            span, "error" if failed else "ok", d.payload[:300] if failed else None
                        )
                    ]
                )
            return send(d)

        return traced


def traced_send(system: _System, thread_id: str, call: ToolCall) -> Callable[[Delivery], Any]:
    """The ``send`` a tool's context gets: ``system.send``, through the tool's
    ``execute_tool`` span when the system writes spans."""
    spans: ThreadSpans | None = getattr(system, "_spans", None)
    if spans is None:
        return system.send
    return spans.tool_send(system.send, thread_id, call.id, call.name)
