"""Running a coroutine from synchronous code whose thread already runs an event loop.

A notebook cell that calls a blocking wrapper (``Society.run_sync``) runs inside the
kernel's loop, which cannot run a second coroutine to completion: the coroutine gets a
fresh loop in a worker thread. The kernel's interrupt (the stop button, Ctrl-C) then
raises ``KeyboardInterrupt`` in the waiting cell, not in the worker: left alone, the work
would go on behind a cell that looks finished (and an executor's ``with`` block would
hold the interrupt until the work ended). Here the interrupt is handed to the work as
what the stop button does to an awaited cell — its task is cancelled — and the cell waits
for it to wind down and returns what the coroutine returns on cancellation.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_in_worker_loop"]

T = TypeVar("T")


class _Work:
    """The worker's side: its loop and task (once running), and the outcome."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[Any] | None = None
        self.started = threading.Event()
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def cancel(self) -> None:
        """Cancel the task from another thread (once it has started)."""
        self.started.wait()
        loop, task = self.loop, self.task
        if loop is not None and task is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop closed in between: nothing left to cancel
                pass


def run_in_worker_loop(coro: Coroutine[Any, Any, T], name: str = "agentlab-run") -> T:
    """Run ``coro`` to completion on a fresh event loop in a worker thread; return its
    result or raise its error.

    A ``KeyboardInterrupt`` while waiting cancels ``coro``'s task and waits for it to end,
    then returns (or raises) what ``coro`` does on cancellation (``Society.run``: this
    call's totals, status ``stopped``; a coroutine that does not handle it raises
    ``CancelledError``). A second interrupt while it winds down is raised at once.
    """
    work = _Work()

    async def main() -> T:
        work.loop, work.task = asyncio.get_running_loop(), asyncio.current_task()
        work.started.set()
        return await coro

    def body() -> None:
        try:
            work.result = asyncio.run(main())
        except BaseException as exc:  # handed to the waiting thread
            work.error = exc
        finally:
            work.started.set()  # (a failure before main ran: nobody waits for it)
            work.done.set()

    threading.Thread(target=body, name=name, daemon=True).start()
    try:
        work.done.wait()
    except KeyboardInterrupt:
        work.cancel()
        work.done.wait()  # a second interrupt propagates from here
    if work.error is not None:
        raise work.error
    return work.result  # type: ignore[no-any-return]
