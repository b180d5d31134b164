"""LLM faults lose nothing: every injected fault is retried and recorded by kind.

The simulator counts the faulty answers it sends (``faults_*_total`` in its metrics);
the run log's ``llm_attempts`` must hold exactly as many attempts of each kind, every
agent-step must commit, and the AIMD limit must stay at the server's capacity.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path
from typing import Any

import pytest

from agentlab.llm import LLMClient
from agentlab.runtime import Society
from agentlab.store import open_run

KINDS = {"rate_limit": "rate_limited", "timeout": "timeout", "malformed": "malformed"}


async def _run(out: Path, agents: int, ticks: int, p: tuple[float, float, float]) -> Any:
    # The profile's prefix caching and KV capacity on (vLLM's defaults): cached prompts set
    # the limiter's fixed cost low (0.167 -> 0.097 s), and uncached ones must not read as
    # congestion for it (the limiter models the prompt tokens computed, not cached).
    llm = LLMClient("sim/vllm-3b", seed=7, timeout=30.0, sim_p_rate_limit=p[0],
                    sim_p_timeout=p[1], sim_p_malformed=p[2])  # fmt: skip
    soc = Society.create(out, agents=agents, env=["social_feed"], llm=llm, seed=7,
                         clock="virtual", progress=False)  # fmt: skip
    client = soc.proxy.llm
    before = client.server_metrics()
    limits: list[int] = []

    async def sample() -> None:
        while True:
            limits.append(client.limit)
            await soc.clock.sleep(1.0)

    sampler = asyncio.ensure_future(sample())
    await soc.run(ticks)
    sampler.cancel()
    after = client.server_metrics()
    injected = {k: after[f"faults_{v}_total"] - before[f"faults_{v}_total"]
                for k, v in KINDS.items()}  # fmt: skip
    return injected, limits, client.profile.slots


def _check(out: Path, agents: int, ticks: int, injected: dict[str, int]) -> Any:
    run = open_run(out)
    kinds = run.sql("select kind, count(*) n from llm_attempts group by 1")
    logged = dict(zip(kinds.kind, kinds.n, strict=True))
    assert all(injected[k] > 0 for k in KINDS), injected
    assert {k: logged.get(k, 0) for k in KINDS} == injected
    assert set(logged) <= {*KINDS, "ok"}
    states = run.sql("select count(*) n, count(*) filter (where ok) ok from agent_states")
    assert int(states.n[0]) == int(states.ok[0]) == agents * ticks  # 0 agent-steps lost
    # a call whose every client attempt failed fails its step, which the society retries
    # with fresh fault draws: such errors are never final
    errors = run.df("agent_errors")
    assert not errors.final.any()
    calls = run.llm_calls_df()
    failed = calls[calls.outcome != "ok"]
    assert len(failed) <= len(errors)
    assert (failed.attempts == 4).all()  # max_retries=3: four attempts, then give up
    # every attempt of every call is listed, faulty ones first, the last one the outcome
    att = run.llm_attempts_df()
    per_call = att.groupby("request_id").attempt.agg(["count", "max"])
    want = calls.set_index("request_id").attempts
    assert (per_call["count"] == want.loc[per_call.index]).all() and len(per_call) == len(calls)
    assert (per_call["max"] == per_call["count"]).all()
    last = att.sort_values("attempt").groupby("request_id").tail(1)
    assert (last.kind == "ok").sum() == (calls.outcome == "ok").sum()
    return calls


async def test_every_injected_fault_is_counted_by_kind(tmp_path: Path) -> None:
    injected, _, _ = await _run(tmp_path, 40, 2, (0.15, 0.08, 0.08))
    calls = _check(tmp_path, 40, 2, injected)
    assert (calls.attempts > 1).any()


@pytest.mark.slow
async def test_500_llm_agents_lose_no_step_and_aimd_holds_capacity(tmp_path: Path) -> None:
    injected, limits, slots = await _run(tmp_path, 500, 5, (0.10, 0.05, 0.02))
    _check(tmp_path, 500, 5, injected)
    # AIMD: sporadic faults do not ratchet the limit down (it sat at 3 against 8 slots)
    assert statistics.median(limits) >= slots
    assert min(limits[len(limits) // 10 :]) >= slots // 2
