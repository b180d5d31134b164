"""Open runs share one DuckDB database per process (agentlab.store.duck), each in a catalog
of its own: what one run creates is invisible to another, a closed or collected run's
catalog is gone, and a forked child gets a database of its own."""

from __future__ import annotations

import gc
import multiprocessing as mp
from pathlib import Path

import duckdb
import pytest

from agentlab.store import ReplaySink, open_run, sql_over_runs


def _calls(run_dir: Path, n: int) -> Path:
    run_dir.mkdir(parents=True)
    sink = ReplaySink(run_dir, shard="s1")
    sink.register("llm_calls", {"agent_id": "VARCHAR", "start": "DOUBLE", "end": "DOUBLE"},
                  description="calls", module="tests")  # fmt: skip
    sink.extend("llm_calls", [{"agent_id": f"a{i}", "start": float(i), "end": i + 1.0}
                              for i in range(n)])  # fmt: skip
    sink.flush()
    return run_dir


def _catalogs(run) -> set[str]:  # type: ignore[no-untyped-def]
    names = run.con.execute("SELECT database_name FROM duckdb_databases()").fetchall()
    return {n for (n,) in names if n.startswith("run_")}


def test_two_open_runs_keep_their_tables_views_and_frames_apart(tmp_path: Path) -> None:
    a, b = open_run(_calls(tmp_path / "a", 3)), open_run(_calls(tmp_path / "b", 5))
    try:
        assert len(a.llm_calls_df()) == 3 and len(b.llm_calls_df()) == 5
        a.con.execute("CREATE TABLE mine AS SELECT 1 AS x")
        assert b.sql("SELECT count(*) n FROM llm_calls")["n"].tolist() == [5]
        with pytest.raises(duckdb.CatalogException, match="mine"):
            b.con.execute("SELECT * FROM mine")
        assert a.sql("SELECT current_setting('TimeZone') tz")["tz"].tolist() == ["UTC"]
        # the same query over many runs, beside them: its own catalog too
        both = sql_over_runs({"a": tmp_path / "a", "b": tmp_path / "b"},
                             "SELECT point, count(*) n FROM llm_calls GROUP BY 1 ORDER BY 1")  # fmt: skip
        assert both["n"].tolist() == [3, 5]
        assert len(a.llm_calls_df()) == 3
    finally:
        a.close()
        b.close()


def test_a_closed_or_collected_run_leaves_no_catalog_behind(tmp_path: Path) -> None:
    probe = open_run(_calls(tmp_path / "probe", 1))
    before = _catalogs(probe)
    run = open_run(_calls(tmp_path / "r", 2))
    assert len(run.llm_calls_df()) == 2
    assert len(_catalogs(probe) - before) == 1
    run.close()
    assert _catalogs(probe) == before
    assert len(run.llm_calls_df()) == 2  # (a closed run opens a connection again on use)
    run.close()
    left = open_run(tmp_path / "r")
    assert len(left.llm_calls_df()) == 2
    del left  # never closed: collected, as a connection of its own would have been
    gc.collect()
    assert _catalogs(probe) == before
    probe.close()


def _count_in_child(path: str, out: mp.Queue) -> None:  # type: ignore[type-arg]
    run = open_run(path)
    out.put(len(run.llm_calls_df()))
    run.close()


def test_a_forked_child_reads_runs_with_a_database_of_its_own(tmp_path: Path) -> None:
    parent = open_run(_calls(tmp_path / "p", 4))
    assert len(parent.llm_calls_df()) == 4  # the parent's database exists and is busy
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_count_in_child, args=(str(tmp_path / "p"), out))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and out.get(timeout=5) == 4
    assert len(parent.llm_calls_df()) == 4
    parent.close()
