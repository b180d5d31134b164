"""``Sweep.sql``: one view per dataset over every point's runs, and a ``points`` table with
each run's grid parameters to group by (no kernels: the sweep folder is written here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlab.errors import ConfigError
from agentlab.store import ReplaySink, sql_over_runs
from agentlab.sweep import Sweep


def _sweep(out: Path) -> Sweep:
    points = [
        {"point_id": "agents=3_seed=0-aa", "params": {"agents": 3, "seed": 0, "topologies": ["star"]}},
        {"point_id": "agents=4_seed=0-bb", "params": {"agents": 4, "seed": 0, "topologies": ["star"]}},
    ]  # fmt: skip
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"schema_version": 1, "points": points}))
    for p in points:
        n = p["params"]["agents"]
        for sub, rows in (("exp", n), ("exp/mesh", 1)):  # a point may hold several runs
            sink = ReplaySink(out / p["point_id"] / sub, shard="w")
            sink.extend(
                "llm_calls", [{"agent_id": f"a{i}", "total_tokens": 10} for i in range(rows)]
            )
            sink.flush()
    return Sweep(out)


def test_points_table_groups_every_run_by_its_parameters(tmp_path: Path) -> None:
    s = _sweep(tmp_path / "sw")
    got = s.sql(
        "select p.agents, p.seed, count(*) as calls, sum(c.total_tokens) as tokens "
        "from llm_calls c join points p using (point) group by all order by all"
    )
    assert got.to_dict("records") == [
        {"agents": 3, "seed": 0, "calls": 4, "tokens": 40},
        {"agents": 4, "seed": 0, "calls": 5, "tokens": 50},
    ]
    points = s.sql("select * from points order by point")
    assert list(points.columns) == ["point", "point_id", "agents", "seed", "topologies"]
    assert points["point"].tolist() == [
        "agents=3_seed=0-aa/exp", "agents=3_seed=0-aa/exp/mesh",
        "agents=4_seed=0-bb/exp", "agents=4_seed=0-bb/exp/mesh",
    ]  # fmt: skip
    assert list(points["topologies"].iloc[0]) == ["star"]


def test_an_extra_table_may_not_hide_a_dataset(tmp_path: Path) -> None:
    import pandas as pd

    s = _sweep(tmp_path / "sw")
    with pytest.raises(ConfigError, match="hide the dataset"):
        sql_over_runs(s.run_dirs(), "select * from llm_calls",
                      tables={"llm_calls": pd.DataFrame({"x": [1]})})  # fmt: skip
