"""Reading the run log: catalog, df/sql, torn lines, tail cursors, compaction, agent view."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest

from agentlab.errors import StoreError, UnknownNameError
from agentlab.store import DirectoryStore, ReplaySink, open_run, sql_over_runs


def _fill(run_dir: Path, n: int = 200, shard: str = "s1", start: int = 0) -> ReplaySink:
    sink = ReplaySink(run_dir, shard=shard)
    sink.register(
        "llm_calls",
        {"agent_id": "VARCHAR", "tick": "BIGINT", "start": "DOUBLE", "end": "DOUBLE",
         "first_token": "DOUBLE", "prompt_tokens": "BIGINT", "outcome": "VARCHAR"},
        description="calls", module="tests",
    )  # fmt: skip
    sink.extend(
        "llm_calls",
        [
            {"agent_id": f"a{i % 4}", "tick": i // 10, "start": float(i), "end": i + 1.5,
             "first_token": i + 0.25, "prompt_tokens": i, "outcome": "ok"}
            for i in range(start, start + n)
        ],
    )  # fmt: skip
    sink.flush()
    return sink


def test_catalog_df_sql_and_helpers(run_dir: Path) -> None:
    _fill(run_dir)
    run = open_run(run_dir)
    cat = run.datasets.set_index("name")
    assert cat.loc["llm_calls", "description"] == "calls" and cat.loc["llm_calls", "shards"] == 1
    df = run.df("llm_calls", where={"agent_id": "a1"}, columns=["agent_id", "tick"], limit=7)
    assert list(df.columns) == ["agent_id", "tick"] and len(df) == 7
    assert set(df["agent_id"]) == {"a1"}
    assert len(run.df("llm_calls", where="tick >= 15")) == 50
    g = run.sql("select agent_id, count(*) n from llm_calls group by 1 order by 1")
    assert g["n"].tolist() == [50] * 4
    calls = run.llm_calls_df()
    assert (calls["latency"] == 1.5).all() and (calls["ttft"] == 0.25).all()
    assert run.messages_df().empty and "msg_id" in run.messages_df()
    assert run.timeline_df().empty
    with pytest.raises(UnknownNameError, match="llm_calls"):
        run.df("nope")
    with pytest.raises(UnknownNameError, match="column of 'llm_calls' 'tik'"):
        run.df("llm_calls", columns=["agent_id", "tik"])  # (as a where= key is)
    assert list(run.df("llm_calls", columns=["_seq"], internal=True, limit=1).columns) == ["_seq"]
    with pytest.raises(StoreError):
        open_run(run_dir / "missing")
    # rows appended after the first query are seen by the next one
    _fill(run_dir, 10, start=200)
    assert len(run.df("llm_calls")) == 210


def test_sums_of_integers_come_back_as_integers(run_dir: Path) -> None:
    """DuckDB's ``sum()`` of integers is a HUGEINT, which ``.df()`` makes float64: a table
    of per-tick tokens printed ``41915.0``. Whole values come back as int64; a column with
    NULLs, or too large for a float64 to hold exactly, stays float64."""
    _fill(run_dir)
    run = open_run(run_dir)
    got = run.sql(
        "select tick, sum(prompt_tokens) as pt, count(*) as n, avg(prompt_tokens) as mean, "
        "sum(prompt_tokens) filter (where tick > 5) as late, "
        "sum(prompt_tokens) + 2::HUGEINT ** 60 as huge from llm_calls group by tick order by tick"
    )
    assert str(got["pt"].dtype) == "int64" and got["pt"].tolist()[:2] == [45, 145]
    assert str(got["n"].dtype) == "int64" and str(got["mean"].dtype) == "float64"
    assert str(got["late"].dtype) == "float64" and got["late"].isna().sum() == 6
    assert str(got["huge"].dtype) == "float64"
    many = sql_over_runs({"a": run_dir, "b": run_dir}, "select point, sum(tick) s from llm_calls "
                         "group by point order by point")  # fmt: skip
    assert str(many["s"].dtype) == "int64" and many["s"].tolist() == [1900, 1900]


def test_agent_view(run_dir: Path) -> None:
    _fill(run_dir)
    DirectoryStore(run_dir / "agents").write_many(
        "a1", {"config.json": b'{"role": "voter"}', "state/memory.json": b"[]"}
    )
    view = open_run(run_dir).agent("a1")
    assert view.files == ["config.json", "state/memory.json"]
    assert view.json("config.json") == {"role": "voter"}
    assert view.datasets == ["llm_calls"]
    assert len(view.df("llm_calls")) == 50 and set(view.rows()) == {"llm_calls"}


def test_torn_last_line_is_skipped_and_reported(run_dir: Path) -> None:
    _fill(run_dir, 20)
    shard = run_dir / "replay/llm_calls/s1.jsonl"
    with open(shard, "ab") as f:
        f.write(b'{"agent_id":"a9","tick":99,"sta')  # a crash mid-line
    old = time.time() - 60
    os.utime(shard, (old, old))
    with pytest.warns(UserWarning, match="torn last line"):
        run = open_run(run_dir)
    # reported from the open on, not only once a query met it
    assert len(run.problems) == 1 and "s1.jsonl" in run.problems[0]
    df = run.df("llm_calls", internal=True)
    assert len(df) == 20 and "a9" not in set(df["agent_id"])
    rows, _ = run.tail("llm_calls")
    assert len(rows) == 20
    assert len(run.problems) == 1 and "s1.jsonl" in run.problems[0]


def _slow_writer(run_dir: str, n: int) -> None:
    # Writes each line in two pieces so readers see half-written lines all the time.
    path = Path(run_dir) / "replay/live/raw.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    for i in range(n):
        line = json.dumps({"i": i, "pad": "y" * (i % 50), "_shard": "raw", "_seq": i}) + "\n"
        cut = len(line) // 2
        os.write(fd, line[:cut].encode())
        if i % 7 == 0:
            time.sleep(0.0005)
        os.write(fd, line[cut:].encode())
    os.close(fd)


def _sink_writer(run_dir: str, n: int) -> None:
    sink = ReplaySink(run_dir, shard="sink", flush_interval=0.002, max_pending=13)
    for i in range(n):
        sink.append("live", {"i": i, "pad": "z" * (i % 30)})
        if i % 100 == 0:
            time.sleep(0.001)
    sink.flush()


def test_tail_never_skips_or_repeats_while_writers_append(run_dir: Path) -> None:
    sink = ReplaySink(run_dir, shard="setup")
    sink.register("live", {"i": "BIGINT", "pad": "VARCHAR"})
    (run_dir / "replay/live").mkdir(parents=True, exist_ok=True)
    n = 4000
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=f, args=(str(run_dir), n)) for f in (_slow_writer, _sink_writer)]
    for p in procs:
        p.start()
    run = open_run(run_dir)
    seen: dict[str, list[int]] = {"raw": [], "sink": []}
    cursor = None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # in-progress lines must not warn
        while True:
            alive = any(p.is_alive() for p in procs)
            rows, cursor = run.tail("live", cursor, limit=997, as_frame=False)
            for r in rows:
                seen[r["_shard"]].append(r["_seq"])
            if not alive and not rows:
                break
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert seen["raw"] == list(range(n)) and seen["sink"] == list(range(n))
    assert cursor == {f.name: f.stat().st_size for f in (run_dir / "replay/live").glob("*.jsonl")}
    frame, cursor2 = run.tail("live", cursor)
    assert frame.empty and cursor2 == cursor and {"i", "_seq"} <= set(frame.columns)


def test_compacted_and_raw_reads_agree(run_dir: Path) -> None:
    sink = _fill(run_dir, 300)
    _fill(run_dir, 100, shard="s2", start=300)
    query = "select agent_id, count(*) n, sum(prompt_tokens) t from llm_calls group by 1 order by 1"
    raw = open_run(run_dir)
    before = raw.sql(query)
    full = raw.df("llm_calls", internal=True).sort_values(["_shard", "_seq"], ignore_index=True)
    assert raw.compact(["llm_calls"]) == {"llm_calls": 400}
    assert (run_dir / "replay/llm_calls/_compact.parquet").exists()
    fresh = open_run(run_dir)
    pd.testing.assert_frame_equal(fresh.sql(query), before)
    again = fresh.df("llm_calls", internal=True).sort_values(["_shard", "_seq"], ignore_index=True)
    pd.testing.assert_frame_equal(again, full)
    assert fresh._cache is not None and fresh._cache.states["llm_calls"].parquet is not None
    # appends after compaction (old shard and a new one) are still seen, once
    sink.extend("llm_calls", [{"agent_id": "a0", "prompt_tokens": 1}] * 5)
    sink.flush()
    _fill(run_dir, 7, shard="s3", start=1000)
    for run in (raw, fresh, open_run(run_dir)):
        df = run.df("llm_calls", internal=True)
        assert len(df) == 412 and not df.duplicated(["_shard", "_seq"]).any()
    # compacting again (rows up to now) and reading raw JSONL give the same rows
    open_run(run_dir).compact()
    (run_dir / "replay/llm_calls/_compact.parquet").rename(run_dir / "moved.parquet")
    raw_rows = (
        open_run(run_dir)
        .df("llm_calls", internal=True)
        .sort_values(["_shard", "_seq"], ignore_index=True)
    )
    (run_dir / "moved.parquet").rename(run_dir / "replay/llm_calls/_compact.parquet")
    pq_rows = fresh.df("llm_calls", internal=True).sort_values(
        ["_shard", "_seq"], ignore_index=True
    )
    pd.testing.assert_frame_equal(raw_rows, pq_rows)


def test_a_key_value_folder_in_the_path_is_not_a_column(tmp_path: Path) -> None:
    """DuckDB reads a ``key=value`` folder as a hive partition column: a one-parameter
    sweep's point folder (``n-threads=10-7d152a32``) made every dataset of the runs under
    it unreadable ("does not have a column with name n-threads"); raw and compacted."""
    run_dir = tmp_path / "n-threads=10-7d152a32" / "agents=4" / "run"
    _fill(run_dir, 20)
    run = open_run(run_dir)
    assert int(run.sql("select count(*) from llm_calls").iloc[0, 0]) == 20
    run.compact(["llm_calls"])
    _fill(run_dir, 5, shard="s2", start=20)
    again = open_run(run_dir)
    got = again.df("llm_calls")
    assert len(got) == 25 and "n-threads" not in got.columns and "agents" not in got.columns
