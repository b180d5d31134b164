"""Pipeline ordering and concurrency limits, measured with virtual-clock timestamps."""

from __future__ import annotations

import pytest

from agentlab.core.clock import VirtualClock
from agentlab.errors import ConfigError
from agentlab.messaging import HubAgent, Msg, fanout, gather_limited, sequential


class Timed(HubAgent):
    """Sleeps ``dt`` virtual seconds and logs (start, end); replies with its name appended."""

    def __init__(self, name: str, clock: VirtualClock, log: list, dt: float = 1.0) -> None:
        super().__init__(name)
        self.clock, self.log, self.dt = clock, log, dt

    async def reply(self, msg: Msg | None = None, **kw: object) -> Msg:
        start = self.clock.now()
        await self.clock.sleep(self.dt)
        self.log.append((self.name, start, self.clock.now(), msg))
        prev = msg.content if msg else ""
        return Msg(self.name, f"{prev}>{self.name}", ts=self.clock.now())


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


async def test_sequential_threads_each_reply_into_the_next() -> None:
    clock, log = VirtualClock(), []
    agents = [Timed(n, clock, log) for n in "abc"]
    out = await sequential(agents, Msg("user", "q", role="user"))
    assert out is not None and out.content == "q>a>b>c"
    assert [(n, s) for n, s, _, _ in log] == [("a", 0.0), ("b", 1.0), ("c", 2.0)]


@pytest.mark.parametrize("max_parallel", [1, 2, 3, None])
async def test_fanout_honours_max_parallel(max_parallel: int | None) -> None:
    clock, log = VirtualClock(), []
    agents = [Timed(f"x{i}", clock, log) for i in range(7)]
    msg = Msg("user", "q", role="user")
    out = await fanout(agents, msg, max_parallel=max_parallel)
    assert [m.sender for m in out] == [a.name for a in agents]  # agent order, not finish order
    assert all(entry[3] is msg for entry in log)  # the same object, never copied
    peak = _max_overlap([(s, e) for _, s, e, _ in log])
    limit = max_parallel or 7
    assert peak == limit
    assert clock.now() == pytest.approx(-(-7 // limit))  # ceil(7 / limit) waves of 1 s
    starts = sorted((s, n) for n, s, _, _ in log)
    assert [n for _, n in starts] == [a.name for a in agents]  # FIFO start order


async def test_fanout_without_gather_runs_one_by_one() -> None:
    clock, log = VirtualClock(), []
    await fanout([Timed(n, clock, log) for n in "ab"], None, gather=False)
    assert [s for _, s, _, _ in log] == [0.0, 1.0]


async def test_failure_cancels_the_rest() -> None:
    clock = VirtualClock()
    finished: list[int] = []

    def job(i: int):
        async def run() -> int:
            await clock.sleep(0.5 if i == 0 else 2.0)
            if i == 0:
                raise RuntimeError("boom")
            finished.append(i)
            return i

        return run

    with pytest.raises(RuntimeError, match="boom"):
        await gather_limited([job(i) for i in range(4)], max_parallel=2)
    assert finished == []
    with pytest.raises(ConfigError, match="max_parallel"):
        await gather_limited([job(1)], max_parallel=0)
