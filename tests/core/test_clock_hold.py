"""VirtualClock.hold: work outside the event loop (a sandbox worker process, a thread) takes
no virtual time, and held bodies run one at a time in the order they entered, so a codegen
society's virtual times do not depend on the machine's speed."""

from __future__ import annotations

import asyncio
import time

from agentlab.core.clock import RealClock, VirtualClock, outside_loop


async def test_time_stands_still_while_a_body_waits_outside_the_loop() -> None:
    clock = VirtualClock()
    log: list[tuple[str, float]] = []

    async def sleeper() -> None:
        await clock.sleep(0.001)  # due long before the thread below returns
        log.append(("sleeper woke", clock.now()))

    async def held() -> None:
        async with clock.hold():
            log.append(("held start", clock.now()))
            await asyncio.to_thread(time.sleep, 0.2)  # real time, off the loop
            log.append(("held end", clock.now()))

    await asyncio.gather(sleeper(), held())
    # without the hold the clock takes the thread's wait for idleness: the sleeper wakes
    # during it and the body ends at virtual time 0.001
    assert log == [("held start", 0.0), ("held end", 0.0), ("sleeper woke", 0.001)]


async def test_held_bodies_run_one_at_a_time_in_entry_order() -> None:
    clock = VirtualClock()
    order: list[str] = []

    async def body(name: str, wall: float) -> None:
        async with clock.hold():
            order.append(f"{name}+")
            await asyncio.to_thread(time.sleep, wall)
            order.append(f"{name}-")

    # the first to enter is the slowest: it still finishes before the others start
    await asyncio.gather(body("a", 0.15), body("b", 0.0), body("c", 0.05))
    assert order == ["a+", "a-", "b+", "b-", "c+", "c-"]


async def test_held_work_that_sleeps_on_the_clock_still_advances_it() -> None:
    clock = VirtualClock()

    async def other() -> None:
        await clock.sleep(5.0)

    async def held() -> float:
        async with clock.hold():
            await clock.sleep(2.0)  # e.g. a tool with a simulated latency
            return clock.now()

    _, t = await asyncio.wait_for(asyncio.gather(other(), held()), 10)
    assert t == 2.0 and clock.now() == 5.0


async def test_outside_loop_is_a_no_op_on_real_time() -> None:
    async with outside_loop(RealClock()):
        pass
    async with outside_loop(None):
        pass
