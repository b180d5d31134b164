"""Keeping a notebook's stop button working while a cell awaits.

ipykernel delivers an interrupt to a cell that awaits a coroutine only when the cell's
event loop next wakes up (ipython/ipykernel#881, still so in 7.x): a cell that waits — a
run paused from its live view, a long ``tick_seconds`` on the real clock, a long reply from
a provider, a thread runtime draining a slow tool, even ``await asyncio.sleep(20)`` —
ignores the stop button until the wait ends. Measured in a real kernel (ipykernel 7.4):
an interrupt 3 s into ``await asyncio.sleep(20)`` took effect at 20.1 s, into an awaited
27 s ``llm.complete`` at 27.0 s; a paused run never stopped.

``import agentlab`` inside a kernel calls :func:`wake_cells_in_kernel`: while a cell runs
(IPython's ``pre_run_cell`` to ``post_run_cell``, and the rest of the cell that imported
agentlab), a timer wakes the kernel's loop every :data:`WAKE_PERIOD_S`, so the interrupt
lands within one period, whatever the cell awaits. One mechanism for every cell, instead of
a hold in each API that may wait. Outside a kernel nothing is installed.

The timer only wakes the loop: it runs no code of a run, and the virtual clock, which looks
for an idle loop, sees its wake-up as one more round before the same next event, so
simulated runs are unchanged (tests/runtime/test_kernel_interrupt.py compares the rows).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

__all__ = ["WAKE_PERIOD_S", "LoopWaker", "wake_cells_in_kernel"]

#: how often the loop wakes while a cell runs (the stop button's worst-case delay)
WAKE_PERIOD_S = 0.2


def _kernel_shell() -> Any:
    """The running kernel's IPython shell, or ``None`` (a script, a terminal IPython —
    whose Ctrl-C reaches the loop directly)."""
    ipython = sys.modules.get("IPython")
    if ipython is None or "ipykernel" not in sys.modules:
        return None
    shell = ipython.get_ipython()
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None


class LoopWaker:
    """A timer that wakes the running event loop every ``period`` seconds until stopped."""

    __slots__ = ("_handle", "period")

    def __init__(self, period: float = WAKE_PERIOD_S) -> None:
        self.period = period
        self._handle: asyncio.TimerHandle | None = None

    def start(self, *_: Any) -> None:
        """Start on the running loop (a no-op without one, or when already started).
        Takes and ignores IPython's ``pre_run_cell`` argument."""
        if self._handle is not None and not self._handle.cancelled():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._wake(loop)

    def _wake(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handle = loop.call_later(self.period, self._wake, loop)

    def stop(self, *_: Any) -> None:
        """Stop (takes and ignores IPython's ``post_run_cell`` argument)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


_CELL_WAKER: LoopWaker | None = None


def wake_cells_in_kernel() -> None:
    """Inside a kernel, wake its loop while any cell runs, from now on (installed once)."""
    global _CELL_WAKER
    shell = _kernel_shell()
    if shell is None or _CELL_WAKER is not None:
        return
    _CELL_WAKER = waker = LoopWaker()
    shell.events.register("pre_run_cell", waker.start)
    shell.events.register("post_run_cell", waker.stop)
    waker.start()  # the cell that imports agentlab runs already (its post_run_cell stops it)
