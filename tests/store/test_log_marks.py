"""``log_marks``: the incremental line count and last-line CRC equal a line-by-line scan."""

from __future__ import annotations

import io
import random
import zlib
from pathlib import Path

import pytest

from agentlab.store import offsets
from agentlab.store.offsets import log_marks


def _by_lines(data: bytes, start: int) -> tuple[int, int, int]:
    """(lines, crc of all bytes, crc of the last complete line) of ``data[:start]`` onward,
    one line at a time (what a mark means)."""
    lines, tail = 0, 0
    for line in io.BytesIO(data[start:]):
        if line.endswith(b"\n"):
            lines += 1
            tail = zlib.crc32(line)
    return lines, zlib.crc32(data), tail


@pytest.mark.parametrize("chunk", [1, 2, 5, 64, 1 << 22])
def test_extended_marks_equal_a_line_by_line_scan(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(offsets, "_CHUNK", chunk)  # lines spanning chunk boundaries
    rnd = random.Random(chunk)
    pieces = [b"\n", b"ab", b"x\n", b'{"row":1}\n', b"zz"]
    for _ in range(200):
        data = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 40)))
        cut = data.rfind(b"\n", 0, rnd.randint(0, len(data))) + 1  # a committed boundary
        lines0, _, tail0 = _by_lines(data[:cut], 0)
        old = {"bytes": cut, "lines": lines0, "crc": zlib.crc32(data[:cut]), "tail": tail0}
        got = offsets._extend_mark(io.BytesIO(data), old, len(data))
        more, crc, tail = _by_lines(data, cut)
        assert got == {"bytes": len(data), "lines": lines0 + more, "crc": crc,
                       "tail": tail if more else tail0}  # fmt: skip


def test_log_marks_of_a_growing_shard(tmp_path: Path) -> None:
    shard = tmp_path / "replay" / "rows" / "s.jsonl"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b'{"a":1}\n{"a":2}\n')
    first = log_marks(tmp_path)
    with open(shard, "ab") as f:
        f.write(b'{"a":3}\n{"a":4}\n')
    again = log_marks(tmp_path, first)
    full = log_marks(tmp_path)
    assert again == full
    mark = full["replay/rows/s.jsonl"]
    assert mark["lines"] == 4 and mark["tail"] == zlib.crc32(b'{"a":4}\n')


def _read_marks(run: Path) -> dict[str, dict[str, int]]:
    """Marks from the files' bytes alone, line by line (no writer's own marks)."""
    out = {}
    for p in sorted(run.rglob("*.jsonl")):
        data = p.read_bytes()
        lines, crc, tail = _by_lines(data, 0)
        out[p.relative_to(run).as_posix()] = {"bytes": len(data), "lines": lines, "crc": crc,
                                              "tail": tail}  # fmt: skip
    return out


def test_marks_kept_by_the_writer_equal_marks_read_from_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentlab.store.replay import get_replay_sink

    sink = get_replay_sink(tmp_path, shard="w")
    sink.append("rows", {"a": 1, "text": "line\nbreak"})  # an escaped newline: one line
    sink.flush()

    def no_reading(*args: object) -> None:
        raise AssertionError("the shard was read back although its writer kept its mark")

    with monkeypatch.context() as m:  # a file the writer created: known from its first byte
        m.setattr(offsets, "_extend_mark", no_reading)
        marks = log_marks(tmp_path)
    assert marks == _read_marks(tmp_path)

    for n in range(3):
        sink.extend("rows", [{"a": i, "b": "x" * i} for i in range(n + 1)])
        sink.flush()
        with monkeypatch.context() as m:
            m.setattr(offsets, "_extend_mark", no_reading)
            marks = log_marks(tmp_path, marks)
        assert marks == _read_marks(tmp_path)

    # another process appends: the size is not the writer's, the file is read again
    shard = tmp_path / "replay" / "rows" / "w.jsonl"
    with open(shard, "ab") as f:
        f.write(b'{"a":"foreign"}\n')
    marks = log_marks(tmp_path, marks)
    assert marks == _read_marks(tmp_path)
    sink.append("rows", {"a": 9})
    sink.flush()
    assert log_marks(tmp_path, marks) == _read_marks(tmp_path)
    sink.close()


def test_a_shard_the_writer_did_not_start_is_read_at_the_first_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentlab.store.replay import get_replay_sink

    shard = tmp_path / "replay" / "rows" / "w2.jsonl"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b'{"a":"earlier","_shard":"w2","_seq":0}\n')  # a resumed shard
    sink = get_replay_sink(tmp_path, shard="w2")
    sink.append("rows", {"a": 1})
    sink.flush()
    read: list[int] = []
    real = offsets._extend_mark
    monkeypatch.setattr(offsets, "_extend_mark", lambda *a: read.append(1) or real(*a))
    assert log_marks(tmp_path) == _read_marks(tmp_path)
    assert read == [1]
    sink.close()
