"""The ``llm_io`` dataset (each call's prompt and reply, opt-in) and the traceback of a
step error: what the browser shows behind a call, an error or a message."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from agentlab.store import open_run
from tests.view.conftest import make_experiment, make_society


def test_a_society_records_every_calls_prompt_and_reply(tmp_path: Path) -> None:
    run = open_run(make_society(tmp_path / "soc", ticks=2))
    calls = run.llm_calls_df()
    io = run.df("llm_io")
    assert sorted(io["request_id"]) == sorted(calls["request_id"])  # one row per call
    row = io.iloc[0]
    messages = row["messages"]  # a JSON column, read as a list
    assert [m["role"] for m in messages][:2] == ["system", "user"]
    assert row["agent_id"] in messages[1]["content"]
    failed = set(calls[calls["outcome"] != "ok"]["request_id"])
    assert failed and set(io[io["error"].notna()]["request_id"]) == failed
    errors = run.df("agent_errors")
    assert len(errors) and errors["traceback"].str.contains("Traceback").all()
    run.close()


def test_prompts_are_not_recorded_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentlab.runtime import RunServices, Society

    monkeypatch.delenv("AGENTLAB_LLM_IO", raising=False)
    soc = Society.create(tmp_path / "plain", agents=2, llm="sim/instant", seed=0, progress=False)
    soc.run_sync(1)
    soc.close()
    run = open_run(tmp_path / "plain")
    assert "llm_io" not in run.dataset_names() and len(run.llm_calls_df())
    run.close()
    # the choice travels with the services into a Ray task
    services = RunServices(tmp_path / "x", "sim/instant", llm_io=True)
    assert pickle.loads(pickle.dumps(services)).llm_io is True
    assert RunServices(tmp_path / "y", "sim/instant").llm_io is False


def test_an_experiment_records_prompts_per_sub_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLAB_LLM_IO", "1")
    make_experiment(tmp_path / "exp", 1, ["star"])
    run = open_run(tmp_path / "exp")
    io, calls = run.df("llm_io"), run.llm_calls_df()
    assert len(io) == len(calls) and set(io["run_id"]) == set(calls["run_id"]) == {"star-0000"}
    assert io["reply"].str.len().gt(0).all()
    run.close()
