"""``Society.create(llm_spans=...)``: every, no or a sampled set of ``llm.call`` spans.

The option changes the trace only: ``llm_calls`` rows, agent states and every other
dataset are the same whatever it is; the sample is a function of the seed, agent, tick and
call number (the same on a rerun and on a resume, another one for another seed); readers
of a run without ``llm.call`` spans still work.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentlab.errors import ConfigError
from agentlab.runtime import Society
from agentlab.runtime.config import llm_span_rate, llm_spans_name, validate_society_config
from agentlab.store import open_run

_WALL = {"start", "end", "first_token", "latency", "ttft", "queue_wait", "request_id", "_seq", "run_id",
         "_shard", "ts", "wall_s", "latency_mean_s"}  # fmt: skip


def _rows(run: Path, dataset: str) -> list[dict[str, Any]]:
    out = []
    for f in sorted((run / "replay" / dataset).glob("*.jsonl")):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            out.append({k: v for k, v in row.items() if k not in _WALL})
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True))


def _llm_spans(run: Path) -> set[tuple[str, int, int]]:
    """(agent, tick, the call's ``iteration`` label) of every ``llm.call`` span. A span
    starts right before its call's record does (and after the step's previous call
    ended), so its call is the agent's first at that tick to start at or after it."""
    calls: dict[tuple[str, int], list[tuple[float, int]]] = {}
    for f in sorted((run / "replay" / "llm_calls").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            calls.setdefault((row["agent_id"], row["tick"]), []).append(
                (row["start"], row["labels"]["iteration"])
            )
    out = set()
    for f in sorted((run / "trace").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            span = json.loads(line)
            if span["name"] == "llm.call":
                key = (span["attributes"]["gen_ai.agent.id"], span["attributes"]["agentlab.tick"])
                start = min(c for c in calls[key] if c[0] >= span["start"])
                out.add((*key, start[1]))
    return out


def _society(out: Path, seed: int = 1, **kw: Any) -> Society:
    return Society.create(out, agents=[{"type": "counter", "n": 30, "config": {"llm_calls": 2}}],
                          llm="sim/instant", seed=seed, progress=False, batch_size=8,
                          **kw)  # fmt: skip


def _run(out: Path, ticks: int = 2, **kw: Any) -> Path:
    soc = _society(out, **kw)
    soc.run_sync(ticks=ticks)
    soc.close()
    return out


def test_values_are_checked_with_the_valid_forms_named() -> None:
    assert llm_span_rate("all") == 1.0 and llm_span_rate("none") == 0.0
    assert llm_span_rate("sample:0.25") == 0.25
    for rate in (1.0, 0.0, 0.25):
        assert llm_span_rate(llm_spans_name(rate)) == rate
    for bad in ("some", "sample:", "sample:0", "sample:1", "sample:1.5", "sample:x", "ALL", 0.5):
        with pytest.raises(ConfigError) as err:
            llm_span_rate(bad)  # type: ignore[arg-type]
        assert repr(bad) in str(err.value) and "'sample:<rate>'" in str(err.value)
    with pytest.raises(ConfigError, match=r"llm_spans: .*'all', 'none', 'sample:<rate>'"):
        validate_society_config({"llm_spans": "half"})


def test_create_refuses_a_bad_value_before_writing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="llm_spans"):
        _society(tmp_path / "bad", llm_spans="sample:2")
    assert not (tmp_path / "bad" / "SOCIETY.json").exists()


def test_only_the_trace_changes_and_the_sample_follows_the_seed(tmp_path: Path) -> None:
    every = _run(tmp_path / "all")
    none = _run(tmp_path / "none", llm_spans="none")
    half = _run(tmp_path / "half", llm_spans="sample:0.5")
    again = _run(tmp_path / "half_again", llm_spans="sample:0.5")
    other_seed = _run(tmp_path / "half_seed2", seed=2, llm_spans="sample:0.5")

    calls = 30 * 2 * 2
    assert len(_llm_spans(every)) == calls and _llm_spans(none) == set()
    sampled = _llm_spans(half)
    assert 0.3 * calls < len(sampled) < 0.7 * calls
    assert _llm_spans(again) == sampled  # the same run traces the same calls
    assert _llm_spans(other_seed) != sampled  # another seed, another sample
    for run in (none, half):  # every dataset but the trace is the same
        for dataset in ("llm_calls", "agent_states", "timeline"):
            assert _rows(run, dataset) == _rows(every, dataset), dataset
        assert len(_rows(run, "llm_calls")) == calls
        s, e = Society.open(run, progress=False), Society.open(every, progress=False)
        assert s.agent_states() == e.agent_states()
        s.close()
        e.close()
    # the batch and tick spans are kept: only llm.call spans are sampled
    names = {json.loads(line)["name"] for f in (none / "trace").glob("*.jsonl")
             for line in f.read_text().splitlines()}  # fmt: skip
    assert {"society.tick", "society.batch"} <= names and "llm.call" not in names


def test_a_resume_keeps_the_runs_choice_whatever_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    straight = _run(tmp_path / "straight", ticks=3, llm_spans="sample:0.5")
    soc = _society(tmp_path / "resumed", llm_spans="sample:0.5")
    soc.run_sync(ticks=1)
    soc.close()
    monkeypatch.setenv("AGENTLAB_LLM_SPANS", "1")  # read at create only, not at open
    soc = Society.open(tmp_path / "resumed", progress=False)
    soc.run_sync(ticks=2)
    soc.close()
    assert _llm_spans(tmp_path / "resumed") == _llm_spans(straight)
    # the env var still chooses for a society created without the option, and is kept
    monkeypatch.setenv("AGENTLAB_LLM_SPANS", "0")
    soc = _society(tmp_path / "env")
    soc.run_sync(ticks=1)
    soc.close()
    assert json.loads((tmp_path / "env" / "SOCIETY.json").read_text())["llm_spans"] == "none"
    assert _llm_spans(tmp_path / "env") == set()


def test_readers_cope_with_a_run_without_llm_spans(tmp_path: Path) -> None:
    from agentlab.analysis.run_report import summarize_run
    from agentlab.viewer import render_page

    run_dir = _run(tmp_path / "none", llm_spans="none")
    run = open_run(run_dir)
    spans = run.spans_df()
    assert len(spans) > 0 and "llm.call" not in set(spans["name"])
    assert len(run.llm_calls_df()) == 120
    assert run.export_otlp(tmp_path / "otlp.json") == len(spans)
    summary = summarize_run(run_dir)
    assert summary["spans"] == len(spans) and summary["errors"]["spans"] == 0
    page = render_page(tmp_path, "run-none.html")
    assert page is not None and "llm_calls" in page


def test_ray_traces_the_same_calls_as_local(ray_session: Any, tmp_path: Path) -> None:
    local = _run(tmp_path / "local", llm_spans="sample:0.5")
    ray = _run(tmp_path / "ray", llm_spans="sample:0.5", executor="ray")
    assert _llm_spans(ray) == _llm_spans(local) != set()
    assert _rows(ray, "llm_calls") == _rows(local, "llm_calls")
