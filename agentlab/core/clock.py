"""Clocks: every timestamp in agentlab records comes from one.

``RealClock`` is wall time. ``VirtualClock`` is a discrete-event clock for asyncio: a
coroutine that ``await clock.sleep(dt)`` is parked in a heap, and when nothing else in the
event loop is runnable the clock jumps to the earliest wake-up. Waiting therefore costs no
wall time, while the order and spacing of events is exactly what real time would give.

The virtual clock works in any running loop (scripts, Jupyter's loop) as long as everything
that "takes time" in the simulation waits through ``clock.sleep``; work that blocks in
threads or sockets is not modelled (use the real clock for real providers and for Ray).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import heapq
import itertools
import time
import types
import weakref
from collections.abc import AsyncIterator, Callable, Generator
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Clock",
    "HorizonClock",
    "RealClock",
    "VirtualClock",
    "clock_from_name",
    "outside_loop",
    "settle",
]


_Future = asyncio.Future  # what BaseEventLoop.create_future makes (the C future)

#: the clock whose :meth:`VirtualClock.hold` the running task is inside
_HOLDING: contextvars.ContextVar[VirtualClock | None] = contextvars.ContextVar(
    "agentlab_clock_holding", default=None
)


@types.coroutine
def _yield_once() -> Generator[None, None, None]:
    """What ``await asyncio.sleep(0)`` does (its ``__sleep0``: one bare yield, the task
    rescheduled at the back of the ready queue) without its outer coroutine: the clock's
    driver yields once per event-loop round, about eight rounds per agent-step."""
    yield


@runtime_checkable
class Clock(Protocol):
    """Source of time for records and for simulated waiting."""

    is_virtual: bool

    def now(self) -> float:
        """Current time in seconds."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        ...


class RealClock:
    """Wall-clock time (``time.time()``) and ``asyncio.sleep``."""

    is_virtual = False

    #: ``time.time`` itself: a builtin is not bound as a method, so ``clock.now()`` is one C
    #: call without a Python frame (six of them per ``sim/instant`` agent-step)
    now = staticmethod(time.time)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (RealClock, ())

    def __repr__(self) -> str:
        return "RealClock()"


class VirtualClock:
    """Discrete-event time for asyncio; see the module docstring.

    Args:
        start: the time ``now()`` returns before anything has slept.
    """

    is_virtual = True

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._driver: asyncio.Task[None] | _Driver | None = None
        self._wakeup: asyncio.Event | None = None
        self._holds = 0
        self._held_sleeps = 0  # sleeps begun inside a hold (the held work's own waits)
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._unheld: asyncio.Event | None = None
        self._hold_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        driver = self._driver
        # about six sleeps per agent-step: a running _Driver's fields are read directly,
        # and on a loop that makes plain futures one is made without create_future's frame
        if type(driver) is _Driver and driver._loop is loop and not driver._done:
            fut: asyncio.Future[None] = (
                _Future(loop=loop) if driver._plain_futures else loop.create_future()
            )
            started = True
        else:
            fut = loop.create_future()
            started = not (driver is None or driver.done() or driver.get_loop() is not loop)
        # max(0.0, seconds) as a comparison (nan and negative waits are 0.0 either way)
        heapq.heappush(
            self._heap, (self._now + (seconds if seconds > 0.0 else 0.0), next(self._seq), fut)
        )
        if not started:
            self._start_driver(loop)  # (tested here, not in the driver: no task per sleep)
        if not self._holds or _HOLDING.get() is not self:
            await fut
            return
        # held work that waits on this clock (a tool with a simulated latency): its time
        # passes, or the hold would wait for itself
        self._held_sleeps += 1
        self._wake_driver()
        try:
            await fut
        finally:
            self._held_sleeps -= 1

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Stop time while the body waits on work outside the loop (worker processes,
        threads, sockets), which the clock cannot see.

        Without it the clock takes the wait for idleness and jumps ahead, so how much virtual
        time passes (and what runs meanwhile) would depend on the machine's speed. Inside,
        time stands still; bodies run one at a time, in the order they entered, each once
        the loop has settled, so what they do (e.g. a sandboxed program's tool calls on the
        env) happens in the same order on every run. The wait costs no virtual time.
        """
        loop = asyncio.get_running_loop()
        if self._hold_lock is None or self._hold_lock[0] is not loop:
            self._hold_lock = (loop, asyncio.Lock())
        async with self._hold_lock[1]:
            self._holds += 1
            token = None
            try:
                await self._until_idle()
                token = _HOLDING.set(self)
                yield
            finally:
                if token is not None:
                    _HOLDING.reset(token)
                self._holds -= 1
                self._wake_driver()

    async def _until_idle(self) -> None:
        # The driver spins on sleep(0) while the loop is busy, so settle() beside it would
        # never see an empty ready queue: the driver itself says when the loop is idle.
        driver = self._driver
        loop = asyncio.get_running_loop()
        if driver is None or driver.done() or driver.get_loop() is not loop:
            await settle()
            return
        fut: asyncio.Future[None] = loop.create_future()
        self._idle_waiters.append(fut)
        await fut

    def _release_idle_waiters(self) -> None:
        for fut in self._idle_waiters:
            if not fut.done():
                fut.set_result(None)
        self._idle_waiters.clear()

    def _held(self) -> bool:
        return self._holds > 0 and self._held_sleeps == 0

    def _wake_driver(self) -> None:
        if self._unheld is not None:
            self._unheld.set()
        driver = self._driver
        if type(driver) is _Driver:
            driver.unpark()

    async def _wait_unheld(self) -> None:
        while self._held():
            self._unheld = asyncio.Event()
            await self._unheld.wait()

    def _start_driver(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the driver that wakes sleepers on ``loop`` (:meth:`sleep` calls it when no
        driver of this loop is running): a :class:`_Driver` on CPython's loop, else the
        task :meth:`_drive`."""
        ready = getattr(loop, "_ready", None)
        if isinstance(loop, asyncio.BaseEventLoop) and type(ready) is collections.deque:
            self._driver = _Driver(self, loop, ready)
            return
        self._driver = loop.create_task(self._drive(loop), name="agentlab-virtual-clock")

    async def _drive(self, loop: asyncio.AbstractEventLoop) -> None:
        ready = getattr(loop, "_ready", None)  # CPython's runnable-callback deque
        idle_rounds = 0
        try:
            while self._heap:
                # Drop cancelled sleepers (a cancelled sampler, a finished timeout) at once,
                # not at the next idle moment: a driver whose heap holds only those must end,
                # or it keeps the loop "busy" for another clock's driver and both wait forever.
                while self._heap and self._heap[0][2].cancelled():
                    heapq.heappop(self._heap)
                if not self._heap:
                    break
                await _yield_once()
                if ready is not None and len(ready) > 0:
                    idle_rounds = 0
                    continue
                # Loops without an inspectable ready queue: settle a few rounds instead.
                if ready is None and idle_rounds < 8:
                    idle_rounds += 1
                    continue
                idle_rounds = 0
                if self._holds and self._idle_waiters:  # a hold may start: the loop is idle
                    self._release_idle_waiters()
                    continue
                if self._held():  # idle only because a held body waits outside the loop
                    await self._wait_unheld()
                    continue
                wake, _, fut = heapq.heappop(self._heap)
                if fut.cancelled():
                    continue
                self._now = max(self._now, wake)
                fut.set_result(None)
        finally:  # nobody left to say when the loop is idle: let a waiting hold start
            self._release_idle_waiters()

    def rewind_to(self, t: float) -> bool:
        """Set ``now()`` back to ``t`` when nobody sleeps any more (every sleeper was
        cancelled): a run discarding a tick it did not commit goes back to the commit's time,
        as reopening the run would. Returns False (and changes nothing) while a live sleeper
        waits: time cannot move back under it."""
        heap = self._heap
        if any(not fut.cancelled() for _, _, fut in heap):
            return False
        heap.clear()
        self._now = float(t)
        return True

    def advance_to(self, t: float) -> None:
        """Move time forward to ``t`` (never back) without waking anyone.

        For a driver whose events ran elsewhere (the time server of a virtual run on Ray):
        afterwards ``now()`` is exactly ``t``, as if the last of those events had run here.
        """
        if self._heap and self._heap[0][0] < t:
            raise ValueError(f"advance_to({t}) would skip a sleeper due at {self._heap[0][0]}")
        self._now = max(self._now, float(t))

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now:.6f}, sleepers={len(self._heap)})"


#: the running drivers of each loop (two virtual clocks can run side by side on one loop)
_LOOP_DRIVERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Driver]] = (
    weakref.WeakKeyDictionary()
)


def _only_drivers(ready: Any) -> bool:
    """Whether every callback ready to run is a virtual-clock driver's round."""
    return all(type(getattr(h._callback, "__self__", None)) is _Driver for h in ready)


class _Driver:
    """:meth:`VirtualClock._drive` on CPython's event loop, as callbacks: the same rounds,
    checks and wake-ups in the same order, without a task.

    The task yielded once per event-loop round (about eight rounds per agent-step), each
    yield a ``call_soon`` that built a new ``Handle`` and stepped the task's coroutine.
    Here one ``Handle`` is put back on the loop's ready queue each round, where the task's
    next step was queued, so everything else in the loop runs in the same order.

    Clocks of their own on one loop (two societies run side by side in a notebook, a
    society beside an experiment): each driver takes the others' rounds for idle time, or
    each saw the other's round as work and both spun at time 0 forever. Each still wakes
    its sleepers only when nothing but drivers is ready, so its own runs happen as alone.
    """

    __slots__ = (
        "_clock",
        "_done",
        "_loop",
        "_parked",
        "_peers",
        "_plain_futures",
        "_ready",
        "_round",
        "_unpark",
    )

    def __init__(self, clock: VirtualClock, loop: asyncio.AbstractEventLoop, ready: Any) -> None:
        self._clock = clock
        self._loop = loop
        self._ready = ready
        self._done = False
        self._peers = _LOOP_DRIVERS.setdefault(loop, [])
        self._peers.append(self)
        #: the loop's create_future makes a plain asyncio.Future (sleep makes its own)
        self._plain_futures = type(loop).create_future is asyncio.BaseEventLoop.create_future
        self._parked = False  # held: waiting for unpark() (the task awaited an Event)
        # both run in the context current at the start, as the task's steps did
        context = contextvars.copy_context()
        self._round = asyncio.Handle(self._after_round, (), loop, context)
        self._unpark = asyncio.Handle(self._after_unpark, (), loop, context)
        ready.append(asyncio.Handle(self._top, (), loop, context))  # create_task's first step

    def done(self) -> bool:
        return self._done or self._loop.is_closed()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def _top(self) -> None:
        """The top of the task's loop: end when nobody sleeps, else yield one round."""
        heap = self._clock._heap
        while heap and heap[0][2].cancelled():
            heapq.heappop(heap)
        if not heap:
            self._done = True
            self._peers.remove(self)
            self._clock._release_idle_waiters()
            return
        self._ready.append(self._round)

    def _after_round(self) -> None:
        """The task after its yield: wake the earliest sleeper if the loop is idle."""
        ready = self._ready
        if ready and (len(self._peers) == 1 or not _only_drivers(ready)):
            self._top()
            return
        clock = self._clock
        if clock._holds and clock._idle_waiters:  # a hold may start: the loop is idle
            clock._release_idle_waiters()
        elif clock._held():  # idle only because a held body waits outside the loop
            self._parked = True
            return
        else:
            wake, _, fut = heapq.heappop(clock._heap)
            if not fut.cancelled():
                clock._now = max(clock._now, wake)
                fut.set_result(None)
        self._top()

    def unpark(self) -> None:
        """A hold ended or a held body slept: resume next round (the Event's wake-up)."""
        if self._parked:
            self._parked = False
            self._ready.append(self._unpark)

    def _after_unpark(self) -> None:
        if self._clock._held():
            self._parked = True
            return
        self._top()


class HorizonClock(VirtualClock):
    """A :class:`VirtualClock` that its owner drives, one wake-up at a time, up to a bound.

    Nothing runs on its own: :meth:`run` wakes sleepers in the same order as
    ``VirtualClock`` (earliest first, ties in the order the sleeps were made, the loop
    left to settle after each) while ``may_wake(t)`` allows the next one, and returns
    when it does not or nobody sleeps. :meth:`sleep_until` parks a coroutine until an
    exact time (``sleep(t - now())`` would round ``now + (t - now)``).
    """

    def _start_driver(self, loop: asyncio.AbstractEventLoop) -> None:
        return  # driven by run()

    async def sleep_until(self, t: float) -> None:
        """Wait until exactly ``t`` (at once, if ``t`` is not in the future)."""
        if t <= self._now:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (float(t), next(self._seq), fut))
        await fut

    def next_wake(self) -> float | None:
        """When the next live sleeper is due (None: nobody sleeps)."""
        heap = self._heap
        while heap and heap[0][2].cancelled():
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def due_times(self) -> set[float]:
        """When the live sleepers are due (to see ties with events planned elsewhere)."""
        return {w for w, _, f in self._heap if not f.cancelled()}

    async def run(self, may_wake: Callable[[float], bool]) -> None:
        """Wake sleepers while ``may_wake(next wake-up)``; return when settled and not."""
        while True:
            await settle()
            if self._held():
                await self._wait_unheld()
                continue
            t = self.next_wake()
            if t is None or not may_wake(t):
                return
            wake, _, fut = heapq.heappop(self._heap)
            self._now = max(self._now, wake)
            fut.set_result(None)


async def settle() -> None:
    """Return once the running loop has nothing else to run (only waits remain).

    For code that drives events by hand (``HorizonClock.run``, the workers of a virtual
    run on Ray): every coroutine woken so far has run until it waits again. Needs
    CPython's event loop (its runnable-callback deque).
    """
    ready = asyncio.get_running_loop()._ready  # type: ignore[attr-defined]
    while True:
        await asyncio.sleep(0)
        if not ready:
            return


def outside_loop(clock: Clock | None) -> contextlib.AbstractAsyncContextManager[None]:
    """``clock.hold()`` for a virtual clock (see :meth:`VirtualClock.hold`); otherwise a
    context that does nothing (real time simply passes while the body waits)."""
    if isinstance(clock, VirtualClock):
        return clock.hold()
    return contextlib.nullcontext()


def clock_from_name(name: str) -> Clock:
    """``"real"`` or ``"virtual"`` → a fresh clock."""
    if name == "real":
        return RealClock()
    if name == "virtual":
        return VirtualClock()
    from agentlab.errors import ConfigError

    raise ConfigError(f"unknown clock {name!r}; valid: 'real', 'virtual'")
