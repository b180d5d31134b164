"""The shipped reference run reads back through every reader without Ray or an LLM."""

from __future__ import annotations

from agentlab.datasets import path
from agentlab.store import open_run


def test_reference_run_reads_back() -> None:
    run = open_run(path("reference_run"))
    timeline = run.timeline_df()
    assert list(timeline["tick"]) == [1, 2, 3, 4]
    assert (timeline["agents"] == 30).all() and (timeline["errors"] == 0).all()
    calls = run.llm_calls_df()
    assert len(calls) == int(timeline["llm_calls"].sum()) > 0
    assert set(calls["model"]) == {"sim/vllm-3b"} and (calls["outcome"] == "ok").all()
    per_agent = run.sql("select agent_id, count(*) n from llm_calls group by 1 order by 1")
    assert len(per_agent) == 30 and per_agent["n"].sum() == len(calls)
    assert len(run.messages_df()) > 0
    spans = run.spans_df()
    assert {"society.tick", "llm.call"} <= set(spans["name"])
    assert run.problems == []
