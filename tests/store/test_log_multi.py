"""sql_over_runs (sweep queries) and the batched encoder's edge cases."""

from __future__ import annotations

import os
import time
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentlab.errors import ConfigError
from agentlab.store import ReplaySink, open_run, sql_over_runs
from agentlab.store._writer import encode_row, encode_rows


def _run(root: Path, name: str, rows: list[dict], *, extra: dict | None = None) -> Path:
    d = root / name
    d.mkdir()
    sink = ReplaySink(d, shard="w")
    sink.extend("votes", rows)
    if extra:
        sink.append("only_here", extra)
    sink.flush()
    return d


def test_sql_over_runs_unions_datasets_with_point(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", [{"agent_id": f"x{i}", "yes": i % 2 == 0} for i in range(5)])
    b = _run(
        tmp_path,
        "b",
        [{"agent_id": "y", "yes": True, "weight": 0.5}] * 3,  # b has an extra column
        extra={"k": 1},
    )
    open_run(b).compact(["votes"])  # one run compacted, the other raw: both read the same
    ReplaySink(b, shard="late").append("votes", {"agent_id": "z", "yes": False})
    ReplaySink(b, shard="late").flush()
    got = sql_over_runs(
        {"p1": a, "p2": b},
        "select point, count(*) n, sum(yes::int) y, count(weight) w "
        "from votes group by point order by point",
    )
    assert got["point"].tolist() == ["p1", "p2"]
    assert got["n"].tolist() == [5, 4] and got["y"].tolist() == [3, 3]
    assert got["w"].tolist() == [0, 3]  # the column missing in p1 reads as NULL
    # a dataset present in only one run is still a view; point is the first column
    only = sql_over_runs({"p1": a, "p2": b}, "select * from only_here")
    assert list(only.columns[:2]) == ["point", "k"] and only["point"].tolist() == ["p2"]
    # same rows as reading each run on its own
    per_run = sum(len(open_run(d).df("votes")) for d in (a, b))
    assert (
        int(sql_over_runs({"p1": a, "p2": b}, "select count(*) from votes").iloc[0, 0]) == per_run
    )
    with pytest.raises(ConfigError, match="at least one"):
        sql_over_runs({}, "select 1")


def test_a_misspelt_dataset_is_named(tmp_path: Path) -> None:
    """DuckDB's own suggestion for a table that is not there came from its system catalog
    (``from llm_callz``: "Did you mean pg_class?"): the datasets are named in a note."""
    import duckdb

    a = _run(tmp_path, "a", [{"agent_id": "x", "yes": True}], extra={"k": 1})
    for query in (lambda q: open_run(a).sql(q), lambda q: sql_over_runs({"p": a}, q)):
        with pytest.raises(duckdb.CatalogException) as got:  # DuckDB's error, unchanged
            query("select * from vote")
        assert got.value.__notes__ == ["did you mean 'votes'? datasets to query: only_here, votes"]
        with pytest.raises(duckdb.CatalogException) as got:
            query("select * from zzz")
        assert got.value.__notes__ == ["datasets to query: only_here, votes"]
        with pytest.raises(duckdb.BinderException) as other:  # other errors: no note
            query("select nope from votes")
        assert not getattr(other.value, "__notes__", None)


def test_sql_over_runs_reports_torn_lines(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", [{"v": i} for i in range(3)])
    shard = a / "replay/votes/w.jsonl"
    with open(shard, "ab") as f:
        f.write(b'{"v": 9')
    old = time.time() - 60
    os.utime(shard, (old, old))
    with pytest.warns(UserWarning, match="torn last line"):
        got = sql_over_runs({"only": a}, "select sum(v) s from votes")
    assert int(got["s"].iloc[0]) == 3


def test_encoder_falls_back_on_lookalike_boundaries_and_odd_values() -> None:
    rows = [
        {"text": "a},{b"},  # the batch boundary pattern inside a string
        {"nested": [{"x": 1}, {"y": 2}]},  # and inside a nested value
        {},  # an empty row
        {"big": 2**70, "ok": 1},  # an int JSON cannot hold: written as a string
        {1: "non-str key"},
        {"plain": "row"},
    ]
    bad: list[str] = []
    data = encode_rows(rows, 7, "s1", bad)
    lines = [orjson.loads(x) for x in data.splitlines()]
    assert [r["_seq"] for r in lines] == list(range(7, 13))
    assert all(r["_shard"] == "s1" for r in lines)
    assert lines[0]["text"] == "a},{b" and lines[1]["nested"] == [{"x": 1}, {"y": 2}]
    assert lines[2] == {"_shard": "s1", "_seq": 9}
    assert lines[3]["big"] == str(2**70) and lines[3]["ok"] == 1 and len(bad) == 1
    assert lines[4]["1"] == "non-str key" and lines[5]["plain"] == "row"
    # the fast path gives byte-identical output to the row-by-row path
    clean = [{"a": i, "b": "x" * i} for i in range(5000)]
    fast = encode_rows(clean, 0, "s", [])
    slow = b"".join(encode_rows([r], i, "s", []) for i, r in enumerate(clean))
    assert fast == slow


def test_rows_encoded_when_built_are_written_as_the_same_bytes() -> None:
    rows = [
        {"text": "a},{b", "n": 1},
        {},
        {"big": 2**70, "ok": 1},  # orjson refuses it: encode_row hands the dict back
        {1: "non-str key"},
        {"plain": "row", "nested": {"x": [1, 2]}},
    ]
    encoded = [encode_row(r) for r in rows]
    assert encoded[2] is rows[2] and encoded[3] is rows[3]
    assert encoded[0] == b'"text":"a},{b","n":1' and encoded[1] == b""
    bad_dicts: list[str] = []
    bad_mixed: list[str] = []
    assert encode_rows(encoded, 3, "s", bad_mixed) == encode_rows(rows, 3, "s", bad_dicts)
    assert len(bad_mixed) == len(bad_dicts) == 1  # the odd value is still reported once
    clean = [{"a": i, "b": "x" * i} for i in range(3000)]  # more than one chunk
    assert encode_rows([encode_row(r) for r in clean], 0, "s", []) == encode_rows(clean, 0, "s", [])


def test_sink_encode_registers_columns_and_keeps_order(run_dir: Path) -> None:
    sink = ReplaySink(run_dir, shard="w")
    sink.append("votes", {"agent_id": "a0", "yes": True})
    encoded = [sink.encode("votes", {"agent_id": f"a{i}", "yes": i % 2 == 0, "_seq": 99})
               for i in (1, 2)]  # fmt: skip
    encoded.append(sink.encode("votes", {"agent_id": "a3", "weight": 0.5}))  # a new column
    assert sink.extend_encoded("votes", encoded) == 3
    assert sink.extend_encoded("votes", []) == -1
    sink.flush()
    lines = (run_dir / "replay" / "votes" / "w.jsonl").read_bytes().splitlines()
    assert [orjson.loads(x)["_seq"] for x in lines] == [0, 1, 2, 3]  # no "_seq": 99 taken
    assert lines[1] == b'{"_shard":"w","agent_id":"a1","yes":false,"_seq":1}'
    df = open_run(run_dir).df("votes")
    assert list(df["agent_id"]) == ["a0", "a1", "a2", "a3"]
    assert df["weight"].isna().tolist() == [True, True, True, False]


def test_rows_are_snapshotted_at_append(run_dir: Path) -> None:
    sink = ReplaySink(run_dir, shard="snap", flush_interval=60)
    row = {"tick": 0}
    for t in range(3):
        row["tick"] = t  # a caller reusing one dict
        sink.append("snap", row)
    rows = [{"tick": 10}, {"tick": 11}]
    sink.extend("snap", rows)
    rows[0]["tick"] = -1
    sink.append("snap", {"tick": 12, "_seq": 99, "_shard": "fake"})  # reserved keys ignored
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sink.flush()
    df = open_run(run_dir).df("snap", internal=True)
    assert df["tick"].tolist() == [0, 1, 2, 10, 11, 12]
    assert df["_seq"].tolist() == list(range(6)) and set(df["_shard"]) == {"snap"}


def test_background_thread_restarts_after_close(run_dir: Path) -> None:
    sink = ReplaySink(run_dir, shard="bg", flush_interval=0.02)
    sink.append("bg", {"i": 0})
    sink.close()
    sink.append("bg", {"i": 1})  # no explicit flush: the restarted thread writes it
    path = run_dir / "replay/bg/bg.jsonl"
    deadline = time.monotonic() + 10
    while path.read_bytes().count(b"\n") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [orjson.loads(x)["i"] for x in path.read_bytes().splitlines()] == [0, 1]


def test_encoded_rows_with_a_few_mappings_are_written_as_the_row_by_row_bytes() -> None:
    """A trace flush: a batch's encoded span rows plus its own span as a dict (and odd
    mappings: an empty one, one JSON cannot hold, a non-str key) give the bytes of the
    row-by-row path, and the odd value is still reported."""
    rows = [{"name": f"s{i}", "text": "a},{b", "attrs": {"k": [i]}} for i in range(600)]
    mixed: list[Any] = [encode_row(r) for r in rows]
    mixed[100] = {"name": "society.batch", "attrs": {"n": 256}}
    mixed[0] = {"name": "first"}  # mappings at both ends, and of another mapping type
    mixed[-1] = OrderedDict(name="last", n=1)
    mixed[300] = OrderedDict(name="middle")
    as_rows = [r if type(r) is not bytes else rows[i] for i, r in enumerate(mixed)]
    one_by_one = b"".join(encode_rows([r], i, "s", []) for i, r in enumerate(as_rows))
    assert encode_rows(mixed, 0, "s", []) == one_by_one
    for odd in ({}, {"big": 2**70}, {1: "non-str key"}):
        with_odd = [*mixed[:10], odd, *mixed[10:20]]
        plain = [*as_rows[:10], odd, *as_rows[10:20]]
        bad_a: list[str] = []
        bad_b: list[str] = []
        got = encode_rows(with_odd, 5, "s", bad_a)
        assert got == b"".join(encode_rows([r], 5 + i, "s", bad_b) for i, r in enumerate(plain))
        assert len(bad_a) == len(bad_b)
