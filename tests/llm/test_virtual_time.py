"""A one-hour simulated workload runs in seconds under the virtual clock."""

from __future__ import annotations

import asyncio
import itertools
import time

from agentlab.core.clock import VirtualClock
from agentlab.llm import LLMClient


async def test_one_hour_of_traffic_in_seconds_with_consistent_timestamps() -> None:
    clock = VirtualClock(start=1000.0)
    c = LLMClient("sim/vllm-3b", seed=5, decode_jitter=0).with_clock(clock)
    records = []

    async def agent(i: int) -> None:
        k = 0
        while clock.now() < 1000.0 + 3600.0:
            k += 1
            r = await c.complete(
                [{"role": "user", "content": f"{i}:{k}"}],
                agent_id=f"a{i}",
                sim_completion_tokens=100,
            )
            records.append(r.record)
            await clock.sleep(30.0)  # think time between calls

    t0 = time.perf_counter()
    await asyncio.gather(*(agent(i) for i in range(12)))
    wall = time.perf_counter() - t0
    assert clock.now() >= 1000.0 + 3600.0
    assert wall < 20.0, wall  # an hour of simulated time, a few seconds of CPU
    # 12 agents, each call ~1.7 s + 30 s think: about 113 calls per agent over the hour
    assert 1200 <= len(records) <= 1500
    per_agent: dict[str | None, list[float]] = {}
    for r in records:
        assert 1000.0 <= r.start <= r.first_token <= r.end <= 1000.0 + 3600.0 + 60
        # 8 slots, 12 agents mostly thinking: almost no queueing, so latency follows the model
        # (at most 8 sequences per step; up to 12 prompts' prefill shares its steps)
        assert r.queue_wait is not None
        expected = 0.01 + 12 * r.prompt_tokens / 4000 + r.completion_tokens / 60 * (1 + 0.04 * 7)
        assert r.end - r.start - r.queue_wait <= expected + 1e-6
        per_agent.setdefault(r.agent_id, []).append(r.start)
    for starts in per_agent.values():
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert all(g >= 30.0 for g in gaps)  # think time + call time, in virtual seconds
