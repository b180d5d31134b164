"""One recording path: a Society (agents talking in a MsgHub), an Experiment and an
AgentSystem, each on the simulated backend, read back with one SQL query."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agentlab.agents.base import AgentBase
from agentlab.agents.registry import register_agent
from agentlab.llm import LLMClient
from agentlab.messaging import LLMAgent, MsgHub
from agentlab.runtime import Society
from agentlab.runtime.threads import AgentSystem, LLMClientModel
from agentlab.store import open_run, sql_over_runs
from agentlab.store.catalog import CATALOG
from agentlab.topology import Experiment


@register_agent("test_hub_pair")
class HubPair(AgentBase):
    """Two LLM speakers in a MsgHub per step; replies go to the run's ``messages``."""

    def initial_state(self) -> dict[str, Any]:
        return {"said": 0}

    async def step(self, tick: int) -> None:
        svc = self.services
        assert svc is not None
        a = LLMAgent(f"{self.agent_id}-a", "You open.", svc.llm)
        b = LLMAgent(f"{self.agent_id}-b", "You answer.", svc.llm)
        async with MsgHub([a, b], f"tick {tick}", name="pair", sink=svc.message_sink(), tick=tick):
            await a(labels={"stage": "open"})
            await b(labels={"stage": "answer"})
        self.state["said"] += 2

    def summary(self) -> dict[str, Any]:
        return dict(self.state)


def _society(root: Path) -> Path:
    out = root / "society"
    soc = Society.create(out, agents={"test_hub_pair": 3}, llm="sim/vllm-3b", seed=1,
                         clock="virtual", progress=False)  # fmt: skip
    soc.run_sync(2)
    return out


def _experiment(root: Path) -> Path:
    out = root / "experiment"
    tasks = [{"id": "t1", "category": "x", "prompt": "sum two numbers"}]
    Experiment(topologies=["star"], agents=3, runs=1, tasks=tasks, seed=1, progress=False,
               out=out).run_sync()  # fmt: skip
    return out


def _threads(root: Path) -> Path:
    out = root / "threads"
    out.mkdir()
    model = LLMClientModel(LLMClient("sim/vllm-3b", seed=1), sim_completion_tokens=40)

    async def go() -> None:
        system = AgentSystem(model, agent_tools=False, run_dir=out)
        async with system:
            for t in ("t1", "t2"):
                system.send_user(t, f"hello {t}", f"u-{t}")
            await system.drain()
        system.log.flush()

    asyncio.run(go())
    return out


def test_three_drivers_one_sql_over_the_same_columns(tmp_path: Path) -> None:
    runs = {"society": _society(tmp_path), "experiment": _experiment(tmp_path),
            "threads": _threads(tmp_path)}  # fmt: skip
    # the same declared columns in every run's catalogue
    for path in runs.values():
        for name in ("llm_calls", "messages"):
            run = open_run(path)
            if name in run.dataset_names():
                cols = run.datasets.set_index("name").loc[name, "columns"]
                assert cols == dict(CATALOG[name].columns), (path, name)
    calls = sql_over_runs(runs, """
        select point, count(*) n, count(latency) lat, count(queue_wait) qw,
               sum(total_tokens) tok, count(distinct run_id) runs, min(ttft) ttft
        from llm_calls group by point order by point""")  # fmt: skip
    by = calls.set_index("point")
    assert set(by.index) == set(runs)
    assert (by.n > 0).all() and (by.lat == by.n).all() and (by.qw == by.n).all()
    assert (by.tok > 0).all() and (by.ttft > 0).all()
    # one query over llm_calls and messages of all three drivers
    both = sql_over_runs(runs, """
        select c.point, c.calls, m.messages from
          (select point, count(*) calls from llm_calls group by 1) c
          left join (select point, count(*) messages, count(distinct hub) hubs
                     from messages group by 1) m using (point)
        order by 1""")  # fmt: skip
    got = dict(zip(both.point, both.messages.fillna(0), strict=True))
    # society: 3 agents x 2 ticks x 2 speakers (+ the announcement of each hub)
    assert got["society"] == 3 * 2 * 3
    assert got["experiment"] > 0 and got["threads"] == 0
    msgs = open_run(runs["society"]).messages_df()
    assert set(msgs.hub) == {"pair"} and set(msgs.tick) == {1, 2}
    assert all(isinstance(list(r), list) for r in msgs.receivers)
    # the AgentSystem's streamed calls are in llm_calls like the others
    tcalls = open_run(runs["threads"]).llm_calls_df()
    assert len(tcalls) == 2 and tcalls.stream.all() and set(tcalls.agent_id) == {"t1", "t2"}
    assert set(tcalls.stage) == {"thread_slice"} and (tcalls.turn == 0).all()
    # every attempt of every driver's calls is listed (retries included)
    for path in runs.values():
        run = open_run(path)
        assert len(run.llm_attempts_df()) == int(run.llm_calls_df().attempts.sum()) > 0


def test_tool_and_llm_spans_of_a_society_follow_the_genai_conventions(tmp_path: Path) -> None:
    soc = Society.create(tmp_path, agents=6, env=["social_feed"], llm="sim/vllm-3b", seed=2,
                         clock="virtual", progress=False)  # fmt: skip
    soc.run_sync(2)
    spans = open_run(tmp_path).spans_df()
    tools = spans[spans.name == "env.tool"]
    assert len(tools)
    steps = spans[spans.name == "agent.step"].set_index("span_id")
    for attrs, parent in zip(tools.attributes, tools.parent, strict=True):
        a = json.loads(attrs) if isinstance(attrs, str) else attrs
        assert a["gen_ai.operation.name"] == "execute_tool" and a["agentlab.tick"] in (1, 2)
        assert a["gen_ai.tool.name"] and a["gen_ai.tool.call.id"].startswith("call_")
        step = steps.attributes[parent]  # under its agent's invoke_agent span
        step = json.loads(step) if isinstance(step, str) else step
        assert a["gen_ai.agent.id"] == step["gen_ai.agent.id"]
    llm = [
        json.loads(a) if isinstance(a, str) else a
        for a in spans[spans.name == "llm.call"].attributes
    ]
    assert llm and all(
        a["gen_ai.operation.name"] == "chat" and a["agentlab.tick"] in (1, 2) for a in llm
    )


def test_llm_calls_say_how_each_reply_ended(tmp_path: Path) -> None:
    """``finish_reason`` in ``llm_calls``: the span's ``gen_ai.response.finish_reasons``
    of each answered call (``tool_calls`` replies are the short ones), NULL for a call that
    failed (calibration fits text lengths without the tool calls: test_calibrate)."""
    llm = LLMClient("sim/vllm-3b", seed=3, max_retries=0, sim_p_timeout=0.2)
    soc = Society.create(tmp_path, agents=8, env=["social_feed"], llm=llm, seed=3,
                         clock="virtual", progress=False)  # fmt: skip
    soc.run_sync(2)
    run = open_run(tmp_path)
    calls = run.llm_calls_df().set_index("request_id")
    spans = run.spans_df()
    ended = {}
    for a in spans[spans.name == "llm.call"].attributes:
        a = json.loads(a) if isinstance(a, str) else a
        if "gen_ai.response.finish_reasons" in a:
            ended[a["gen_ai.response.id"]] = a["gen_ai.response.finish_reasons"][0]
    ok = calls[calls.outcome == "ok"]
    assert set(ok.finish_reason) == {"stop", "tool_calls"}
    assert dict(ok.finish_reason) == {r: ended[r] for r in ok.index}
    failed = calls[calls.outcome != "ok"]
    assert len(failed) and failed.finish_reason.isna().all()
    by = ok.groupby("finish_reason").completion_tokens.median()
    assert by["tool_calls"] < by["stop"]
