"""A sweep on Ray: points run as tasks and their directories come back as archives."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlab.sweep import sweep

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def test_ray_sweep_collects_points(
    ray_session: object, tiny_notebook: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ray-sweep"
    s = sweep(
        tiny_notebook,
        {"x": [1, 2]},
        out=out,
        executor="ray",
        max_parallel=2,
        progress=False,
    )
    df = s.df().sort_values("x")
    assert list(df["status"]) == ["ok", "ok"]
    assert list(df["y"]) == [2, 4]
    for pid in df["point_id"]:
        assert (out / pid / "notebook.ipynb").exists()
        assert (out / pid / "results.jsonl").exists()


def test_ray_sweep_failure_is_isolated(
    ray_session: object, tiny_notebook: Path, tmp_path: Path
) -> None:
    s = sweep(
        tiny_notebook,
        [{"x": 1}, {"x": 2, "fail": True}],
        out=tmp_path / "f",
        executor="ray",
        progress=False,
    )
    df = s.df().set_index("x")
    assert df.loc[1, "status"] == "ok"
    assert df.loc[2, "status"] == "failed" and "boom at x=2" in df.loc[2, "error"]
