"""Span trees of every run kind, as exported to OTLP: one root per trace, no dangling
parent, chat spans with token counts and agent names — also when chat spans are sampled."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentlab.llm import LLMClient
from agentlab.runtime.threads import AgentSystem, LLMClientModel, Tool, ToolContext
from agentlab.store import open_run
from agentlab.store.span_tree import complete_trees, derived_ids, tree_stats
from agentlab.store.tail import read_tail
from agentlab.topology import Experiment

trace_pb2 = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")


def _otlp_spans(run: Path, tmp: Path) -> list[dict[str, Any]]:
    """The run's spans as they come back out of the OTLP protobuf file."""
    out = tmp / f"{run.name}.otlp.pb"
    with open_run(run) as r:
        n = r.export_otlp(out, format="protobuf")
    req = trace_pb2.ExportTraceServiceRequest()
    req.ParseFromString(out.read_bytes())
    spans = []
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                attrs = {kv.key: kv.value for kv in s.attributes}
                spans.append({
                    "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                    "parent": s.parent_span_id.hex() or None, "name": s.name, "attrs": attrs,
                    "start": s.start_time_unix_nano, "end": s.end_time_unix_nano})  # fmt: skip
    assert len(spans) == n
    return spans


def _check_trees(spans: list[dict[str, Any]]) -> dict[str, int]:
    stats = tree_stats(spans)
    assert stats["dangling"] == 0 and stats["multi_root"] == 0
    assert stats["roots"] == stats["traces"]
    by_id = {s["span_id"]: s for s in spans}
    for s in spans:  # a child is in its parent's trace
        if s["parent"]:
            assert by_id[s["parent"]]["trace_id"] == s["trace_id"]
    for chat in (s for s in spans if s["name"].startswith("chat ")):
        a = chat["attrs"]
        assert a["gen_ai.usage.input_tokens"].int_value > 0
        assert a["gen_ai.usage.output_tokens"].int_value > 0
        assert a["gen_ai.agent.name"].string_value
    return stats


def _shape(spans: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    by_id = {s["span_id"]: s for s in spans}
    return Counter(
        (by_id[s["parent"]]["name"].split(" ")[0], s["name"].split(" ")[0])
        for s in spans if s["parent"]
    )  # fmt: skip


def _experiment(out: Path) -> Path:
    exp = Experiment(topologies=["sequential", "star"], agents=3, runs=2, llm="sim/instant",
                     seed=1, out=out, progress=False, max_iterations=1)  # fmt: skip
    exp.run_sync()
    return out


def test_an_experiment_is_one_trace_per_repetition_run_stage_call(tmp_path: Path) -> None:
    spans = _otlp_spans(_experiment(tmp_path / "exp"), tmp_path)
    stats = _check_trees(spans)
    roots = [s for s in spans if s["parent"] is None]
    assert stats["traces"] == 4 and {r["name"] for r in roots} == {"experiment.run"}
    assert sorted(r["attrs"]["agentlab.run_id"].string_value for r in roots) == [
        "sequential-0000", "sequential-0001", "star-0000", "star-0001"]  # fmt: skip
    shape = _shape(spans)
    assert set(shape) == {("experiment.run", "experiment.stage"), ("experiment.stage", "chat")}
    with open_run(tmp_path / "exp") as r:
        calls = r.llm_calls_df()
    assert shape[("experiment.stage", "chat")] == len(calls)  # every call, under its stage
    by_id = {s["span_id"]: s for s in spans}
    for chat in (s for s in spans if s["name"].startswith("chat ")):
        stage = by_id[chat["parent"]]
        label = chat["attrs"]["agentlab.span.name"].string_value
        assert label == "llm.call"
        assert stage["start"] <= chat["start"] and chat["end"] <= stage["end"]
    stages = Counter(s["attrs"]["agentlab.stage"].string_value for s in spans
                     if s["name"] == "experiment.stage")  # fmt: skip
    assert stages == {"recruitment": 4, "discussion": 4, "execution": 4, "evaluation": 4,
                      "final": 4}  # fmt: skip
    names = {s["attrs"]["gen_ai.agent.name"].string_value for s in spans if "chat" in s["name"]}
    assert {"orchestrator", "expert_1"} <= names


def test_experiment_trees_stay_whole_when_chat_spans_are_sampled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLAB_LLM_SPANS", "0.3")
    spans = _otlp_spans(_experiment(tmp_path / "exp"), tmp_path)
    _check_trees(spans)
    with open_run(tmp_path / "exp") as r:
        calls = len(r.llm_calls_df())
    chats = sum(s["name"].startswith("chat ") for s in spans)
    assert 0 < chats < calls
    assert sum(s["name"] == "experiment.stage" for s in spans) == 20  # structure kept whole


def _tool() -> Tool:
    def start(ctx: ToolContext, args: dict[str, Any]) -> Any:
        async def later() -> str:
            await asyncio.sleep(0.01)
            return f"looked up {args.get('query')}"

        return later()

    return Tool("lookup", start, parameters={"type": "object", "properties": {
        "query": {"type": "string"}}})  # fmt: skip


async def _threads(run: Path, turns: int = 2) -> AgentSystem:
    def policy(messages: list[dict[str, Any]]) -> dict[str, Any]:
        return {"sim_tool_call_p": 1.0 if messages[-1]["role"] == "user" else 0.0}

    model = LLMClientModel(LLMClient("sim/instant", seed=2), per_call=policy)
    system = AgentSystem(model, tools=[_tool()], agent_tools=False, run_dir=run)
    async with system:
        for turn in range(turns):
            for t in ("ann", "bob", "cy"):
                system.send_user(t, f"turn {turn} for {t}", f"u{turn}")
            await system.drain()
    return system


def test_a_thread_system_is_one_trace_per_thread_slice_call(tmp_path: Path) -> None:
    system = asyncio.run(_threads(tmp_path / "threads"))
    raw = read_tail(tmp_path / "threads" / "trace", None).rows
    assert tree_stats(raw)["dangling"] == len([r for r in raw if r["name"] == "agent.slice"])
    spans = _otlp_spans(tmp_path / "threads", tmp_path)
    stats = _check_trees(spans)
    roots = [s for s in spans if s["parent"] is None]
    assert stats["traces"] == 3 and {r["name"] for r in roots} == {"agent.thread"}
    assert stats["spans"] == 33  # 3 derived roots, 12 slices, 12 chats, 6 tools
    assert {r["attrs"]["agentlab.derived"].bool_value for r in roots} == {True}
    shape = _shape(spans)
    # per thread and turn: user → (chat, tool call) slice, tool result → (chat) slice
    assert shape == {("agent.thread", "invoke_agent"): 12, ("invoke_agent", "chat"): 12,
                     ("invoke_agent", "execute_tool"): 6}  # fmt: skip
    assert system.completions == 12
    by_id = {s["span_id"]: s for s in spans}
    for s in spans:
        if s["name"].startswith(("chat", "execute_tool")):
            thread = s["attrs"].get("agentlab.thread.id") or by_id[s["parent"]]["attrs"][
                "agentlab.thread.id"]  # fmt: skip
            assert by_id[s["parent"]]["attrs"]["gen_ai.agent.name"].string_value == (
                thread.string_value
            )
        if s["name"] == "agent.thread":
            kids = [k for k in spans if k["parent"] == s["span_id"]]
            assert s["start"] == min(k["start"] for k in kids)
            assert s["end"] == max(k["end"] for k in kids)
    tool = next(s for s in spans if s["name"] == "execute_tool lookup")
    assert tool["end"] > tool["start"] and tool["attrs"]["gen_ai.tool.call.id"].string_value
    # the root's ids are fixed by (run, thread): another worker's slices meet under it
    root = next(r for r in roots if r["attrs"]["agentlab.thread.id"].string_value == "ann")
    assert (root["trace_id"], root["span_id"]) == derived_ids("threads", "thread", "ann")


def test_thread_trees_stay_whole_without_chat_spans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLAB_LLM_SPANS", "0")
    asyncio.run(_threads(tmp_path / "threads", turns=1))
    spans = _otlp_spans(tmp_path / "threads", tmp_path)
    _check_trees(spans)
    assert not [s for s in spans if s["name"].startswith("chat")]
    assert _shape(spans) == {("agent.thread", "invoke_agent"): 6,
                             ("invoke_agent", "execute_tool"): 3}  # fmt: skip


def test_complete_trees_adds_only_thread_roots() -> None:
    rows = [
        {"trace_id": "t1", "span_id": "a", "parent": "gone", "start": 1.0, "end": 2.0,
         "attributes": {}},
        {"trace_id": "t2", "span_id": "b", "parent": "th", "start": 1.0, "end": 3.0,
         "attributes": {"agentlab.thread.id": "x"}},
        {"trace_id": "t2", "span_id": "c", "parent": "th", "start": 0.5, "end": None,
         "attributes": {"agentlab.thread.id": "x"}},
    ]  # fmt: skip
    done = complete_trees(rows)
    assert len(done) == 4
    root = done[-1]
    assert (root["span_id"], root["start"], root["end"]) == ("th", 0.5, 3.0)
    assert tree_stats(done) == {"spans": 4, "traces": 2, "roots": 1, "dangling": 1,
                                "multi_root": 0}  # fmt: skip
    # a root as pandas gives it (parent NaN) is a root
    assert tree_stats([{**rows[0], "parent": float("nan")}])["roots"] == 1


@pytest.mark.parametrize("rate", ["1", "0.5"])
def test_a_society_nests_env_steps_and_router_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rate: str
) -> None:
    from agentlab.runtime import Society

    monkeypatch.setenv("AGENTLAB_LLM_SPANS", rate)
    run = tmp_path / "soc"
    soc = Society.create(run, agents=[{"type": "llm", "n": 4, "config": {"env_mode": "ask"}},
                                      {"type": "llm", "n": 2}],
                         env=[{"type": "social_feed", "router": "react"}],
                         llm=LLMClient("sim/vllm-3b", seed=0), seed=1, clock="virtual",
                         progress=False)  # fmt: skip
    soc.run_sync(ticks=2)
    soc.close()
    spans = _otlp_spans(run, tmp_path)
    stats = _check_trees(spans)
    assert stats["traces"] == 2  # one per tick
    shape = _shape(spans)
    assert shape[("society.tick", "env.step")] == 2  # the env's own step, once a tick
    assert shape[("invoke_agent", "env.ask")] == 8  # 4 asking agents x 2 ticks
    assert shape[("invoke_agent", "execute_tool")] > 0  # the others call env tools
    with open_run(run) as r:
        router_calls = int(r.sql("select count(*) n from llm_calls where stage='router'").n[0])
        asks = r.sql("select llm_calls from env_requests").llm_calls.sum()
    assert router_calls == asks > 0
    if rate == "1":  # the router's calls under the request that made them
        assert shape[("env.ask", "chat")] == router_calls
    else:
        assert 0 < shape[("env.ask", "chat")] < router_calls
    ask = next(s for s in spans if s["name"] == "env.ask")
    assert ask["attrs"]["agentlab.env.router"].string_value == "react"
