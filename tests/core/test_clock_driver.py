"""The virtual clock's driver on CPython's loop (callbacks, ``_Driver``) wakes sleepers in
exactly the order, at exactly the times, of the task driver it replaced (``_drive``, still
used on loops without an inspectable ready queue): every event of a busy mix of sleeps,
ties, plain callbacks, cancelled sleepers and held bodies is logged in the same order."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentlab.core import clock as clock_mod
from agentlab.core.clock import VirtualClock
from agentlab.llm.sim_content import Rng


async def _scenario(clock: VirtualClock) -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []
    rng = Rng(5)
    loop = asyncio.get_running_loop()

    async def worker(name: str, n: int) -> None:
        for i in range(n):
            # ties on purpose (0.0, repeated quanta) and a busy loop between sleeps
            await clock.sleep(rng.randint(4) * 0.25)
            log.append((f"{name}.{i}", clock.now()))
            if rng.random() < 0.3:
                loop.call_soon(log.append, (f"{name}.{i} soon", clock.now()))
            if rng.random() < 0.2:
                await asyncio.sleep(0)  # a bare yield: one more round, no virtual time

    async def doomed() -> None:
        await clock.sleep(0.5)
        log.append(("doomed woke", clock.now()))  # never: cancelled before due

    async def held(name: str) -> None:
        await clock.sleep(0.25)
        async with clock.hold():
            log.append((f"{name} held+", clock.now()))
            await asyncio.to_thread(time.sleep, 0.01)
            await clock.sleep(0.25)  # a held body's own wait lets time pass
            log.append((f"{name} held-", clock.now()))

    d = asyncio.ensure_future(doomed())
    tasks = [asyncio.ensure_future(worker(f"w{i}", 6 + i)) for i in range(8)]
    tasks += [asyncio.ensure_future(held(f"h{i}")) for i in range(2)]
    await clock.sleep(0.25)
    d.cancel()
    await asyncio.gather(*tasks)
    log.append(("end", clock.now()))
    return log


@pytest.mark.parametrize("seed_loops", [1, 3])
def test_callback_driver_matches_the_task_driver(
    monkeypatch: pytest.MonkeyPatch, seed_loops: int
) -> None:
    def run() -> list[list[tuple[str, float]]]:
        clock = VirtualClock()  # one clock over several loops: a driver per loop
        return [asyncio.run(_scenario(clock)) for _ in range(seed_loops)]

    with_callbacks = run()
    drivers: list[type] = []

    def task_driver(self: VirtualClock, loop: asyncio.AbstractEventLoop) -> None:
        drivers.append(type(loop))
        self._driver = loop.create_task(self._drive(loop))

    monkeypatch.setattr(VirtualClock, "_start_driver", task_driver)
    with_task = run()
    assert drivers  # the task driver did run
    assert with_callbacks == with_task
    assert len(with_task[0]) > 60 and ("doomed woke", 0.5) not in with_task[0]


async def test_the_callback_driver_is_used_on_cpython_loops() -> None:
    clock = VirtualClock()
    await clock.sleep(1.0)
    assert isinstance(clock._driver, clock_mod._Driver) and clock.now() == 1.0


def test_two_clocks_on_one_loop_each_run_as_alone() -> None:
    # two societies side by side in a notebook: each driver saw the other's round in the
    # ready queue as work, so neither ever found the loop idle and both spun at time 0
    alone = asyncio.run(_scenario(VirtualClock()))

    async def side_by_side() -> list[list[tuple[str, float]]]:
        both = asyncio.gather(_scenario(VirtualClock()), _scenario(VirtualClock(start=7.0)))
        return list(await asyncio.wait_for(both, 30))

    first, second = asyncio.run(side_by_side())
    assert first == alone
    assert second == [(name, t + 7.0) for name, t in alone]
    assert not any(clock_mod._LOOP_DRIVERS.values())  # each driver left when done


async def test_rewind_goes_back_only_when_nobody_sleeps() -> None:
    clock = VirtualClock()
    await clock.sleep(5.0)
    sleeper = asyncio.ensure_future(clock.sleep(3.0))
    await asyncio.sleep(0)  # it sleeps now
    assert not clock.rewind_to(1.0) and clock.now() == 5.0  # time cannot move back under it
    sleeper.cancel()
    await asyncio.gather(sleeper, return_exceptions=True)
    assert clock.rewind_to(1.0) and clock.now() == 1.0
    await clock.sleep(0.5)
    assert clock.now() == 1.5
