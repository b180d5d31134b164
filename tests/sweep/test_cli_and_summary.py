"""The ``agentlab`` CLI surface, the sweep's readable table and replicate aggregation."""

from __future__ import annotations

import argparse
import math

import pandas as pd
import pytest

from agentlab.cli import build_parser, main
from agentlab.core.text_table import format_table
from agentlab.errors import ConfigError
from agentlab.sweep.summary import aggregate_df, points_table


def test_version_and_every_option_documented(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("agentlab 0.")
    parser = build_parser()
    top = parser.format_help()
    assert "examples:" in top and "lazily" not in top
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        for action in p._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"agentlab {name} {action.option_strings[0]} has no help"
    assert "sim/vllm-3b" in sub.choices["run"].format_help()  # profiles listed


def test_points_table_is_readable() -> None:
    df = pd.DataFrame({
        "point_id": ["agents=3_seed=0-aaaaaaaa", "agents=4_seed=0-bbbbbbbb"],
        "agents": [3, 4], "seed": [0, 0], "status": ["ok", "failed"],
        "duration_s": [12.3456, 1.0], "error": [None, "boom"],
        "burst_fraction": [0.123456789, None], "traffic_summary": ["tables/t.csv"] * 2,
    })  # fmt: skip
    table = points_table(df, ["agents", "seed"])
    assert list(table.columns) == ["agents", "status", "duration_s", "burst_fraction"]
    text = format_table(table)
    lines = text.splitlines()
    assert len(lines) == 4 and max(map(len, lines)) < 80
    assert "0.1235" in text and "12.35" in text and "–" in lines[3]


def test_aggregate_replicates_with_confidence_intervals() -> None:
    rows = [
        {"agents": a, "seed": s, "status": "ok", "calls": 10.0 * a + s}
        for a in (3, 4)
        for s in range(5)
    ]
    rows.append({"agents": 3, "seed": 9, "status": "failed", "calls": 1e9})
    agg = aggregate_df(pd.DataFrame(rows), ["agents"], ["calls"])
    r = agg.set_index("agents").loc[3]
    assert r["n"] == 5 and r["calls_mean"] == pytest.approx(32.0)  # failed point left out
    sd = math.sqrt(2.5)  # std of 0..4
    half = 2.7764451051977987 * sd / math.sqrt(5)  # t(0.975, 4)
    assert r["calls_ci_low"] == pytest.approx(32 - half)
    assert r["calls_ci_high"] == pytest.approx(32 + half)
    with pytest.raises(ConfigError, match="not in the sweep table"):
        aggregate_df(pd.DataFrame(rows), ["agentz"], ["calls"])
