"""Writing the run log: schema catalog, rows, shards, fork safety, offsets/truncate."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import orjson
import pytest

from agentlab.errors import ConfigError
from agentlab.store import (
    ReplaySink,
    get_replay_sink,
    load_schema,
    log_offsets,
    open_run,
    truncate_log,
)
from agentlab.store.schema import normalize_type


def _lines(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [orjson.loads(x) for x in data.splitlines()]


def test_schema_round_trip_and_merge(run_dir: Path) -> None:
    sink = ReplaySink(run_dir, shard="s1")
    cols = {"agent_id": "str", "tick": "int", "score": "float", "ok": "bool", "tags": "str[]"}
    sink.register("votes", cols, description="one row per vote", module="tests")
    sink.register("votes", {"extra": "json"})
    doc = load_schema(run_dir)
    assert doc["schema_version"] == 1
    entry = doc["datasets"]["votes"]
    assert entry["description"] == "one row per vote" and entry["module"] == "tests"
    assert entry["columns"] == {
        "agent_id": "VARCHAR", "tick": "BIGINT", "score": "DOUBLE", "ok": "BOOLEAN",
        "tags": "VARCHAR[]", "extra": "JSON",
    }  # fmt: skip
    assert list(entry["columns"])[:2] == ["agent_id", "tick"]  # registration order kept
    with pytest.raises(ConfigError, match="BIGINT"):
        sink.register("votes", {"tick": "VARCHAR"})
    with pytest.raises(ConfigError, match="valid"):
        normalize_type("decimal")
    with pytest.raises(ConfigError, match="reserved"):
        sink.register("spans", {"a": "int"})
    # round trip through the reader with the declared types
    sink.append("votes", {"agent_id": "a", "tick": 1, "score": 0.5, "ok": True, "tags": ["x"],
                          "extra": {"k": [1, 2]}})  # fmt: skip
    sink.flush()
    row = open_run(run_dir).df("votes").iloc[0]
    assert (row["agent_id"], row["tick"], row["ok"], list(row["tags"])) == ("a", 1, True, ["x"])
    assert row["extra"] == {"k": [1, 2]}  # JSON columns come back as Python objects


def test_rows_get_shard_and_monotonic_seq(run_dir: Path) -> None:
    sink = ReplaySink(run_dir, shard="w1")
    for i in range(5):
        assert sink.append("events", {"i": i}) == i
    assert sink.extend("events", [{"i": 5}, {"i": 6}]) == 6
    sink.append("other", {"x": "a"})
    sink.flush()
    rows = _lines(run_dir / "replay/events/w1.jsonl")
    assert [r["_seq"] for r in rows] == list(range(7))
    assert {r["_shard"] for r in rows} == {"w1"}
    assert [r["_seq"] for r in _lines(run_dir / "replay/other/w1.jsonl")] == [0]
    # auto-registration inferred the types, and a new key extends the schema
    sink.append("events", {"i": 7, "note": "late"})
    assert load_schema(run_dir)["datasets"]["events"]["columns"] == {
        "i": "BIGINT",
        "note": "VARCHAR",
    }


def test_reused_shard_continues_seq_and_drops_torn_tail(run_dir: Path) -> None:
    path = run_dir / "replay/ds/fixed.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"a":1,"_shard":"fixed","_seq":0}\n{"a":2,"_shard":"fixed","_seq":1}\n{"a":')
    writer = ReplaySink(run_dir, shard="fixed")
    assert writer.append("ds", {"a": 3}) == 2
    with pytest.warns(UserWarning, match="torn"):
        writer.flush()
    assert [r["_seq"] for r in _lines(path)] == [0, 1, 2]


def _child_write(run_dir: str, q: mp.Queue) -> None:
    sink = get_replay_sink(run_dir)  # inherited from the parent through fork
    sink.append("fork", {"who": "child"})
    sink.flush()
    q.put(sink.shard)


def test_forked_child_gets_its_own_shard(run_dir: Path) -> None:
    sink = get_replay_sink(run_dir)
    sink.append("fork", {"who": "parent"})  # still buffered at fork time
    q: mp.Queue = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=_child_write, args=(str(run_dir), q))
    p.start()
    p.join(30)
    child_shard = q.get(timeout=5)
    sink.flush()
    assert child_shard != sink.shard
    parent_rows = _lines(run_dir / f"replay/fork/{sink.shard}.jsonl")
    child_rows = _lines(run_dir / f"replay/fork/{child_shard}.jsonl")
    assert [r["who"] for r in parent_rows] == ["parent"]  # the child did not re-write it
    assert [r["who"] for r in child_rows] == ["child"]


def _writer_proc(run_dir: str, n: int, width: int) -> None:
    sink = ReplaySink(run_dir, flush_interval=0.001, max_pending=7)
    pad = "x" * width
    for i in range(n):
        sink.append("mp", {"i": i, "pid": os.getpid(), "pad": pad})
    sink.flush()


def test_concurrent_processes_write_complete_lines(run_dir: Path) -> None:
    ctx = mp.get_context("fork")
    n, procs = 3000, [ctx.Process(target=_writer_proc, args=(str(run_dir), 3000, w)) for w in (10, 500, 5000)]  # fmt: skip
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    shards = sorted((run_dir / "replay/mp").glob("*.jsonl"))
    assert len(shards) == 3
    for shard in shards:
        rows = _lines(shard)  # every line parses: none torn or interleaved
        assert [r["i"] for r in rows] == list(range(n))
        assert [r["_seq"] for r in rows] == list(range(n))
        assert len({r["pid"] for r in rows}) == 1
    assert int(open_run(run_dir).sql("select count(*) from mp").iloc[0, 0]) == 3 * n


def test_offsets_and_truncate_round_trip(run_dir: Path) -> None:
    sink = ReplaySink(run_dir, shard="d")
    sink.extend("ticks", [{"tick": 0, "v": i} for i in range(10)])
    sink.flush()
    offsets = log_offsets(run_dir)
    assert offsets == {"replay/ticks/d.jsonl": (run_dir / "replay/ticks/d.jsonl").stat().st_size}
    before = (run_dir / "replay/ticks/d.jsonl").read_bytes()
    # the "crashed" tick: more rows, a new dataset, another process's shard, a compaction
    sink.extend("ticks", [{"tick": 1, "v": i} for i in range(5)])
    sink.append("late", {"x": 1})
    sink.flush()
    other = ReplaySink(run_dir, shard="e")
    other.append("ticks", {"tick": 1, "v": 99})
    other.flush()
    open_run(run_dir).compact(["ticks"])
    sink.append("ticks", {"tick": 1, "v": -1})  # unflushed: must be dropped too
    changed = truncate_log(run_dir, offsets)
    assert set(changed) == {"replay/ticks/d.jsonl", "replay/ticks/e.jsonl", "replay/late/d.jsonl"}
    assert log_offsets(run_dir) == offsets
    assert (run_dir / "replay/ticks/d.jsonl").read_bytes() == before
    assert not (run_dir / "replay/ticks/_compact.parquet").exists()
    # writing resumes with the next sequence number after the kept rows
    assert sink.append("ticks", {"tick": 1, "v": 0}) == 10
    sink.flush()
    df = open_run(run_dir).df("ticks", internal=True)
    assert list(df["_seq"]) == list(range(11)) and df["v"].tolist()[-1] == 0
