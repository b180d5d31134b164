"""``PackedStore``: every agent of a run in one SQLite file, rows keyed ``(agent, key)``.

The directory store spends a directory, 3+ files and 6 inodes per agent (26 KB on disk for
~341 B of state) and a kernel ``mkdir`` per create. Here an agent's keys are rows of one
``WITHOUT ROWID`` table clustered by ``(agent_id, key)``, so the agents of a batch (ids
created in order) sit in neighbouring pages of one file: one segment per batch in
practice, with no per-agent file-system objects at all.

Crash discipline: every ``write_many`` is one SQLite transaction (WAL journal,
``synchronous=NORMAL``: durable against a process kill; ``"FULL"`` for power loss), so a
kill -9 leaves each agent's keys as before or after the call, never torn. The agent layer's
two state slots (``state/state.0.json`` / ``.1.json``, see ``agents/workspace.py``) do the
rest exactly as on the directory store: a tick writes the slot *not* holding the committed
version, so a crash between agent writes and the society's commit restores tick ``C``.

The readable per-agent view stays: :func:`export_dirs` writes a packed run's agents as the
directory layout (``<out>/<agent_id>/<key>``).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentlab.core.ids import validate_agent_id
from agentlab.errors import ConfigError, StoreError
from agentlab.store.agent_store import AgentStore, DirectoryStore, validate_key

__all__ = [
    "PACKED_FILE",
    "PACKED_THRESHOLD",
    "STORE_KINDS",
    "PackedStore",
    "export_dirs",
    "main",
    "open_agent_store",
    "store_kind",
]

#: the packed store's file inside a run directory (its presence selects the store)
PACKED_FILE = "agents.sqlite"
STORE_KINDS = ("directory", "packed")
#: ``store="auto"`` (the default of ``Society.create``) packs runs of this many agents or
#: more. Below it a directory per agent is still cheap (create < ~1.5 s, < ~25 MB) and
#: each agent is a folder to read; above it directories cost ~1.4 ms and ~24 KB per
#: agent against ~0.05 ms and ~0.5 KB packed (measured, see ``store/README.md``).
PACKED_THRESHOLD = 1000
_SYNC = ("OFF", "NORMAL", "FULL")
_PAGE_SIZE = 16384  # bytes per page of a new store file (see _connect)
_WAL_BYTES = 4096 * 1000  # WAL size that triggers a checkpoint (SQLite's default)
_GROUP_MAX = 4096  # pending keys before a group-commit store writes them anyway
# ``INSERT OR REPLACE`` (delete + insert of the key's row) rather than an upsert (``ON
# CONFLICT ... DO UPDATE``): the same rows after, and on 16 KiB pages, 256 slot writes per
# transaction, 18.5k instead of 21.5k instructions per row (callgrind) and 3.8-4.7 instead
# of 4.2-5.8 µs CPU per row (interleaved, 2k and 40k agents); an earlier measurement had
# the upsert ahead (~2.8 vs ~3.8 µs), so the sqlite build may decide: measure both.
_UPSERT = "INSERT OR REPLACE INTO kv VALUES (?, ?, ?)"


#: a value as the store binds it. Python 3.11's ``sqlite3`` binds a ``bytearray`` at once
#: but runs a ``bytes`` parameter through its adapter lookup, whose failed ``__adapt__``
#: lookup on the protocol type formats an AttributeError and drops it (~2k instructions a
#: row, a seventh of a slot write; callgrind). The stored BLOB is the same.
_blob = bytearray


class PackedStore:
    """An :class:`~agentlab.store.agent_store.AgentStore` in one SQLite file.

    Args:
        path: the database file (usually ``<run>/agents.sqlite``); created if absent.
        synchronous: SQLite ``synchronous`` pragma: ``"NORMAL"`` (default) survives a
            process kill, ``"FULL"`` also a power loss.

        group_commit: hold writes in memory (reads see them) until :meth:`flush` writes
            them all in one transaction (or ``_GROUP_MAX`` agents are pending). Only for a
            writer that flushes before anything depends on the writes: the runtime's batch
            proxy flushes at the end of every batch, before the society commits a tick.

    Picklable (by path): each process and thread opens its own connection.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        group_commit: bool = False,
    ) -> None:
        if synchronous not in _SYNC:
            raise ConfigError(f"synchronous={synchronous!r}; valid: {', '.join(_SYNC)}")
        self.path = Path(path)
        self.synchronous = synchronous
        self.group_commit = group_commit
        # (agent, key) -> the row as it will be inserted (no tuple rebuilt at flush); the
        # value a bytearray (see _blob), read back as bytes
        self._pending: dict[tuple[str, str], tuple[str, str, bytearray]] = {}
        self._local = threading.local()
        # every connection this object opened (one per thread), so close() closes them all
        self._conns: list[tuple[int, sqlite3.Connection]] = []
        self._connect()  # create the schema now: errors surface at open, not mid-step

    def _connect(self) -> sqlite3.Connection:
        loc = self._local
        db: sqlite3.Connection | None = getattr(loc, "db", None)
        if db is not None and loc.pid == os.getpid():
            return db
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # each thread still uses only its own connection; another thread may close it
            db = sqlite3.connect(
                self.path, isolation_level=None, timeout=60.0, check_same_thread=False
            )
            # Before the first write of a new file (a no-op on an existing one): a batch's
            # read_pairs + slot upserts + commit cost ~10% less CPU with 16 KiB pages than
            # with SQLite's 4 KiB default, at 20k and 200k agents alike (measured).
            db.execute(f"PRAGMA page_size={_PAGE_SIZE}")
            db.execute("PRAGMA journal_mode=WAL")
            # checkpoint at ~4 MiB of WAL whatever the page size (SQLite's default is 1000
            # pages): the WAL file keeps the size it had before 16 KiB pages
            page = db.execute("PRAGMA page_size").fetchone()[0]
            db.execute(f"PRAGMA wal_autocheckpoint={max(1, _WAL_BYTES // page)}")
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            db.execute(
                "CREATE TABLE IF NOT EXISTS kv (agent TEXT NOT NULL, key TEXT NOT NULL, "
                "value BLOB NOT NULL, PRIMARY KEY (agent, key)) WITHOUT ROWID"
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open packed agent store {self.path}: {exc}") from exc
        loc.db, loc.pid = db, os.getpid()
        self._conns.append((os.getpid(), db))
        return db

    def __reduce__(self) -> tuple[Any, ...]:
        # pending writes do not travel: a copy starts with none (flush before pickling)
        return (_rebuild, (str(self.path), self.synchronous, self.group_commit))

    def __repr__(self) -> str:
        return f"PackedStore({str(self.path)!r})"

    def close(self) -> None:
        """Write pending writes, checkpoint the WAL into the file and close every connection.

        After ``Society.close()`` (which calls this) the agents' states are in
        ``agents.sqlite`` itself, not only in ``agents.sqlite-wal``: a copy of the file
        alone is complete. Idempotent; a later call reopens a connection.
        """
        self.flush()
        pid = os.getpid()
        conns, self._conns = self._conns, []
        for owner, db in conns:
            if owner != pid:  # opened before a fork(): the parent's to close
                continue
            try:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass  # a reader elsewhere holds the WAL: SQLite keeps it until it is done
            db.close()
        self._local = threading.local()

    def mark_committed(self, tick: int) -> None:
        """Record in the store that tick ``tick``'s agent writes are in it.

        The society calls this after flushing a tick's writes and before its commit, so a
        store whose WAL was deleted or replaced (its newer states lost) reads an older
        mark than the run's commit and :func:`~agentlab.store.store_check.check_agent_store`
        refuses it at open instead of stepping agents from stale or missing states.
        """
        self.flush()
        db = self._connect()
        try:
            db.execute(
                "CREATE TABLE IF NOT EXISTS stamp (name TEXT PRIMARY KEY, tick INTEGER NOT NULL)"
            )
            db.execute("INSERT OR REPLACE INTO stamp VALUES ('committed', ?)", (int(tick),))
        except sqlite3.Error as exc:
            raise StoreError(f"packed store {self.path}: cannot mark tick {tick}: {exc}") from exc

    # --- AgentStore --------------------------------------------------------------------

    def read(self, agent_id: str, key: str) -> bytes | None:
        """The stored bytes, or ``None`` if absent."""
        if self._pending:
            staged = self._pending.get((agent_id, key))
            if staged is not None:
                return bytes(staged[2])
        row = (
            self._connect()
            .execute("SELECT value FROM kv WHERE agent=? AND key=?", (agent_id, key))
            .fetchone()
        )
        return None if row is None else bytes(row[0])

    def read_many(
        self, agent_ids: Sequence[str], keys: Sequence[str]
    ) -> dict[tuple[str, str], bytes]:
        """``{(agent, key): bytes}`` of ``keys`` of many agents (absent pairs left out).

        One query per 500 agents instead of one per key: a batch step reads its agents'
        configs and state slots with it. Pending group-commit writes are seen.
        """
        out: dict[tuple[str, str], bytes] = {}
        if not agent_ids or not keys:
            return out
        db = self._connect()
        marks = ",".join("?" * len(keys))
        for i in range(0, len(agent_ids), 500):
            chunk = agent_ids[i : i + 500]
            query = (
                f"SELECT agent, key, value FROM kv WHERE key IN ({marks}) "
                f"AND agent IN ({','.join('?' * len(chunk))})"
            )
            for agent, key, value in db.execute(query, (*keys, *chunk)):
                out[agent, key] = value
        pending = self._pending
        if pending:
            for agent in agent_ids:
                for key in keys:
                    staged = pending.get((agent, key))
                    if staged is not None:
                        out[agent, key] = bytes(staged[2])
        return out

    def read_pairs(
        self, agent_ids: Sequence[str], first: str, second: str
    ) -> dict[str, tuple[bytes | None, bytes | None]]:
        """``{agent: (first, second)}`` for every agent holding ``first`` (others left out).

        What a batch step reads of each agent (its config and committed slot): one row per
        agent from a self-join, so the ``sqlite3`` module builds half the Python objects
        of :meth:`read_many`'s row per key (~2 instead of ~3.5 µs per agent, measured).
        Pending group-commit writes are seen.
        """
        out: dict[str, tuple[bytes | None, bytes | None]] = {}
        if not agent_ids:
            return out
        db = self._connect()
        for i in range(0, len(agent_ids), 500):
            chunk = agent_ids[i : i + 500]
            query = (
                "SELECT c.agent, c.value, s.value FROM kv c "
                "LEFT JOIN kv s ON s.agent = c.agent AND s.key = ? "
                f"WHERE c.key = ? AND c.agent IN ({','.join('?' * len(chunk))})"
            )
            for agent, one, two in db.execute(query, (second, first, *chunk)):
                out[agent] = (one, two)
        pending = self._pending
        if pending:
            for agent in agent_ids:
                one_p, two_p = pending.get((agent, first)), pending.get((agent, second))
                if one_p is None and two_p is None:
                    continue
                old = out.get(agent)
                if old is None:  # not in the file with ``first``: the slow way, both keys
                    one, two = self.read(agent, first), self.read(agent, second)
                else:
                    one = old[0] if one_p is None else bytes(one_p[2])
                    two = old[1] if two_p is None else bytes(two_p[2])
                if one is not None:
                    out[agent] = (one, two)
        return out

    def write_many(self, agent_id: str, items: Mapping[str, bytes]) -> None:
        """Store several keys of one agent in one transaction (all or none after a crash)."""
        validate_agent_id(agent_id)
        rows = [(agent_id, validate_key(k), _blob(v)) for k, v in items.items()]
        if self.group_commit:
            for row in rows:
                self._pending[row[0], row[1]] = row
            if len(self._pending) >= _GROUP_MAX:
                self.flush()
            return
        self._commit(rows, agent_id)

    def write_known(self, agent_id: str, key: str, data: bytes) -> None:
        """``write_many(agent_id, {key: data})`` for an id and key already validated.

        The per-agent-step write of a state slot: a ``Workspace`` validated its id when it
        was made (or the society did at create) and the slot keys are constants, so the
        regex and the per-call dict are skipped. Same transaction rules as ``write_many``.
        """
        if not self.group_commit:
            self._commit([(agent_id, key, _blob(data))], agent_id)
            return
        pending = self._pending
        pending[agent_id, key] = (agent_id, key, _blob(data))
        if len(pending) >= _GROUP_MAX:
            self.flush()

    def flush(self) -> None:
        """Write the pending writes of ``group_commit`` in one transaction."""
        pending = self._pending
        if pending:
            self._commit(pending.values(), f"{len(pending)} pending keys")
            pending.clear()

    def _commit(self, rows: Collection[tuple[str, str, bytearray]], what: str) -> None:
        db = self._connect()
        try:
            if len(rows) == 1:  # autocommit: one implicit transaction
                db.execute(_UPSERT, next(iter(rows)))
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(_UPSERT, rows)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"packed store {self.path}: write of {what!r}: {exc}") from exc

    def insert_new(self, rows: Iterable[tuple[str, str, bytes]]) -> None:
        """Store ``(agent_id, key, bytes)`` rows of *new* agents in one transaction.

        The bulk path of ``Society.create`` (one call per segment of agents): plain
        inserts, so nothing is replaced; ids and keys are the caller's to validate (the
        population validated them, keys are the workspace's constants).

        Raises:
            StoreError: a row's ``(agent, key)`` is already stored (nothing is written).
        """
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT INTO kv VALUES (?, ?, ?)", rows)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.IntegrityError as exc:
            raise StoreError(
                f"packed store {self.path}: an agent being created already exists ({exc}); "
                "create into a new run directory"
            ) from exc
        except sqlite3.Error as exc:
            raise StoreError(f"packed store {self.path}: bulk insert failed: {exc}") from exc

    def delete(self, agent_id: str) -> None:
        """Remove an agent and all its keys."""
        self.flush()
        self._connect().execute("DELETE FROM kv WHERE agent=?", (agent_id,))

    def agents(self) -> list[str]:
        """Ids of every stored agent, sorted."""
        self.flush()
        rows = self._connect().execute("SELECT DISTINCT agent FROM kv ORDER BY agent")
        return [r[0] for r in rows]

    def keys(self, agent_id: str) -> list[str]:
        """Keys of one agent, sorted."""
        self.flush()
        rows = self._connect().execute("SELECT key FROM kv WHERE agent=? ORDER BY key", (agent_id,))
        return [r[0] for r in rows]

    def exists(self, agent_id: str) -> bool:
        """Whether the agent has a complete workspace (``AGENT.json`` is written last)."""
        return self.read(agent_id, "AGENT.json") is not None

    def stored_bytes(self) -> int:
        """Bytes of the database and its WAL on disk."""
        return sum(
            p.stat().st_size
            for p in (self.path, self.path.with_name(self.path.name + "-wal"))
            if p.exists()
        )


def _rebuild(path: str, synchronous: str, group_commit: bool) -> PackedStore:
    return PackedStore(path, synchronous=synchronous, group_commit=group_commit)


def store_kind(store: str, n_agents: int) -> str:
    """The store a new run of ``n_agents`` gets: ``store`` itself unless ``"auto"``.

    ``"auto"`` picks ``"packed"`` from :data:`PACKED_THRESHOLD` agents up and
    ``"directory"`` below it (see ``store/README.md`` for the measurement).

    Raises:
        ConfigError: ``store`` is not ``"auto"``, ``"directory"`` or ``"packed"``.
    """
    if store == "auto":
        return "packed" if n_agents >= PACKED_THRESHOLD else "directory"
    if store not in STORE_KINDS:
        valid = ", ".join(("auto", *STORE_KINDS))
        raise ConfigError(f"unknown store {store!r}; valid: {valid}")
    return store


def open_agent_store(
    run_dir: str | os.PathLike[str], kind: str | None = None, *, group_commit: bool = False
) -> AgentStore:
    """The agent store of a run: packed when ``<run>/agents.sqlite`` exists (or ``kind``).

    Args:
        run_dir: the run directory.
        kind: ``None`` (detect), ``"directory"`` or ``"packed"`` (creates the file).
        group_commit: a packed store holds writes until ``flush()`` (see ``PackedStore``).

    Raises:
        ConfigError: unknown ``kind``.
    """
    if kind is not None and kind not in STORE_KINDS:
        raise ConfigError(f"unknown store {kind!r}; valid: {', '.join(STORE_KINDS)}")
    run = Path(run_dir)
    if kind == "packed" or (kind is None and (run / PACKED_FILE).exists()):
        return PackedStore(run / PACKED_FILE, group_commit=group_commit)
    return DirectoryStore(run / "agents")


def export_dirs(store: AgentStore, out: str | os.PathLike[str]) -> int:
    """Write every agent of ``store`` as the directory layout under ``out``; returns agents.

    Raises:
        StoreError: ``out`` already holds agents (nothing is overwritten).
    """
    dest = DirectoryStore(out)
    if dest.agents():
        raise StoreError(f"{out} already holds agent directories; export into an empty folder")
    ids = store.agents()
    for agent_id in ids:
        items: dict[str, Any] = {}
        for key in store.keys(agent_id):
            data = store.read(agent_id, key)
            if data is not None:
                items[key] = data
        dest.write_many(agent_id, items)
    return len(ids)


def main(args: Any) -> int:
    """CLI entry (``agentlab export-dirs RUN OUT``); returns an exit code.

    Raises:
        StoreError: ``RUN`` has no packed store, or ``OUT`` already holds agents.
    """
    run = Path(args.run)
    if not (run / PACKED_FILE).exists():
        raise StoreError(f"{run} has no packed agent store ({PACKED_FILE}); nothing to export")
    n = export_dirs(PackedStore(run / PACKED_FILE), args.out)
    print(f"exported {n} agents to {args.out}")
    return 0
