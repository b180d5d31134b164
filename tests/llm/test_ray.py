"""LLMClient travels into Ray tasks, and its learned limit survives between tasks."""

from __future__ import annotations

import pickle

import pytest

from agentlab.llm import LLMClient

# no client dispatch cost: all 24 calls are in flight together, so the limit must grow.
# Real clock: on a loaded box an event-loop stall looks like congestion and cuts the limit,
# which is not what these tests are about, so the latency signal is switched off.
FAST = {
    "decode_tps": 50_000.0,
    "overhead_s": 0.002,
    "client_overhead_s": 0.0,
    "aimd_latency_factor": 1e9,
}


def _task_body(client: LLMClient, n: int) -> tuple[int, int, int, str]:
    import asyncio
    import os

    async def go() -> tuple[int, str]:
        before = client.limit
        rs = await asyncio.gather(
            *(client.complete([{"role": "user", "content": f"t{i}"}]) for i in range(n))
        )
        return before, rs[0].text

    before, text = asyncio.run(go())  # a fresh event loop per task, as Ray sync tasks do
    return os.getpid(), before, client.limit, text


def test_successive_loops_in_one_process_share_the_learned_limit() -> None:
    """What a Ray worker does, without Ray: unpickle the client, asyncio.run, repeat."""
    client = LLMClient("sim/vllm-3b", seed=4, aimd_initial=4, **FAST)
    ends = []
    for _ in range(3):
        _, before, after, _ = _task_body(pickle.loads(pickle.dumps(client)), 24)
        assert after > before and (not ends or before == ends[-1])
        ends.append(after)


@pytest.mark.ray
def test_client_pickles_into_ray_tasks_and_limit_survives(ray_session: object) -> None:
    ray = ray_session
    fast = FAST
    client = LLMClient("sim/vllm-3b", seed=3, aimd_initial=4, **fast)
    remote = ray.remote(num_cpus=1)(_task_body)  # type: ignore[attr-defined]
    results = [ray.get(remote.remote(client, 24)) for _ in range(6)]  # type: ignore[attr-defined]
    local_text = LLMClient("sim/vllm-3b", seed=3, **fast).complete_sync(
        [{"role": "user", "content": "t0"}]
    )
    assert all(r[3] == local_text.text for r in results)  # same seed, same text in workers
    last_end: dict[int, int] = {}
    reused = 0
    for pid, before, after, _ in results:
        assert after > before  # it learned during the task (slow start from 4)
        if pid in last_end:
            reused += 1
            assert before == last_end[pid]  # the next task in that worker starts there
        last_end[pid] = after
    assert reused >= 1
