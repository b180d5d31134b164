"""A society whose LLM agents ask the env in natural language through each router kind, on
the simulated vLLM-like backend; the routed requests are read back with SQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlab.agents import AgentBase, register_agent
from agentlab.env import EnvBase, tool
from agentlab.errors import ConfigError
from agentlab.llm import LLMClient
from agentlab.runtime import Society


class Tally(EnvBase):
    """A second module with a language router: ask() must be told which one."""

    @tool
    def count(self, agent_id: str = "?") -> int:
        """Count one."""
        return 1


KINDS = ["direct", "react", "codegen", "plan", "two_tier"]


@pytest.mark.parametrize("kind", KINDS)
async def test_society_agents_ask_through_router(tmp_path: Path, kind: str) -> None:
    from agentlab import open_run

    llm = LLMClient("sim/vllm-3b", seed=0, sim_p_invalid_args=0.05)
    society = Society.create(
        tmp_path / kind,
        agents=[{"type": "llm", "n": 6, "config": {"env_mode": "ask"}}],  # persona agents
        env=[{"type": "social_feed", "router": kind}],
        llm=llm,
        seed=1,
        clock="virtual",  # the vLLM-like server's latencies pass in simulated time
        progress=False,
    )
    try:
        await society.run(ticks=2)
    finally:
        society.close()
    run = open_run(tmp_path / kind)
    df = run.sql(
        "select router, agent_id, tick, request, code, plan, n_tool_calls, ok, outcome, "
        "llm_calls from env_requests order by tick, agent_id"
    )
    assert len(df) == 12 and set(df.router) == {kind}
    if kind == "direct":  # text is not a structured call: every request refused, clearly
        assert set(df.outcome) == {"rejected"}
        return
    assert (df.llm_calls >= 1).all()
    assert df.ok.mean() >= 0.5, df[["outcome", "request"]]
    assert df.n_tool_calls.sum() >= 6
    if kind == "codegen":
        assert df.code.notna().all() and df.code.str.contains(r"\(").all()
    if kind in ("plan", "two_tier"):  # a malformed reply may fail before any plan exists
        assert df[df.ok].plan.notna().all()
    calls = run.sql("select count(*) n from llm_calls where stage = 'router'").n[0]
    assert calls == df.llm_calls.sum()
    timeline = run.sql("select tick, routers from timeline order by tick")
    assert len(timeline) == 2 and timeline.routers.notna().all()
    assert "requests" in str(timeline.routers[0])  # a dict (JSON columns read as objects)


def test_unknown_router_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="magic"):
        Society.create(tmp_path / "x", agents=2,
                       env=[{"type": "social_feed", "router": "magic"}], progress=False)  # fmt: skip


async def test_ask_needs_module_when_ambiguous(tmp_path: Path) -> None:
    from agentlab.env import create_env
    from agentlab.runtime.env_routing import attach_router
    from agentlab.runtime.envhost import EnvHost

    a = attach_router(create_env("social_feed", seed=0), "react")
    b = attach_router(Tally(), "codegen")
    host = EnvHost([a, b])
    with pytest.raises(ConfigError, match="needs module="):
        await host.ask("alice", "post hi", 1, services=_NoServices())


class _NoServices:
    """ask() refuses before the router needs any service."""

    llm = None
    replay = None
    run_id = ""

    def flush(self) -> None:
        return None


@pytest.mark.ray
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_ray_env_actor_routes_and_records(ray_session: Any, tmp_path: Path) -> None:
    from agentlab import open_run

    @register_agent("env_asker_ray")
    class RayAsker(AgentBase):  # defined here: Ray workers get it by value, not by import
        async def step(self, tick: int) -> None:
            assert self.services is not None and self.services.env is not None
            await self.services.env.ask("read the recent feed and like a post")

    society = Society.create(
        tmp_path / "ray",
        agents={"env_asker_ray": 4},
        env=[{"type": "social_feed", "router": "codegen"}],
        llm="sim/instant",
        seed=2,
        executor="ray",
        progress=False,
    )
    try:
        society.run_sync(ticks=2)
    finally:
        society.close()
    run = open_run(tmp_path / "ray")
    df = run.sql("select router, ok, llm_calls, code from env_requests")
    assert len(df) == 8 and set(df.router) == {"codegen"} and df.ok.mean() >= 0.5
    # the actor's router LLM calls are in llm_calls too, written by the actor's own sink
    n = run.sql("select count(*) n from llm_calls where stage = 'router'").n[0]
    assert n == df.llm_calls.sum() >= 1
    assert run.sql("select routers from timeline").routers.notna().all()
