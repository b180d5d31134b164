"""The per-process JSONL writer shared by ``ReplaySink`` and ``Tracer``.

One ``_LogWriter`` per (run directory, shard) per process. Callers encode rows on their own
thread (cheap, and it snapshots mutable rows) and append the bytes to an in-memory buffer;
a daemon thread writes each file's buffered lines with one ``O_APPEND`` ``write`` per batch.
So the event loop never waits on disk, a crash loses at most the unflushed tail, and lines
written earlier are never touched.

Fork safety: ``os.register_at_fork`` resets every live writer in the child (new shard name
when the default one was in use, empty buffers, no inherited file descriptors), so a child
never duplicates its parent's pending rows or writes into the parent's shard.
"""

from __future__ import annotations

import atexit
import os
import threading
import warnings
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from agentlab.errors import StoreError
from agentlab.store.layout import default_shard_name, validate_shard

__all__ = ["encode_row", "get_writer", "last_complete_line", "reset_writers"]

_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
_RESERVED = ("_shard", "_seq")


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


def encode_row(row: dict[str, Any]) -> bytes:
    """JSON-encode ``row`` without the reserved ``_shard``/``_seq`` keys (closing brace cut)."""
    if "_seq" in row or "_shard" in row:
        row = {k: v for k, v in row.items() if k not in _RESERVED}
    body = orjson.dumps(row, default=_default, option=_OPTS)
    # The writer splices ``"_shard":..,"_seq":N}`` onto this, so no dict copy is needed.
    return body[:-1] + b"," if len(body) > 2 else b"{"


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
        self._suffix = b'"_shard":' + orjson.dumps(self.shard) + b',"_seq":'
        self._buf: dict[str, list[bytes]] = {}
        self._pending = 0
        self._seq: dict[str, int] = {}
        self._fds: dict[str, tuple[int, int]] = {}  # relpath -> (fd, inode)
        self._buf_lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._error: BaseException | None = None

    # --- appending -------------------------------------------------------------------

    def add(self, relpath: str, encoded: Iterable[bytes]) -> int:
        """Append pre-encoded rows (from :func:`encode_row`); returns the last ``_seq``."""
        with self._buf_lock:
            seq = self._seq.get(relpath)
            if seq is None:
                seq = self._recover_seq(relpath)
            lines = self._buf.get(relpath)
            if lines is None:
                lines = self._buf[relpath] = []
            suffix, n = self._suffix, 0
            for body in encoded:
                lines.append(b"%s%s%d}\n" % (body, suffix, seq))
                seq += 1
                n += 1
            self._seq[relpath] = seq
            self._pending += n
            pending = self._pending
            if self._thread is None:
                self._start_thread()
        if pending >= self.max_pending:
            self._wake.set()
            if pending >= 8 * self.max_pending:
                # Backpressure: the disk thread fell far behind; write on this thread.
                self.flush()
        return seq - 1

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
        """Write every buffered line (whole lines, one ``write`` per file)."""
        if os.getpid() != self.pid:
            self._after_fork()
            return
        with self._io_lock:
            with self._buf_lock:
                buf, self._buf, self._pending = self._buf, {}, 0
            for relpath, lines in buf.items():
                if lines:
                    self._write(relpath, b"".join(lines))
        err, self._error = self._error, None
        if err is not None:
            raise StoreError(f"writing the run log in {self.run_dir} failed: {err}") from err

    def _write(self, relpath: str, data: bytes) -> None:
        fd = self._fd(relpath)
        view = memoryview(data)
        while view:  # regular files take it in one call; loop for signals / huge batches
            n = os.write(fd, view)
            view = view[n:]
        if self.fsync:
            os.fsync(fd)

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
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        st = os.fstat(fd)
        if st.st_size:
            end, _ = last_complete_line(path, st.st_size)
            if end != st.st_size:  # torn tail from a crashed earlier writer of this shard
                os.ftruncate(fd, end)
                warnings.warn(
                    f"{path}: dropped a torn last line ({st.st_size - end} bytes) before "
                    "appending",
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

    def reset(self) -> None:
        """Drop unflushed rows, forget sequence numbers and file handles (after truncation)."""
        with self._io_lock, self._buf_lock:
            self._buf, self._pending = {}, 0
            self._seq.clear()
            for fd, _ in self._fds.values():
                os.close(fd)
            self._fds.clear()

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


def get_writer(run_dir: str | os.PathLike[str], shard: str | None = None, **settings: Any) -> _LogWriter:
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
