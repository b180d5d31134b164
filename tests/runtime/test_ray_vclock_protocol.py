"""The time server's protocol in one process: workers in threads equal one event loop.

Agents that make a chain of LLM calls (each prompt built from the last answer) run once on
one ``VirtualClock`` with one ``LLMClient`` — the local executor's situation — and once
split over worker threads, each with its own event loop, whose calls go through
:class:`~agentlab.runtime.vclock_server.TimeServer` (the code a Ray batch runs, without
Ray). Every call record (all columns: times, ids, queue waits, attempts, tokens) and
every time an agent read must be identical; and the server must have needed far fewer
windows than answers (it runs ahead of the workers, which is what makes it cheap).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from agentlab.core.clock import Clock, VirtualClock
from agentlab.llm import LLMClient
from agentlab.llm._live import reset_live
from agentlab.runtime.vclock_server import Answer, CallIn, TimeServer
from agentlab.runtime.vclock_worker import AgentTime, RemoteLLM, WorkerHub

Row = tuple[Any, ...]


async def _agent(llm: Any, clock: Clock, aid: str, calls: int, out: list[Row]) -> None:
    msgs = [{"role": "user", "content": f"I am {aid}. Say something."}]
    for i in range(calls):
        before = clock.now()
        try:
            r = await llm.complete(msgs, agent_id=aid, labels={"call": "chat", "i": i})
        except Exception as exc:  # a call that failed after its retries: its record
            rec = exc.record  # type: ignore[attr-defined]
            out.append((aid, i, before, clock.now(), repr(rec)))
            continue
        out.append((aid, i, before, clock.now(), repr(r.record), r.text))
        msgs = [
            *msgs,
            {"role": "assistant", "content": r.text},
            {"role": "user", "content": "And?"},
        ]


def _local(client: LLMClient, agents: list[list[str]], calls: int) -> tuple[list[Row], dict]:
    out: list[Row] = []
    clock = VirtualClock()
    llm = client.with_clock(clock)

    async def main() -> None:
        tasks = [asyncio.ensure_future(_agent(llm, clock, a, calls, out))
                 for group in agents for a in group]  # fmt: skip
        await asyncio.gather(*tasks)

    asyncio.run(main())
    return sorted(out), llm.export_state()


def _served(client: LLMClient, agents: list[list[str]], calls: int) -> tuple[list[Row], dict, int]:
    server = TimeServer(client.to_dict())
    server.begin_tick(0.0, None, len(agents))
    out: list[Row] = []
    errors: list[BaseException] = []

    def worker(w: int, ids: list[str]) -> None:
        async def exchange(batch: list[CallIn], done: bool) -> list[Answer]:
            return await asyncio.to_thread(server.exchange, w, batch, done)

        async def main() -> None:
            clock = AgentTime(0.0)
            hub = WorkerHub(exchange, w, ids, clock)
            llm = RemoteLLM(client, hub)

            async def batch() -> None:
                await asyncio.gather(*(_agent(llm, clock, a, calls, out) for a in ids))

            task = asyncio.ensure_future(batch())
            await hub.drive(task)
            await task

        try:
            asyncio.run(main())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w, ids)) for w, ids in enumerate(agents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    end = server.end_tick()
    assert end["answers"] == len(out)
    return sorted(out), end["state"], end["windows"]


@pytest.mark.parametrize(
    ("n", "workers", "faults", "most_windows"),
    [
        # the AIMD gate is saturated: windows span its backlog (measured: 56 for 400)
        (200, 2, {}, 0.25),
        (60, 3, {"sim_p_rate_limit": 0.1, "sim_p_timeout": 0.05, "sim_p_malformed": 0.05}, 1),
    ],
    ids=["200-agents-2-workers", "60-agents-3-workers-faults"],
)
def test_time_server_equals_one_event_loop(
    n: int, workers: int, faults: dict[str, float], most_windows: float
) -> None:
    reset_live()
    client = LLMClient("sim/vllm-3b", seed=7, max_retries=2, **faults)
    ids = [f"a{i:03d}" for i in range(n)]
    size = -(-n // workers)
    agents = [ids[i : i + size] for i in range(0, n, size)]
    ref, ref_state = _local(client, agents, 2)
    got, state, windows = _served(client, agents, 2)
    assert len(ref) == n * 2
    diff = [(a, b) for a, b in zip(ref, got, strict=True) if a != b]
    assert not diff, f"{len(diff)} of {len(ref)} calls differ, e.g. {diff[:1]}"
    assert state == ref_state
    # the calls really queued and the server ran ahead of the workers
    assert any("queue_wait=0.0" not in r[4] for r in ref)
    assert windows <= most_windows * len(ref), windows
    if faults:
        assert any("attempts=1," not in r[4] for r in ref)


def test_ordered_gate_puts_a_late_call_in_its_place_and_refuses_a_free_slot() -> None:
    from agentlab.core.clock import HorizonClock
    from agentlab.llm.aimd import AIMDLimiter
    from agentlab.runtime.vclock_server import _QUEUED_AT, OrderedGate, TimeServerError

    async def main() -> list[str]:
        clock = HorizonClock(0.0)
        gate = OrderedGate(AIMDLimiter(1, adaptive=False), clock)
        assert gate.try_acquire() == 0  # the one slot is taken
        order: list[str] = []

        async def waiter(name: str, late: float | None) -> None:
            if late is not None:
                _QUEUED_AT.set(late)
                assert gate.try_acquire() is None  # a late call always queues
            await gate.acquire()
            order.append(name)
            gate.release()

        clock.advance_to(5.0)
        first = asyncio.ensure_future(waiter("queued at 5", None))
        await asyncio.sleep(0)
        late = asyncio.ensure_future(waiter("queued at 3, heard of late", 3.0))
        await asyncio.sleep(0)
        assert gate.waiting_before(4.0, 10) == 1  # the late one, ahead
        gate.release()
        await asyncio.gather(first, late)

        async def free_slot() -> None:
            _QUEUED_AT.set(6.0)
            gate.try_acquire()

        with pytest.raises(TimeServerError, match="horizon violated"):
            await asyncio.ensure_future(free_slot())
        return order

    assert asyncio.run(main()) == ["queued at 3, heard of late", "queued at 5"]


def test_horizon_clock_wakes_only_what_may_run_and_at_exact_times() -> None:
    from agentlab.core.clock import HorizonClock

    async def main() -> list[float]:
        clock = HorizonClock(1.0)
        woke: list[float] = []

        async def at(t: float) -> None:
            await clock.sleep_until(t)
            woke.append(clock.now())

        tasks = [asyncio.ensure_future(at(t)) for t in (1.3, 2.0, 1.1)]
        await clock.run(lambda t: t < 1.5)
        assert woke == [1.1, 1.3] and clock.next_wake() == 2.0 and clock.due_times() == {2.0}
        await clock.run(lambda t: True)
        await asyncio.gather(*tasks)
        return woke

    assert asyncio.run(main()) == [1.1, 1.3, 2.0]


def test_an_agent_that_waits_on_something_else_is_refused_not_mistimed() -> None:
    # a1 waits 0.3 s of wall time (a person, a thread) after its first answer: the server
    # runs on with the others meanwhile, so a1's next call may come after its time has
    # passed there; it must raise, never be timed as if it had come in time
    from agentlab.runtime.vclock_server import TimeServerError

    reset_live()
    client = LLMClient("sim/vllm-3b", seed=7)
    server = TimeServer(client.to_dict())
    server.begin_tick(0.0, None, 1)
    errors: list[BaseException] = []

    async def napper(llm: Any, aid: str) -> None:
        msgs = [{"role": "user", "content": f"I am {aid}."}]
        await llm.complete(msgs, agent_id=aid)
        await asyncio.sleep(0.3)
        await llm.complete(msgs, agent_id=aid)

    async def main() -> None:
        async def exchange(batch: list[CallIn], done: bool) -> list[Answer]:
            return await asyncio.to_thread(server.exchange, 0, batch, done)

        ids = [f"a{i}" for i in range(20)]
        hub = WorkerHub(exchange, 0, ids, AgentTime(0.0))
        llm = RemoteLLM(client, hub)
        out: list[Row] = []
        tasks = [napper(llm, "a1")] + [_agent(llm, hub.clock, a, 3, out) for a in ids if a != "a1"]
        task = asyncio.ensure_future(asyncio.gather(*tasks))
        try:
            await hub.drive(task)
        except TimeServerError as exc:
            errors.append(exc)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert errors and "may wait only on the LLM and the env" in str(errors[0])
