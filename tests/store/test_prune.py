"""``prune_log``: the log rewritten with the rows a predicate keeps (``store/prune.py``)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from agentlab.errors import CorruptRecordError
from agentlab.store import ReplaySink, open_run
from agentlab.store.layout import COMPACT_NAME
from agentlab.store.prune import prune_log


def _write(run_dir: Path) -> tuple[ReplaySink, Path]:
    sink = ReplaySink(run_dir, shard="w1")
    sink.extend("votes", [{"run_id": r, "k": k} for k in range(4) for r in ("a", "b")])
    sink.flush()
    return sink, run_dir / "replay" / "votes" / "w1.jsonl"


def _keep_a(dataset: str, row: dict) -> bool:
    return row["run_id"] == "a"


def test_rows_kept_in_order_with_their_bytes_and_seq_renumbered(run_dir: Path) -> None:
    sink, shard = _write(run_dir)
    before = shard.read_bytes().splitlines(keepends=True)
    (shard.parent / COMPACT_NAME).write_bytes(b"stale")  # a compaction of the old rows
    assert prune_log(run_dir, _keep_a) == {"replay/votes/w1.jsonl": 4}
    after = shard.read_bytes().splitlines(keepends=True)
    assert [orjson.loads(x)["_seq"] for x in after] == [0, 1, 2, 3]
    assert after[0] == before[0] and after[1] == before[2].replace(b'"_seq":2}', b'"_seq":1}')
    assert not (shard.parent / COMPACT_NAME).exists()
    assert prune_log(run_dir, _keep_a) == {}  # again: nothing to change
    sink.append("votes", {"run_id": "c", "k": 9})  # the writer goes on after the last row
    sink.flush()
    assert list(open_run(run_dir).df("votes").run_id) == ["a"] * 4 + ["c"]
    assert [orjson.loads(x)["_seq"] for x in shard.read_bytes().splitlines()] == [0, 1, 2, 3, 4]


def test_a_torn_last_line_is_dropped(run_dir: Path) -> None:
    _, shard = _write(run_dir)
    with open(shard, "ab") as f:
        f.write(b'{"_shard":"w1","run_id":"a","k"')  # the write a kill tore
    assert prune_log(run_dir, lambda d, r: True) == {"replay/votes/w1.jsonl": 1}
    assert shard.read_bytes().endswith(b"}\n") and len(open_run(run_dir).df("votes")) == 8


def test_a_corrupt_row_inside_a_shard_changes_nothing(run_dir: Path) -> None:
    _, shard = _write(run_dir)
    lines = shard.read_bytes().splitlines(keepends=True)
    lines.insert(3, b"not json\n")
    shard.write_bytes(b"".join(lines))
    with pytest.raises(CorruptRecordError, match="line 4 of 9 is not a JSON row"):
        prune_log(run_dir, _keep_a)
    assert shard.read_bytes() == b"".join(lines)
    assert not list(shard.parent.glob(".*.prune"))  # no temporary file left behind


def test_a_crash_between_two_shards_and_the_same_pruning_again_give_the_same_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each shard is replaced by its own rename: a crash after the first leaves one shard
    pruned and one not; the continuation prunes again (the commit has not changed)."""
    import os

    from agentlab.store import prune

    logs = {}
    for name in ("once", "crashed"):
        run_dir = tmp_path / name
        sink = ReplaySink(run_dir, shard="w1")
        for ds in ("a", "b"):
            sink.extend(ds, [{"run_id": r, "k": k} for k in range(3) for r in ("a", "b")])
        sink.flush()
        logs[name] = run_dir
    prune_log(logs["once"], _keep_a)
    replaced: list[str] = []

    def replace_once(src: str, dst: str) -> None:
        if replaced:
            raise KeyboardInterrupt  # (the process dies here)
        replaced.append(dst)
        os.rename(src, dst)

    monkeypatch.setattr(prune.os, "replace", replace_once)
    with pytest.raises(KeyboardInterrupt):
        prune_log(logs["crashed"], _keep_a)
    monkeypatch.undo()
    assert len(replaced) == 1
    prune_log(logs["crashed"], _keep_a)
    for ds in ("a", "b"):
        once, again = (p / "replay" / ds / "w1.jsonl" for p in (logs["once"], logs["crashed"]))
        assert once.read_bytes() == again.read_bytes()
    assert not list(logs["crashed"].rglob(".*.prune"))
