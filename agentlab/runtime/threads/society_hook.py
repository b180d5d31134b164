"""Hook for the tick-based ``Society``: start a long tool now, collect its result later.

A society agent's ``step(tick)`` calls :meth:`LongToolHook.start` to start a tool; the tool's
result(s) land in the thread store's durable queue under the agent's id (the agent holds
nothing in between: no task, no future). In a later tick the agent calls
:meth:`LongToolHook.collect` and gets the results that arrived, each exactly once.

```python
hook = LongToolHook(SQLiteThreadStore(run_dir / "threads.db"), [build_tool])
call_id = hook.start(agent_id, "build", {"target": "x"}, dedup_id=f"{agent_id}:{tick}")
...  # later ticks
for r in hook.collect(agent_id):
    handle(r.call_id, r.payload, r.final)
```
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterable
from typing import Any

from agentlab.core.ids import validate_agent_id
from agentlab.errors import UnknownNameError
from agentlab.runtime.threads.records import Delivery
from agentlab.runtime.threads.stores import ThreadStore
from agentlab.runtime.threads.tools import Tool, ToolContext

__all__ = ["LongToolHook"]


class LongToolHook:
    """Start tools for non-thread agents and collect their results through the store queue.

    Args:
        store: the thread store whose queue holds the results (durable with SQLite).
        tools: the tools agents may start.
    """

    def __init__(self, store: ThreadStore, tools: Iterable[Tool]) -> None:
        self.store = store
        self.tools = {t.name: t for t in tools}
        self._tasks: set[asyncio.Future[Any]] = set()

    def _send(self, d: Delivery) -> None:
        self.store.enqueue(d.thread_id, d.encode())

    def start(self, agent_id: str, name: str, args: dict[str, Any], *, dedup_id: str) -> str:
        """Start ``name(args)`` for ``agent_id``; returns the call id (``dedup_id``-based).

        Must be called from a running event loop when the tool is a coroutine.
        """
        validate_agent_id(agent_id)
        tool = self.tools.get(name)
        if tool is None:
            raise UnknownNameError("tool", name, list(self.tools))
        call_id = f"hook_{dedup_id}"
        ctx = ToolContext(self._send, agent_id, call_id, name)
        r = tool.start(ctx, args)
        if inspect.isawaitable(r):

            async def finish() -> None:
                out = await r
                if out is not None:
                    ctx.result(out)

            fut = asyncio.ensure_future(finish())
            self._tasks.add(fut)
            fut.add_done_callback(self._tasks.discard)
        elif r is not None:
            ctx.result(r)
        return call_id

    def collect(self, agent_id: str, *, limit: int = 1000) -> list[Delivery]:
        """Results queued for ``agent_id`` (removed from the queue; oldest first)."""
        rows = [r for r in self.store.claim(limit=10**9) if r[1] == agent_id][:limit]
        self.store.ack(s for s, _, _ in rows)
        return [Delivery.decode(b) for _, _, b in rows]

    async def wait_idle(self) -> None:
        """Wait until every tool coroutine started here has finished (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
