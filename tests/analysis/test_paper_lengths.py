"""The paper's discussion prompt and reply lengths by call label and round
(``agentlab.analysis.paper_lengths``), published and simulated."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from agentlab.analysis import (
    paper_lengths_df,
    paper_lengths_figure,
    published_lengths_df,
)
from agentlab.analysis.paper_lengths import CAP_TOKENS
from agentlab.errors import ConfigError
from agentlab.llm import get_profile

ROOT = Path(__file__).resolve().parents[2]
EXTRACT = json.loads((ROOT / "datasets" / "agentraffic_server.json").read_text())
WORKFLOW = EXTRACT["workflow"]


def test_the_cap_is_the_papers_server_cap() -> None:
    # the literal CAP_TOKENS and the profile both stand for the extract's LLM_MAX_TOKENS
    assert EXTRACT["server_config"]["max_tokens"] == CAP_TOKENS
    assert get_profile("vllm-3b").max_completion == CAP_TOKENS


def test_published_lengths_are_the_extracts_quartiles_and_means() -> None:
    pub = published_lengths_df()
    # 4 call labels x 3 rounds x prompt / completion
    assert len(pub) == 24
    assert set(pub["topology"]) == {"sequential", "star", "full_mesh"}
    r = pub.set_index(["call", "round", "kind"]).loc[("vertical_reviewer", 3, "completion")]
    # workflow.json groups.all.vertical.context.reviewer[2].completion_tokens
    assert (r["n"], r["p25"], r["median"], r["p75"], r["mean"]) == (1959, 552.5, 651, 831, 1233)
    r = pub.set_index(["call", "round", "kind"]).loc[("full_mesh_message", 1, "prompt")]
    assert (r["median"], r["mean"]) == (201, 218.7)
    for call, by_kind in WORKFLOW["context_mean"].items():
        if call == "definitions":
            continue
        got = pub[(pub["call"] == call) & (pub["kind"] == "completion")]["mean"].tolist()
        assert got == by_kind["completion"]


def _call(call: str | None, rnd: object, prompt: int, completion: int, ok: bool = True,
          topology: str = "star") -> dict[str, object]:  # fmt: skip
    return {"labels": {"call": call} if call else {}, "round": rnd, "topology": topology,
            "prompt_tokens": prompt, "completion_tokens": completion,
            "outcome": "ok" if ok else "timeout"}  # fmt: skip


def test_simulated_lengths_by_hand() -> None:
    """Two Star round-1 solver calls (prompts 100 / 300, replies 800 / 6,144), a failed one
    and calls the paper has no row for (no call label, no round, another topology's label
    under star): the solver rows only, means 200 and 3,472, half the replies at the cap."""
    calls = pd.DataFrame([
        _call("vertical_solver", 1, 100, 800),
        _call("vertical_solver", 1, 300, 6144),
        _call("vertical_solver", 1, 9999, 9999, ok=False),
        _call(None, 1, 50, 50),
        _call("vertical_solver", pd.NA, 50, 50),
        _call("horizontal_discussion", 1, 50, 50),  # under star: not Sequential's turn
    ])  # fmt: skip
    calls["round"] = calls["round"].astype("Int64")
    got = paper_lengths_df(calls).set_index("kind")
    assert list(got.index) == ["prompt", "completion"]
    p, c = got.loc["prompt"], got.loc["completion"]
    assert (p["call"], p["round"], p["n"]) == ("vertical_solver", 1, 2)
    assert p["mean"] == pytest.approx(200.0)
    assert p["median"] == pytest.approx(200.0)
    assert p["published_mean"] == 151.6 and p["mean_ratio"] == pytest.approx(200 / 151.6)
    assert pd.isna(p["at_cap"])
    assert c["mean"] == pytest.approx(3472.0)
    assert c["published_median"] == 838
    assert c["at_cap"] == pytest.approx(0.5)


def test_missing_columns_and_no_published_calls_are_errors() -> None:
    with pytest.raises(ConfigError, match="completion_tokens"):
        paper_lengths_df(pd.DataFrame({"labels": [{}], "topology": ["star"], "round": [1],
                                       "prompt_tokens": [1]}))  # fmt: skip
    none = pd.DataFrame([_call(None, 1, 5, 5)])
    assert paper_lengths_df(none).empty
    with pytest.raises(ConfigError, match="no calls with a discussion call label"):
        paper_lengths_figure(none)


def test_the_figure_draws_simulated_bars_and_published_markers() -> None:
    calls = pd.DataFrame([_call("vertical_reviewer", 2, 1400, 700),
                          _call("full_mesh_message", 1, 210, 260, topology="full_mesh")])  # fmt: skip
    fig = paper_lengths_figure(calls)
    assert [t.type for t in fig.data] == ["bar", "scatter", "bar", "scatter"]
    prompt_bars, prompt_pub = fig.data[0], fig.data[1]
    assert list(prompt_bars.x) == ["star reviewer r2", "full_mesh message r1"]
    assert list(prompt_bars.y) == [1400, 210]
    assert list(prompt_pub.y) == [1486, 218.7]  # the published prompt means
    assert prompt_bars.marker.color[0] != prompt_bars.marker.color[1]  # one colour a topology
    assert "at the 6,144-token cap" in fig.data[2].hovertext[0]


def test_per_category_rows_by_hand() -> None:
    """``by_category``: the published rows of every task category next to ``all`` (the
    extract's ``context_by_task``), and simulated calls split by their ``task_category``
    label: two math and one research Star round-1 solver calls."""
    pub = published_lengths_df(by_category=True)
    assert list(pub["category"].unique()) == ["all", "math", "research", "consulting", "coding"]
    assert len(pub) == 5 * 24
    r = pub.set_index(["category", "call", "round", "kind"])
    # workflow.json groups.math.vertical.context.reviewer[2].completion_tokens
    got = r.loc[("math", "vertical_reviewer", 3, "completion")]
    assert (got["median"], got["mean"]) == (600.5, 1543)

    def call(cat: str, completion: int) -> dict[str, object]:
        return {"labels": {"call": "vertical_solver", "task_category": cat}, "round": 1,
                "topology": "star", "prompt_tokens": 100, "completion_tokens": completion,
                "outcome": "ok"}  # fmt: skip

    calls = pd.DataFrame([call("math", 500), call("math", 700), call("research", 900)])
    out = paper_lengths_df(calls, by_category=True)
    done = out[out["kind"] == "completion"].set_index("category")
    assert done.loc["all", "mean"] == 700 and done.loc["all", "n"] == 3
    assert done.loc["math", "mean"] == 600 and done.loc["math", "n"] == 2
    assert done.loc["research", "mean"] == 900
    assert done.loc["math", "published_mean"] == 588.3  # groups.math.vertical solver round 1
    assert set(done.index) == {"all", "math", "research"}  # no calls: no row
    assert "category" not in paper_lengths_df(calls).columns
