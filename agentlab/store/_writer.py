"""The per-process JSONL writer shared by ``ReplaySink`` and ``Tracer``.

One ``_LogWriter`` per (run directory, shard) per process, with one ``_Stream`` per file
(``replay/<dataset>/<shard>.jsonl``, ``trace/<shard>.jsonl``). The hot path is cheap:
``append`` takes one lock, gives the row its ``_seq`` and buffers a shallow copy of it. Serialisation happens at flush time, on the daemon
thread, with one ``orjson.dumps`` per few thousand rows (see :func:`encode_rows`) and one
``O_APPEND`` ``write`` per file and batch. So the event loop never waits on disk, a crash
loses at most the unflushed tail, and lines written earlier are never touched.

Because rows are serialised later, the *top level* of a row is snapshotted at append time
but nested lists and dicts are read at the next flush (at most ``flush_interval`` later):
do not mutate them after appending.

A hot path may buffer a row already encoded (:func:`encode_row`: the bytes between the
braces); :func:`encode_rows` then only adds ``_shard`` and ``_seq``, and writes the same
line the dict would have given.

Fork safety: ``os.register_at_fork`` resets every live writer in the child (new shard name
when the default one was in use, empty buffers, no inherited file descriptors), so a child
never duplicates its parent's pending rows or writes into the parent's shard.
"""

from __future__ import annotations

import atexit
import itertools
import os
import threading
import warnings
import weakref
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from agentlab.errors import StoreError
from agentlab.store.layout import default_shard_name, validate_shard
from agentlab.store.page_cache import CacheRelease

__all__ = [
    "encode_mapping",
    "encode_row",
    "encode_rows",
    "get_writer",
    "last_complete_line",
    "reset_writers",
]

_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
RESERVED = frozenset(("_shard", "_seq"))
#: rows per ``orjson.dumps`` call when encoding a batch (bounds the GIL hold and memory)
_CHUNK = 2048
#: rows per lock hold in ``extend`` (other threads may append in between)
_EXTEND_CHUNK = 8192
_GENERATION = itertools.count(1)


def _default(obj: Any) -> Any:
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    model_dump = getattr(obj, "model_dump", None)
    if callable(model_dump):
        return model_dump(mode="json")
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=str)
    return str(obj)


def _safe_value(v: Any) -> Any:
    try:
        orjson.dumps(v, default=_default, option=_OPTS)
        return v
    except (orjson.JSONEncodeError, TypeError):
        return str(v) if isinstance(v, int) else repr(v)


def _encode_one(row: Mapping[Any, Any], bad: list[str]) -> bytes:
    """``row`` as JSON without its closing brace (``{"a":1`` or ``{`` when empty)."""
    try:
        body = orjson.dumps(row, default=_default, option=_OPTS)
    except (orjson.JSONEncodeError, TypeError) as exc:
        # Never lose a row over one odd value (an int over 64 bits, a cycle...): write the
        # offending values as strings and report it.
        bad.append(str(exc))
        body = orjson.dumps({str(k): _safe_value(v) for k, v in row.items()}, option=_OPTS)
    return body[:-1]


def encode_row(row: Mapping[Any, Any]) -> bytes | Mapping[Any, Any]:
    """``row`` encoded now, for a stream's buffer: the JSON object's body without its
    braces (what :func:`encode_rows` puts between ``_shard`` and ``_seq``), or ``row``
    itself when ``orjson`` cannot encode it as is (the flush's slow path then writes its
    odd values as strings and reports them, as for any row).

    Why a hot path encodes at once: a dict row buffered until the batch's flush is
    walked by the cyclic GC while it waits and freed, cache-cold, after the write; its
    bytes are neither (runtime/README.md, "Rows encoded when built"). The bytes are those
    the flush would have written for the dict.
    """
    try:
        body = orjson.dumps(row, default=_default)
    except (orjson.JSONEncodeError, TypeError):
        return row
    return body[1:-1]


def encode_mapping(row: Mapping[Any, Any]) -> bytes | Mapping[Any, Any]:
    """``row`` encoded now as the flush encodes a mapping among encoded rows (the options
    of :func:`_mixed_bodies` and of the row-by-row path), or ``row`` itself when that
    fails (the flush's slow path then writes it and reports its odd values).

    Why: a span the tracer ends (a batch's or a tick's) lands in the trace shard next to
    the batch's encoded span rows; buffered as a dict it made every flush of the shard a
    mixed chunk, encoded by a Python loop over all its rows (:func:`_mixed_bodies`).
    """
    try:
        return orjson.dumps(row, default=_default, option=_OPTS)[1:-1]
    except (orjson.JSONEncodeError, TypeError):
        return row


def _mixed_bodies(chunk: Sequence[Mapping[Any, Any] | bytes]) -> Sequence[bytes]:
    """The bodies of a chunk of encoded rows and mappings, each mapping encoded as the
    row-by-row path would (``_encode_one``'s options), or ``()`` when one cannot be
    (that path then reports it).

    Why: a flush of the trace shard holds a batch's encoded span rows and the batch's own
    span as a dict; without this, that one dict sent every row of the chunk through the
    row-by-row path (two copies and a format per row).
    """
    out: list[bytes] = []
    for row in chunk:
        body = row if type(row) is bytes else encode_mapping(row)  # type: ignore[arg-type]
        if type(body) is not bytes:
            return ()
        out.append(body)
    return out


def encode_rows(
    rows: Sequence[Mapping[Any, Any] | bytes], first_seq: int, shard: str, bad: list[str]
) -> bytes:
    """Encode buffered rows as JSONL lines ``{"_shard":..,<row>,"_seq":n}``.

    Rows get ``_seq`` = ``first_seq``, ``first_seq + 1``, ... A row is a mapping or, from
    :func:`encode_row`, its body as bytes (used as it is). One ``orjson.dumps`` per chunk
    of mappings saves a call and a short-lived bytes object per row.
    The array ``[{..},{..}]`` is cut at ``},{``: a chunk of ``n`` non-empty rows has exactly
    ``n - 1`` such boundaries, so when the pattern occurs more often (inside a string or a
    nested value) the chunk is encoded row by row instead. Then one ``%`` format adds the
    shard and sequence numbers. Rows that cannot be encoded are appended to ``bad``.
    """
    head = b'{"_shard":' + orjson.dumps(shard)
    line = head + b',%b,"_seq":%d}\n'
    parts: list[bytes] = []
    for i in range(0, len(rows), _CHUNK):
        chunk = rows[i : i + _CHUNK]
        seq0 = first_seq + i
        n = len(chunk)
        kinds = set(map(type, chunk))
        bodies: Sequence[bytes] = ()
        if kinds == {bytes}:  # encoded when built (encode_row)
            bodies = chunk  # type: ignore[assignment]
        elif bytes not in kinds:
            try:
                blob: bytes | None = orjson.dumps(chunk, default=_default)
            except (orjson.JSONEncodeError, TypeError):  # e.g. non-str keys: the slow path
                blob = None
            bodies = blob[2:-2].split(b"},{") if blob is not None else []
        else:  # encoded rows and a few mappings (a batch's span rows and the batch's span)
            bodies = _mixed_bodies(chunk)
        if len(bodies) == n and all(chunk):
            args = tuple(
                itertools.chain.from_iterable(zip(bodies, range(seq0, seq0 + n), strict=True))
            )
            parts.append((line * n) % args)
            continue
        for seq, row in enumerate(chunk, seq0):
            body = b"{" + row if type(row) is bytes else _encode_one(row, bad)  # type: ignore[operator,arg-type]
            if len(body) > 1:
                parts.append(b'%b,%b,"_seq":%d}\n' % (head, body[1:], seq))
            else:
                parts.append(b'%b,"_seq":%d}\n' % (head, seq))
    return b"".join(parts)


def last_complete_line(path: Path, size: int | None = None) -> tuple[int, bytes | None]:
    """``(end, line)``: the offset just past the last ``\\n`` and that line's bytes.

    ``(0, None)`` when the file holds no complete line. Reads backwards in chunks.
    """
    try:
        with open(path, "rb") as f:
            if size is None:
                size = os.fstat(f.fileno()).st_size
            pos, tail, end = size, b"", -1
            while pos > 0:
                step = min(65536, pos)
                pos -= step
                f.seek(pos)
                tail = f.read(step) + tail
                if end < 0:
                    i = tail.rfind(b"\n")
                    if i < 0:
                        continue
                    end = pos + i + 1
                    tail = tail[:i]
                j = tail.rfind(b"\n")
                if j >= 0 or pos == 0:
                    return end, tail[j + 1 :]
            return (end, tail) if end > 0 else (0, None)
    except FileNotFoundError:
        return 0, None


class _Stream:
    """Buffered rows and the next ``_seq`` of one file."""

    __slots__ = ("gen", "relpath", "rows", "seq")

    def __init__(self, relpath: str, seq: int, gen: int) -> None:
        self.relpath = relpath
        self.seq = seq
        self.gen = gen
        self.rows: list[Mapping[str, Any] | bytes] = []  # bytes: a row's encode_row body


class _LogWriter:
    """Buffered appender for every JSONL file one process writes in one run directory."""

    def __init__(
        self,
        run_dir: Path,
        shard: str | None,
        *,
        flush_interval: float = 0.2,
        max_pending: int = 20_000,
        fsync: bool = False,
    ) -> None:
        self.run_dir = run_dir
        self._explicit_shard = validate_shard(shard) if shard else None
        self._base_shard = self._explicit_shard
        self.flush_interval = float(flush_interval)
        self.max_pending = int(max_pending)
        self.fsync = fsync
        self._init_state()
        _LIVE.add(self)

    def _init_state(self) -> None:
        self.pid = os.getpid()
        self.shard = self._explicit_shard or default_shard_name()
        #: changes whenever streams are dropped (fork, reset): holders of a stream re-fetch
        self.gen = next(_GENERATION)
        self._streams: dict[str, _Stream] = {}
        self._pending = 0
        self._fds: dict[str, tuple[int, int]] = {}  # relpath -> (fd, inode)
        #: old pages of a growing file released from the page cache (``page_cache.py``)
        self._cache = CacheRelease()
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._error: BaseException | None = None
        self._bad: list[str] = []
        #: relpath -> commit mark (``offsets.Mark``) of the file as this writer left it,
        #: once ``offsets.log_marks`` read it (:meth:`seed_mark`), extended by every write
        self._marks: dict[str, dict[str, int]] = {}

    # --- appending -------------------------------------------------------------------

    def stream(self, relpath: str) -> _Stream:
        """The stream of one file (created on first use; a reused file continues its seq)."""
        s = self._streams.get(relpath)
        if s is not None and s.gen == self.gen:
            return s
        seq = self._recover_seq(relpath)  # disk IO: once per file, outside the lock
        with self._lock:
            s = self._streams.get(relpath)
            if s is None:
                s = self._streams[relpath] = _Stream(relpath, seq, self.gen)
        if self._thread is None:
            self._start_thread()
        return s

    def append(self, stream: _Stream, row: Mapping[str, Any]) -> int:
        """Buffer a copy of one row (without reserved keys) on ``stream``; returns its ``_seq``."""
        copy = row.copy() if type(row) is dict else dict(row)
        with self._lock:
            seq = stream.seq
            stream.seq = seq + 1
            stream.rows.append(copy)
            self._pending += 1
            n = self._pending
        if n >= self.max_pending or self._thread is None:  # no thread: after close()
            self._backlog(n)
        return seq

    def extend(
        self, stream: _Stream, rows: Sequence[Mapping[str, Any] | bytes], *, copy: bool = True
    ) -> int:
        """Buffer copies of many rows on ``stream``; returns the last ``_seq``.

        ``copy=False``: the rows are dicts the caller built for this and never touches
        again (a batch's buffered rows), or bodies from :func:`encode_row`; they are
        buffered as they are.
        """
        for i in range(0, len(rows), _EXTEND_CHUNK):
            chunk = rows[i : i + _EXTEND_CHUNK]
            copies: list[Mapping[str, Any] | bytes]
            if not copy:
                copies = chunk if type(chunk) is list else list(chunk)
            else:
                try:
                    copies = list(map(dict.copy, chunk))  # type: ignore[arg-type]
                except TypeError:  # some rows are other Mappings
                    copies = [dict(r) for r in chunk]  # type: ignore[arg-type]
            with self._lock:
                stream.rows += copies
                stream.seq += len(copies)
                self._pending += len(copies)
                n = self._pending
            if n >= self.max_pending or self._thread is None:
                self._backlog(n)
        return stream.seq - 1

    def add(self, relpath: str, row: Mapping[str, Any]) -> int:
        """``append`` by file path (for infrequent writers such as the tracer)."""
        return self.append(self.stream(relpath), row)

    def _backlog(self, n: int) -> None:
        if self._thread is None:
            self._start_thread()
        self._wake.set()
        if n >= 8 * self.max_pending:
            # Backpressure: the disk thread fell far behind; write on this thread.
            self.flush()

    def _recover_seq(self, relpath: str) -> int:
        # A reused shard name (explicit shard, resume) continues its sequence.
        _, line = last_complete_line(self.run_dir / relpath)
        if not line:
            return 0
        try:
            return int(orjson.loads(line)["_seq"]) + 1
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return 0

    def _start_thread(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._stop = False
            t = threading.Thread(target=self._loop, name=f"agentlab-log-{self.shard}", daemon=True)
            self._thread = t
        t.start()

    def _loop(self) -> None:
        while not self._stop:
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            try:
                self.flush()
            except Exception as exc:  # reported by the next flush()/close() on a user thread
                self._error = exc

    # --- writing ---------------------------------------------------------------------

    def flush(self) -> None:
        """Encode and write every buffered row (whole lines, one ``write`` per file)."""
        if os.getpid() != self.pid:
            self._after_fork()
            return
        with self._io_lock:
            with self._lock:
                batches = [
                    (s.relpath, s.rows, s.seq - len(s.rows))
                    for s in self._streams.values()
                    if s.rows
                ]
                for s in self._streams.values():
                    if s.rows:
                        s.rows = []
                self._pending = 0
            bad: list[str] = []
            for relpath, rows, first in batches:
                self._write(relpath, encode_rows(rows, first, self.shard, bad), len(rows))
            if bad:
                warnings.warn(
                    f"agentlab: {len(bad)} row(s) in {self.run_dir} had values JSON cannot "
                    f"hold; they were written as strings (first: {bad[0]})",
                    stacklevel=2,
                )
        err, self._error = self._error, None
        if err is not None:
            raise StoreError(f"writing the run log in {self.run_dir} failed: {err}") from err

    def _write(self, relpath: str, data: bytes, lines: int) -> None:
        """Append ``data`` (``lines`` whole JSONL lines) to ``relpath``."""
        fd = self._fd(relpath)
        view = memoryview(data)
        while view:  # regular files take it in one call; loop for signals / huge batches
            n = os.write(fd, view)
            view = view[n:]
        if self.fsync:
            os.fsync(fd)
        self._cache.after_write(relpath, fd)
        mark = self._marks.get(relpath)
        if mark is not None and data:
            # The bytes just written, while in cache: the commit then need not read the
            # file back to count its lines (a pass per byte) and CRC them.
            mark["bytes"] += len(data)
            mark["lines"] += lines  # a row is one line (JSON escapes every newline)
            mark["crc"] = zlib.crc32(data, mark["crc"])
            last = data.rfind(b"\n", 0, len(data) - 1) + 1  # where the last line starts
            mark["tail"] = zlib.crc32(memoryview(data)[last:])

    def mark_of(self, relpath: str, size: int) -> dict[str, int] | None:
        """The commit mark of ``relpath`` (see ``store/offsets.py``) if this writer knows it
        at ``size`` bytes (everything appended since it was seeded was its own), else
        ``None``. Call after :meth:`flush`."""
        with self._io_lock:
            mark = self._marks.get(relpath)
            return dict(mark) if mark is not None and mark["bytes"] == size else None

    def seed_mark(self, relpath: str, mark: Mapping[str, int]) -> None:
        """Start extending ``mark`` (read from the file by ``offsets.log_marks``) with this
        writer's writes, if it appends to ``relpath`` and the file still has the size the
        mark covers."""
        with self._io_lock:
            entry = self._fds.get(relpath)
            if entry is None:
                return
            fd, ino = entry
            try:
                st = os.fstat(fd)
                same = os.stat(self.run_dir / relpath).st_ino == ino == st.st_ino
            except FileNotFoundError:
                same = False
            if same and st.st_size == mark["bytes"]:
                self._marks[relpath] = dict(mark)
            else:
                self._marks.pop(relpath, None)

    def _fd(self, relpath: str) -> int:
        path = self.run_dir / relpath
        entry = self._fds.get(relpath)
        if entry is not None:
            fd, ino = entry
            try:  # the file may have been deleted or replaced by truncate_log
                if os.stat(path).st_ino == ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)
        self._marks.pop(relpath, None)  # another file now, or one changed behind our back
        self._cache.forget(relpath)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        st = os.fstat(fd)
        if not st.st_size:
            # Empty: every byte it will hold is this writer's, so its commit mark is known
            # from the start and extended by each write. Otherwise the run's first commit
            # (``offsets.log_marks``) read back everything written since the run began:
            # at 1M agents, its creation and first tick, ~2 GB, much of it already
            # released from the page cache (``page_cache.py``).
            self._marks[relpath] = {"bytes": 0, "lines": 0, "crc": 0, "tail": 0}
        else:
            end, _ = last_complete_line(path, st.st_size)
            if end != st.st_size:  # torn tail from a crashed earlier writer of this shard
                os.ftruncate(fd, end)
                warnings.warn(
                    f"{path}: dropped a torn last line ({st.st_size - end} bytes) before appending",
                    stacklevel=2,
                )
        self._fds[relpath] = (fd, st.st_ino)
        return fd

    def close(self) -> None:
        """Flush, stop the thread, close files. The writer reopens lazily if used again."""
        try:
            self.flush()
        finally:
            self._stop = True
            self._wake.set()
            t, self._thread = self._thread, None
            if t is not None and t is not threading.current_thread():
                t.join(timeout=5)
            with self._io_lock:
                for fd, _ in self._fds.values():
                    os.close(fd)
                self._fds.clear()
                self._cache.forget()
                self._marks.clear()  # others may append while it is closed

    def reset(self) -> None:
        """Drop unflushed rows, forget sequence numbers and file handles (after truncation)."""
        with self._io_lock, self._lock:
            self._streams = {}
            self._pending = 0
            self.gen = next(_GENERATION)
            for fd, _ in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._cache.forget()
            self._marks.clear()

    def _after_fork(self) -> None:
        fds = [fd for fd, _ in self._fds.values()]
        if self._base_shard:  # an explicit shard name must not be shared with the parent
            self._explicit_shard = f"{self._base_shard}-{os.getpid()}"
        self._init_state()  # new locks: the parent's may have been held at fork time
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


_LIVE: weakref.WeakSet[_LogWriter] = weakref.WeakSet()
_WRITERS: dict[tuple[str, str | None], _LogWriter] = {}
_REG_LOCK = threading.Lock()


def get_writer(
    run_dir: str | os.PathLike[str], shard: str | None = None, **settings: Any
) -> _LogWriter:
    """The process-wide writer for ``(run_dir, shard)``; ``settings`` apply on creation."""
    root = Path(run_dir).resolve()
    key = (str(root), shard)
    with _REG_LOCK:
        w = _WRITERS.get(key)
        if w is None or w.pid != os.getpid():
            w = _WRITERS[key] = _LogWriter(root, shard, **settings)
        return w


def writers_for(run_dir: str | os.PathLike[str]) -> list[_LogWriter]:
    """Every live writer of this process that writes into ``run_dir``."""
    root = Path(run_dir).resolve()
    return [w for w in list(_LIVE) if w.run_dir == root and w.pid == os.getpid()]


def reset_writers() -> None:
    """Forget the registry (tests; also used in a forked child)."""
    _WRITERS.clear()


def _in_child() -> None:
    global _REG_LOCK
    _REG_LOCK = threading.Lock()
    _WRITERS.clear()
    for w in list(_LIVE):
        w._after_fork()


def _flush_all_at_exit() -> None:
    for w in list(_LIVE):
        if w.pid != os.getpid():
            continue
        try:
            w.close()
        except Exception as exc:
            warnings.warn(f"agentlab: could not flush the run log at exit: {exc}", stacklevel=1)


os.register_at_fork(after_in_child=_in_child)
atexit.register(_flush_all_at_exit)
