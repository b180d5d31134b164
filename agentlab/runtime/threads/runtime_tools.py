"""The runtime's own tools: agent-to-agent messages and parent/child threads.

They go through the same queue as everything else: dispatching ``send_message`` queues a
``message`` delivery for the peer and a ``tool_result`` for the caller. Every delivery id is
derived from the caller's tool-call id, so re-dispatching after a crash is idempotent.

| tool | effect | result for the caller |
|---|---|---|
| ``receive_event`` | nothing: the thread waits; the next event answers this call | the event |
| ``send_message(to, text)`` | ``message`` to ``to`` | ``"delivered"`` |
| ``spawn_agent(task)`` | new child ``<parent>.<call id>``; ``task`` delivery to it | the child id |
| ``report(text)`` | ``report`` to the parent | ``"reported"`` |
| ``close_agent(id)`` | ``close`` to a child | ``"closed"`` |
"""

from __future__ import annotations

import re
from typing import Protocol

from agentlab.core.records import ToolCall
from agentlab.runtime.threads.records import Delivery, ThreadState

__all__ = ["ThreadDesk", "child_id", "dispatch_runtime_tool", "note_runtime_call"]


class ThreadDesk(Protocol):
    """What the runtime tools need of an ``AgentSystem`` (declared here, so this module
    does not import ``system``, which imports it)."""

    def send(self, d: Delivery) -> int: ...

    def state(self, thread_id: str) -> ThreadState | None: ...


_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def child_id(parent: str, call_id: str) -> str:
    """The id of the child a ``spawn_agent`` call creates (deterministic)."""
    return f"{parent}.{_UNSAFE.sub('_', call_id)}"[:128]


def note_runtime_call(st: ThreadState, call: ToolCall) -> None:
    """State changes of a runtime call that must be persisted before it is dispatched."""
    if call.name == "spawn_agent":
        cid = child_id(st.thread_id, call.id)
        if cid not in st.children:
            st.children.append(cid)


def _result(system: ThreadDesk, tid: str, call: ToolCall, text: str) -> None:
    system.send(Delivery(tid, "tool_result", text, call_id=call.id, sender=call.name))


def dispatch_runtime_tool(system: ThreadDesk, tid: str, call: ToolCall) -> None:
    """Carry out one runtime tool call (see the module table)."""
    args, name = call.arguments, call.name
    if name == "receive_event":
        return
    if name == "send_message":
        to, text = str(args.get("to", "")), str(args.get("text", ""))
        if not to or to == tid:
            _result(system, tid, call, f"error: invalid recipient {to!r}")
            return
        system.send(Delivery(to, "message", text, f"msg:{tid}:{call.id}", sender=tid))
        _result(system, tid, call, "delivered")
    elif name == "spawn_agent":
        child = child_id(tid, call.id)
        system.send(
            Delivery(child, "task", str(args.get("task", "")), f"spawn:{call.id}", sender=tid)
        )
        _result(system, tid, call, child)
    elif name == "report":
        st = system.state(tid)
        parent = st.parent if st is not None else None
        if parent is None:
            _result(system, tid, call, "error: this thread has no parent")
            return
        system.send(
            Delivery(
                parent, "report", str(args.get("text", "")), f"report:{tid}:{call.id}", sender=tid
            )
        )
        _result(system, tid, call, "reported")
    elif name == "close_agent":
        target = str(args.get("id", ""))
        st = system.state(tid)
        if st is None or target not in st.children:
            known = st.children if st is not None else []
            _result(system, tid, call, f"error: {target!r} is not a child; children: {known}")
            return
        system.send(Delivery(target, "close", None, f"close:{call.id}", sender=tid))
        _result(system, tid, call, "closed")
