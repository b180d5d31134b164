"""The log writer releases a growing file's old pages from the page cache (``page_cache.py``).

Checked two ways: the advice given (ranges, on the real ``os.posix_fadvise``, recorded on
the way through), and what the kernel then holds (``mincore`` over a mapping of the file).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import mmap
import os
import sys
from pathlib import Path

import orjson
import pytest

from agentlab.store import _writer, page_cache

pytestmark = pytest.mark.skipif(
    not hasattr(os, "posix_fadvise") or not sys.platform.startswith("linux"),
    reason="posix_fadvise / mincore: Linux only (elsewhere the writer gives no advice)",
)

_KEEP = 64 * 1024
_ROW = {"text": "x" * 1000}  # ~1 KB a line


def _write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kb: int, fsync: bool) -> Path:
    monkeypatch.setattr(page_cache, "KEEP_CACHED", _KEEP)
    w = _writer._LogWriter(tmp_path, "s1", fsync=fsync)
    try:
        stream = w.stream("replay/t/s1.jsonl")
        for _ in range(kb // 16):  # one write of 16 rows per flush
            w.extend(stream, [_ROW] * 16)
            w.flush()
    finally:
        w.close()
    return tmp_path / "replay/t/s1.jsonl"


def test_advice_covers_each_range_twice_and_never_the_newest_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int]] = []
    real = os.posix_fadvise

    def recording(fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == os.POSIX_FADV_DONTNEED
        calls.append((offset, offset + length))
        real(fd, offset, length, advice)

    monkeypatch.setattr(page_cache, "_FADVISE", recording)
    path = _write(tmp_path, monkeypatch, kb=1024, fsync=False)
    size = path.stat().st_size
    assert len(path.read_bytes().splitlines()) == 1024 // 16 * 16  # every row written
    assert len(calls) >= 5
    # call k advises from where call k-2 ended to its own end: each range twice (the
    # first starts its write-back, the second drops it), and at least _KEEP apart
    assert calls[0][0] == calls[1][0] == 0
    assert all(calls[k][0] == calls[k - 2][1] for k in range(2, len(calls)))
    assert all(b[1] - a[1] >= _KEEP for a, b in itertools.pairwise(calls))
    assert calls[-1][1] <= size - _KEEP  # the newest _KEEP bytes stay cached


def test_a_small_file_is_never_advised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(page_cache, "_FADVISE", lambda *a: calls.append(1))
    _write(tmp_path, monkeypatch, kb=_KEEP // 1024 * 2 - 32, fsync=False)  # < 2 windows
    assert calls == []


def test_keep_in_the_environment_turns_it_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(page_cache, "_FADVISE", lambda *a: calls.append(1))
    monkeypatch.setenv("AGENTLAB_LOG_CACHE", "keep")
    _write(tmp_path, monkeypatch, kb=1024, fsync=False)
    assert calls == []


def test_a_refused_advice_never_fails_a_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def refusing(*args: object) -> None:
        calls.append(1)
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(page_cache, "_FADVISE", refusing)
    path = _write(tmp_path, monkeypatch, kb=1024, fsync=False)
    assert len(path.read_bytes().splitlines()) == 1024  # every row written
    assert calls == [1]  # asked once, then no more


def _resident_pages(path: Path) -> list[bool]:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    with path.open("rb") as f:
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)  # maps, reads nothing
        try:
            addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
            vec = (ctypes.c_ubyte * pages)()
            rc = libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec)
            assert rc == 0, os.strerror(ctypes.get_errno())
            return [bool(v & 1) for v in vec]
        finally:
            del addr
            mm.close()


def test_the_kernel_drops_the_old_pages_and_keeps_the_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = tmp_path / "probe"
    probe.write_bytes(b"x" * (1 << 20))
    with probe.open("rb+") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    if sum(_resident_pages(probe)) > 16:
        pytest.skip(f"{tmp_path}'s file system keeps clean pages it is advised to drop (tmpfs)")
    # fsync=True: every page is clean once written, so the first advice already drops it
    path = _write(tmp_path, monkeypatch, kb=2048, fsync=True)
    resident = _resident_pages(path)
    keep_pages = _KEEP // mmap.PAGESIZE
    old, new = resident[: len(resident) // 2], resident[-keep_pages:]
    assert sum(old) <= len(old) // 10, f"{sum(old)} of the first {len(old)} pages still cached"
    assert sum(new) >= len(new) * 9 // 10, f"only {sum(new)} of the last {len(new)} cached"
    # and the file reads back whole
    assert all(orjson.loads(x) == {**_ROW, "_shard": "s1", "_seq": i}
               for i, x in enumerate(path.read_bytes().splitlines()))  # fmt: skip
