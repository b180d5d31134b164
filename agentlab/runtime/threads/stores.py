"""Stores for suspendable agent threads: thread bytes plus a delivery queue.

A :class:`ThreadStore` is an :class:`~agentlab.store.agent_store.AgentStore` (bytes per
``(thread id, key)``; the thread runtime uses the keys ``state`` and ``history``) that also
holds the threads' input queue, so that persisting a slice and acknowledging the deliveries
it consumed is one atomic :meth:`ThreadStore.commit`. Two implementations:

- :class:`MemoryThreadStore` — dicts of bytes; histories of cold threads are
  zlib-compressed (``compress_cold``; automatic past ``hot_limit`` recently written threads).
- :class:`SQLiteThreadStore` — one SQLite file in WAL mode; survives ``kill -9``; an idle
  thread costs no memory at all.

Queue rows carry a partition number (``crc32(thread_id) % PARTS``) so several step-mode
workers can split threads between them (``claim(partition=k, partitions=n)``) while each
thread's deliveries stay in order inside one worker.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from agentlab.errors import ConfigError, StoreError
from agentlab.runtime.threads.codec import compress_history, is_compressed
from agentlab.store.agent_store import AgentStore, validate_key

__all__ = [
    "PARTS",
    "MemoryThreadStore",
    "SQLiteThreadStore",
    "ThreadStore",
    "commit_frames",
    "partition_of",
]

SCHEMA_VERSION = 1
#: number of fixed queue partitions; workers take ``part % partitions == partition``
PARTS = 4096
HISTORY_KEY = "history"


def partition_of(thread_id: str) -> int:
    """The fixed queue partition of ``thread_id`` (stable across processes)."""
    return zlib.crc32(thread_id.encode()) % PARTS


def _check_partition(partition: int, partitions: int) -> None:
    if partitions < 1 or not 0 <= partition < partitions:
        raise ConfigError(
            f"invalid partition {partition} of {partitions}; need 0 <= partition < partitions"
        )


@runtime_checkable
class ThreadStore(AgentStore, Protocol):
    """An agent store that also keeps the threads' delivery queue."""

    def enqueue(self, thread_id: str, body: bytes) -> int:
        """Append one encoded delivery; returns its queue sequence number."""
        ...

    def claim(
        self, partition: int = 0, partitions: int = 1, limit: int = 1000
    ) -> list[tuple[int, str, bytes]]:
        """Oldest queued ``(seq, thread_id, body)`` rows of one partition (not removed)."""
        ...

    def ack(self, seqs: Iterable[int]) -> None:
        """Remove consumed deliveries from the queue."""
        ...

    def commit(self, agent_id: str, items: Mapping[str, bytes], ack: Iterable[int] = ()) -> None:
        """Atomically write ``items`` for ``agent_id`` and acknowledge ``ack``."""
        ...

    def queued(self) -> int:
        """Number of deliveries still queued."""
        ...


class MemoryThreadStore:
    """In-process thread store; see the module docstring.

    Args:
        hot_limit: keep at most this many recently written histories uncompressed; past
            it, the older half is compressed. ``None`` compresses only on
            :meth:`compress_cold`.
    """

    def __init__(self, *, hot_limit: int | None = 65536) -> None:
        if hot_limit is not None and hot_limit < 1:
            raise ConfigError(f"hot_limit must be >= 1 or None, got {hot_limit!r}")
        self.hot_limit = hot_limit
        self._data: dict[str, dict[str, bytes | bytearray]] = {}
        self._hot: dict[str, None] = {}  # insertion order = least recently written first
        self._queue: dict[int, tuple[str, bytes]] = {}
        self._seq = 0
        self._cold_listeners: list[Callable[[list[str]], None]] = []

    # --- AgentStore ---------------------------------------------------------------------
    def read(self, agent_id: str, key: str) -> bytes | None:
        d = self._data.get(agent_id)
        v = None if d is None else d.get(key)
        # a snapshot: a hot history's buffer grows in place (commit_append)
        return bytes(v) if isinstance(v, bytearray) else v

    def read_history(self, agent_id: str) -> bytes | bytearray | None:
        """The thread's history as held, not copied: a hot one may be a ``bytearray`` that
        the thread's next :meth:`commit_append` extends in place."""
        d = self._data.get(agent_id)
        return None if d is None else d.get(HISTORY_KEY)

    def write_many(self, agent_id: str, items: Mapping[str, bytes]) -> None:
        d = self._data.get(agent_id)
        if d is None:
            d = self._data[agent_id] = {}
        for k, v in items.items():
            d[validate_key(k) if k not in d else k] = v
        if HISTORY_KEY in items and not is_compressed(items[HISTORY_KEY]):
            self._hot.pop(agent_id, None)
            self._hot[agent_id] = None
            if self.hot_limit is not None and len(self._hot) > self.hot_limit:
                self.compress_cold(keep_hot=self.hot_limit // 2)

    def delete(self, agent_id: str) -> None:
        self._data.pop(agent_id, None)
        self._hot.pop(agent_id, None)

    def agents(self) -> list[str]:
        return sorted(self._data)

    def keys(self, agent_id: str) -> list[str]:
        return sorted(self._data.get(agent_id, ()))

    # --- queue ----------------------------------------------------------------------------
    def enqueue(self, thread_id: str, body: bytes) -> int:
        self._seq += 1
        self._queue[self._seq] = (thread_id, body)
        return self._seq

    def claim(
        self, partition: int = 0, partitions: int = 1, limit: int = 1000
    ) -> list[tuple[int, str, bytes]]:
        _check_partition(partition, partitions)
        out: list[tuple[int, str, bytes]] = []
        for seq, (tid, body) in self._queue.items():
            if partitions == 1 or partition_of(tid) % partitions == partition:
                out.append((seq, tid, body))
                if len(out) >= limit:
                    break
        return out

    def ack(self, seqs: Iterable[int]) -> None:
        for s in seqs:
            self._queue.pop(s, None)

    def commit(self, agent_id: str, items: Mapping[str, bytes], ack: Iterable[int] = ()) -> None:
        self.write_many(agent_id, items)
        self.ack(ack)

    def queued(self) -> int:
        return len(self._queue)

    def commit_append(
        self,
        agent_id: str,
        state: bytes,
        base: bytes | bytearray,
        raw: bytes | bytearray,
        frames: bytes,
        ack: Iterable[int] = (),
    ) -> bytearray | None:
        """:meth:`commit` of ``state`` and the history ``raw + frames``, where ``raw`` is
        the raw form of ``base``, the history held for the thread (:meth:`read_history`).
        The frames are appended to the held buffer in place: a slice's commit no longer
        copies the whole history (~35k instructions per completion at 20 turns); the
        buffer's slack is freed when the history is compressed. Returns the buffer, or
        ``None`` (nothing written) if the store no longer holds ``base``."""
        d = self._data.get(agent_id)
        if d is None or d.get(HISTORY_KEY) is not base or "state" not in d:
            return None
        buf = base if type(base) is bytearray else bytearray(raw)
        buf += frames
        d["state"] = state
        d[HISTORY_KEY] = buf
        hot = self._hot
        hot.pop(agent_id, None)
        hot[agent_id] = None
        if self.hot_limit is not None and len(hot) > self.hot_limit:
            self.compress_cold(keep_hot=self.hot_limit // 2)
        self.ack(ack)
        return buf

    # --- memory -----------------------------------------------------------------------------
    def compress_cold(self, keep_hot: int = 0) -> int:
        """Compress all but the ``keep_hot`` most recently written histories.

        Returns:
            The number of histories compressed.
        """
        n = 0
        # One snapshot of the oldest ids: ``next(iter(dict))`` after deleting from the front
        # rescans the deleted slots each time (quadratic over a 20,000-thread wave).
        cold = list(self._hot)[: max(0, len(self._hot) - keep_hot)]
        if cold:
            # first: what the listeners drop (decoded forms) frees room the compressed
            # histories then take, instead of leaving holes below them
            for listener in self._cold_listeners:
                listener(cold)
        for tid in cold:
            del self._hot[tid]
            d = self._data.get(tid)
            if d is not None and HISTORY_KEY in d:
                d[HISTORY_KEY] = compress_history(d[HISTORY_KEY])
                n += 1
        return n

    def add_cold_listener(self, listener: Callable[[list[str]], None]) -> None:
        """Call ``listener(thread_ids)`` with the threads whose histories each compression
        made cold (an ``AgentSystem`` drops their decoded form then)."""
        self._cold_listeners.append(listener)

    def stored_bytes(self) -> int:
        """Total payload bytes held (histories in their current hot/cold form)."""
        return sum(len(v) for d in self._data.values() for v in d.values())


def commit_frames(
    store: ThreadStore,
    tid: str,
    state: bytes,
    base: bytes | bytearray | None,
    raw: bytes | bytearray,
    frames: bytes,
    seq: int,
) -> bytes | bytearray:
    """Commit a slice: ``state``, the history ``raw + frames`` and the ack of ``seq``.
    ``base``: the history object the slice read (``None``: replace it, e.g. compacted);
    a store with ``commit_append`` extends it in place. Returns the history committed."""
    append = getattr(store, "commit_append", None)
    if append is not None and base is not None:
        out: bytearray | None = append(tid, state, base, raw, frames, (seq,))
        if out is not None:
            return out
    blob = b"".join((raw, frames))
    store.commit(tid, {"state": state, "history": blob}, (seq,))
    return blob


class SQLiteThreadStore:
    """Durable single-file thread store (SQLite, WAL); see the module docstring.

    Args:
        path: the database file (created with its parent directory).
        synchronous: SQLite ``synchronous`` pragma. ``"NORMAL"`` (default) survives
            process crashes such as ``kill -9``; ``"FULL"`` also survives power loss.
    """

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "NORMAL") -> None:
        if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ConfigError(
                f"unknown synchronous mode {synchronous!r}; valid: OFF, NORMAL, FULL, EXTRA"
            )
        self.path = Path(path)
        self.synchronous = synchronous.upper()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={self.synchronous}")
            self._db.executescript(
                """
                CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT);
                CREATE TABLE IF NOT EXISTS kv (agent_id TEXT, key TEXT, value BLOB,
                    PRIMARY KEY (agent_id, key)) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS queue (seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    thread_id TEXT NOT NULL, part INTEGER NOT NULL, body BLOB NOT NULL);
                """
            )
            self._db.execute(
                "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open thread store {self.path}: {exc}") from exc

    def __reduce__(self) -> tuple[type, tuple[str], dict[str, str]]:
        # Ray/step-mode workers reopen the same file rather than pickling a connection.
        return (SQLiteThreadStore, (str(self.path),), {"synchronous": self.synchronous})

    def __setstate__(self, state: dict[str, str]) -> None:
        if state.get("synchronous", "NORMAL") != self.synchronous:
            self.synchronous = state["synchronous"]
            self._db.execute(f"PRAGMA synchronous={self.synchronous}")

    def close(self) -> None:
        """Close the connection (the file stays)."""
        self._db.close()

    # --- AgentStore ---------------------------------------------------------------------
    def read(self, agent_id: str, key: str) -> bytes | None:
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM kv WHERE agent_id=? AND key=?", (agent_id, key)
            ).fetchone()
        return None if row is None else bytes(row[0])

    def write_many(self, agent_id: str, items: Mapping[str, bytes]) -> None:
        self.commit(agent_id, items)

    def delete(self, agent_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM kv WHERE agent_id=?", (agent_id,))

    def agents(self) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT DISTINCT agent_id FROM kv ORDER BY 1").fetchall()
        return [r[0] for r in rows]

    def keys(self, agent_id: str) -> list[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT key FROM kv WHERE agent_id=? ORDER BY 1", (agent_id,)
            ).fetchall()
        return [r[0] for r in rows]

    # --- queue ----------------------------------------------------------------------------
    def enqueue(self, thread_id: str, body: bytes) -> int:
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO queue (thread_id, part, body) VALUES (?, ?, ?)",
                (thread_id, partition_of(thread_id), body),
            )
        return int(cur.lastrowid or 0)

    def claim(
        self, partition: int = 0, partitions: int = 1, limit: int = 1000
    ) -> list[tuple[int, str, bytes]]:
        _check_partition(partition, partitions)
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, thread_id, body FROM queue WHERE part % ? = ? ORDER BY seq LIMIT ?",
                (partitions, partition, limit),
            ).fetchall()
        return [(int(s), str(t), bytes(b)) for s, t, b in rows]

    def ack(self, seqs: Iterable[int]) -> None:
        with self._lock:
            self._db.executemany("DELETE FROM queue WHERE seq=?", [(s,) for s in seqs])

    def commit(self, agent_id: str, items: Mapping[str, bytes], ack: Iterable[int] = ()) -> None:
        rows = [(agent_id, validate_key(k), v) for k, v in items.items()]
        acks = [(s,) for s in ack]
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?, ?)", rows)
                if acks:
                    self._db.executemany("DELETE FROM queue WHERE seq=?", acks)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def queued(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM queue").fetchone()[0])

    def compress_cold(self, keep_hot: int = 0) -> int:
        """No-op (histories live on disk, not in memory); kept for protocol symmetry."""
        return 0
