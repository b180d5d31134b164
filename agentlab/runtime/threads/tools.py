"""Asynchronous tools: a tool starts work and returns; results arrive through the queue.

``start(ctx, args)`` may return

- ``None`` — the tool keeps ``ctx`` and calls ``ctx.result(...)`` later (from a callback,
  another task, another process via :meth:`AgentSystem.send`);
- a ``str``/JSON value — an immediate result (still delivered through the queue, so the
  thread's next slice picks it up like any other);
- an awaitable — run as a background task; its return value is the final result. A tool
  may also stream: call ``ctx.result(chunk, final=False)`` any number of times, then a final
  one. The first chunk answers the tool call; later chunks reach the model as synthetic
  ``receive_event`` pairs (see :mod:`agentlab.runtime.threads.shapes`).

A tool is started again after a crash (the runtime re-dispatches unanswered calls), with
the same ``ctx.call_id``: external side effects should use it as an idempotency key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentlab.core.tools import function_tool
from agentlab.runtime.threads.records import Delivery

__all__ = ["Tool", "ToolContext", "thread_tool"]


class ToolContext:
    """Handle a running tool uses to deliver its result(s) to the calling thread."""

    __slots__ = ("_chunk", "_send", "call_id", "name", "thread_id")

    def __init__(self, send: Callable[[Delivery], Any], thread_id: str, call_id: str, name: str):
        self._send = send
        self.thread_id, self.call_id, self.name = thread_id, call_id, name
        self._chunk = 0

    def result(self, content: Any, *, final: bool = True) -> None:
        """Deliver a result (``final=False``: one chunk of a stream; more will follow)."""
        # every field in order up to chunk (records.Delivery): no keyword matching
        d = Delivery(
            self.thread_id, "tool_result", content, "", self.call_id, final, self.name, self._chunk
        )
        self._chunk += 1
        self._send(d)


@dataclass(slots=True)
class Tool:
    """A named asynchronous tool with an OpenAI function schema.

    Args:
        name: function name the model calls.
        start: ``start(ctx, args)``; see the module docstring for what it may return.
        description: shown to the model.
        parameters: JSON schema of the arguments.
    """

    name: str
    start: Callable[[ToolContext, dict[str, Any]], Any]
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry."""
        return function_tool(self.name, self.description, self.parameters)


def thread_tool(
    name: str | None = None, *, description: str = "", parameters: dict[str, Any] | None = None
) -> Callable[[Callable[[ToolContext, dict[str, Any]], Any]], Tool]:
    """Decorator turning ``start(ctx, args)`` into a :class:`Tool`."""

    def wrap(fn: Callable[[ToolContext, dict[str, Any]], Any]) -> Tool:
        return Tool(
            name or fn.__name__,
            fn,
            description or (fn.__doc__ or "").strip(),
            parameters or {"type": "object", "properties": {}},
        )

    return wrap
