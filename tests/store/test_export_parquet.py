"""Run data as DuckDB and pandas users expect: datetime twins of the epoch seconds, typed
JSON, no writer columns in ``select *``, and Parquet files read back without agentlab."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from agentlab.cli import main as cli_main
from agentlab.store import ReplaySink, open_run

T0 = 1_790_000_000.5  # 2026-09-21, an epoch second with a fraction


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "run"
    assert cli_main(["demo", "--out", str(out), "--agents", "5", "--ticks", "1"]) == 0
    return out


def _fill(run_dir: Path) -> None:
    sink = ReplaySink(run_dir, shard="s1")
    sink.register(
        "calls",
        {"agent_id": "VARCHAR", "start": "DOUBLE", "end": "DOUBLE", "ts": "DOUBLE",
         "labels": "JSON", "tags": "VARCHAR[]"},
        description="calls", module="tests",
    )  # fmt: skip
    sink.extend(
        "calls",
        [
            {"agent_id": "a0", "start": T0, "end": T0 + 2.25, "ts": 3.0,
             "labels": {"stage": "react", "n": [1, 2]}, "tags": ["x"]},
            {"agent_id": "a1", "start": T0 + 1, "end": None, "ts": T0,
             "labels": None, "tags": []},
        ],
    )  # fmt: skip
    sink.flush()
    sink.close()


def test_views_hide_writer_columns_and_add_utc_datetimes(run_dir: Path) -> None:
    _fill(run_dir)
    run = open_run(run_dir)
    df = run.df("calls")
    assert list(df.columns) == [
        "agent_id", "start", "start_at", "end", "end_at", "ts", "ts_at", "labels", "tags",
    ]  # fmt: skip
    assert str(df["start_at"].dtype) == "datetime64[us, UTC]"
    assert df["start_at"][0] == pd.Timestamp(T0, unit="s", tz="UTC")
    assert df["end_at"][0] - df["start_at"][0] == pd.Timedelta(seconds=2.25)
    assert pd.isna(df["end_at"][1])  # NULL stays NULL
    assert pd.isna(df["ts_at"][0])  # 3.0 s is a clock offset, not a date in 1970
    # JSON is typed: dicts in pandas, JSON in DuckDB
    assert df["labels"][0] == {"stage": "react", "n": [1, 2]} and df["labels"][1] is None
    assert run.sql("select labels from calls where agent_id = 'a0'")["labels"][0]["n"] == [1, 2]
    types = dict(run.con.execute("DESCRIBE calls").fetchall() and [
        (r[0], r[1]) for r in run.con.execute("DESCRIBE calls").fetchall()
    ])  # fmt: skip
    assert types["labels"] == "JSON" and types["start_at"] == "TIMESTAMP WITH TIME ZONE"
    assert run.sql("select labels->>'stage' s from calls where agent_id = 'a0'")["s"][0] == "react"
    # select * shows data only; internal.<name> and internal=True keep the writer's columns
    assert "_shard" not in run.sql("select * from calls").columns
    full = run.df("calls", internal=True)
    assert {"_shard", "_seq", "start_at"} <= set(full.columns)
    assert run.sql("select _seq from internal.calls order by _seq")["_seq"].tolist() == [0, 1]
    assert len(run.df("calls", where={"start_at": pd.Timestamp(T0, unit="s", tz="UTC")})) == 1
    # compaction keeps the stored shape (no *_at inside) and the views stay the same
    run.compact()
    pq = duckdb.sql(f"DESCRIBE SELECT * FROM '{run_dir}/replay/calls/_compact.parquet'").fetchall()
    assert "start_at" not in {r[0] for r in pq} and "_seq" in {r[0] for r in pq}
    again = open_run(run_dir).df("calls")
    pd.testing.assert_frame_equal(again, df)


def test_helpers_are_consistent_on_the_demo_run(demo_run: Path) -> None:
    run = open_run(demo_run)
    calls = run.llm_calls_df()
    assert len(calls) > 0 and isinstance(calls["labels"][0], dict)
    drift = calls["start_at"] - pd.to_datetime(calls["start"], unit="s", utc=True)
    assert (drift.abs() < pd.Timedelta(microseconds=2)).all()  # float seconds → µs
    spans = run.spans_df()
    assert isinstance(spans["attributes"][0], dict) and "start_at" in spans
    for frame in (calls, spans, run.messages_df(), run.timeline_df()):
        assert not {"_shard", "_seq"} & set(frame.columns)


def test_export_parquet_reads_back_with_plain_pandas(demo_run: Path, tmp_path: Path) -> None:
    run = open_run(demo_run)
    files = run.export_parquet(tmp_path / "pq")
    assert set(files) == set(run.dataset_names())
    assert sorted(p.name for p in (tmp_path / "pq").iterdir()) == sorted(
        f"{n}.parquet" for n in files
    )  # one file per dataset, no temp files left
    for name, path in files.items():
        back = pd.read_parquet(path)
        ours = run.df(name)
        assert list(back.columns) == list(ours.columns), name
        assert len(back) == len(ours), name
    calls = pd.read_parquet(files["llm_calls"])
    assert str(calls["start_at"].dtype).startswith("datetime64") and calls["start_at"].dt.tz
    assert (calls["total_tokens"] == run.llm_calls_df()["total_tokens"]).all()
    assert calls["labels"].map(lambda s: "stage" in s).all()  # JSON text, loads anywhere


def test_cli_export_parquet_in_a_process_without_agentlab(demo_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    assert cli_main(["export", str(demo_run), "--parquet", str(out), "--dataset", "llm_calls",
                     "--dataset", "spans"]) == 0  # fmt: skip
    assert sorted(p.name for p in out.iterdir()) == ["llm_calls.parquet", "spans.parquet"]
    # a reader that never imports agentlab
    code = (
        "import sys, pandas as pd; d = pd.read_parquet(sys.argv[1]);"
        "assert 'agentlab' not in sys.modules; print(len(d), d['start_at'].dt.tz)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(out / "spans.parquet")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    n, tz = res.stdout.split()
    assert int(n) == len(open_run(demo_run).spans_df()) and tz == "UTC"
