"""Keeping a notebook's stop button working while a long ``await`` waits.

ipykernel delivers an interrupt to a cell that awaits a coroutine only when the cell's
event loop next wakes up (ipython/ipykernel#881, still so in 7.x): a run that waits — paused
from its live view, sleeping a long ``tick_seconds`` on the real clock, waiting on a slow
provider — ignores the stop button until the wait ends. Measured in a real kernel: an
interrupt 4 s into a 10 s tick took effect at 10.6 s; a paused run never stops. Inside a
kernel, :func:`wake_for_interrupts` keeps a timer that wakes the loop a few times a
second, so the interrupt lands within one period. Outside a kernel it does nothing.

The timer only wakes the loop: it runs no code of the run and is never a ready handle
when the virtual clock looks for an idle loop, so simulated runs are unchanged.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["WAKE_PERIOD_S", "in_kernel", "wake_for_interrupts"]

#: how often the loop wakes inside a kernel (the stop button's worst-case delay)
WAKE_PERIOD_S = 0.2


def in_kernel() -> bool:
    """True inside a running IPython kernel (a notebook), False in a script or a terminal
    IPython (whose Ctrl-C reaches the loop directly)."""
    ipython = sys.modules.get("IPython")
    if ipython is None or "ipykernel" not in sys.modules:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


@contextmanager
def wake_for_interrupts(period: float = WAKE_PERIOD_S) -> Iterator[None]:
    """Wake the running loop every ``period`` seconds while inside, when in a kernel."""
    if not in_kernel():
        yield
        return
    loop = asyncio.get_running_loop()
    handle: asyncio.TimerHandle | None = None

    def wake() -> None:
        nonlocal handle
        handle = loop.call_later(period, wake)

    wake()
    try:
        yield
    finally:
        if handle is not None:
            handle.cancel()
