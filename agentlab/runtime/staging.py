"""Staged Ray batches: a batch attempt's writes reach the run only if the driver accepts it.

A Ray batch task never writes into the run directory. Its agents' new state versions go
into a :class:`StagingStore` (reads fall through to the run's agent store), its log rows
and spans into a per-process staging directory outside the run. When the task ends it
returns a :class:`StagedBatch`: the counters plus those bytes. The driver *accepts* an
attempt by receiving that return value and then commits it with :func:`commit_staged`:
the log bytes are appended to the run's shard of the worker (``replay/<ds>/<host>-<pid>
.jsonl``, the layout readers already know), the state slots are written, new columns are
registered in the catalogue.

Why this is the fence: an attempt the driver gave up on (its worker crashed, was
cancelled, or sits on a partitioned node) can only ever write into its own staging
directory and memory, never into the run. However late it runs, nothing it does reaches
the committed log or a committed state slot — even when cancelling it failed. The driver
is the only writer of the run's log files, so it may cut back what an aborted tick
appended (:meth:`Promoted.rollback`) and ``truncate_log`` on resume holds its premise.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlab.agents.workspace import SLOT_KEYS, Workspace
from agentlab.runtime.batch import BatchResult, BatchSpec, run_batch_blocking
from agentlab.store.agent_store import DirectoryStore, validate_key
from agentlab.store.layout import REPLAY_DIR, TRACE_DIR, shard_files
from agentlab.store.packed_store import open_agent_store

__all__ = ["Promoted", "StagedBatch", "StagingStore", "run_staged_batch"]


class StagingStore(DirectoryStore):
    """A :class:`DirectoryStore` whose writes stay in memory until :meth:`take`.

    Reads see the staged bytes first, then the run's files, so an agent reads back what it
    wrote in the same attempt. A subclass (not the exact type) on purpose: the workspace
    fast paths that write files directly check ``type(store) is DirectoryStore``.
    """

    def __init__(self, root: str | os.PathLike[str], fsync: bool = False) -> None:
        super().__init__(root, fsync=fsync)
        self._staged: dict[str, dict[str, bytes]] = {}
        # reads fall through to the run's own store: directories, or a packed run's file
        self._base = open_agent_store(self.root.parent)

    def read(self, agent_id: str, key: str) -> bytes | None:
        staged = self._staged.get(agent_id)
        if staged is not None and key in staged:
            return staged[key]
        return self._base.read(agent_id, key)

    def write(self, agent_id: str, key: str, data: bytes) -> None:
        self.write_many(agent_id, {key: data})

    def write_many(self, agent_id: str, items: Mapping[str, bytes]) -> None:
        self.path(agent_id)  # validates the id
        staged = self._staged.setdefault(agent_id, {})
        for key, data in items.items():
            staged[validate_key(key)] = bytes(data)

    def take(self) -> dict[str, dict[str, bytes]]:
        """The staged writes ``{agent_id: {key: bytes}}``; the store is empty afterwards."""
        out, self._staged = self._staged, {}
        return out

    def __reduce__(self) -> tuple[type, tuple[str, bool]]:
        # A copy is an empty *staging* store (never a plain one that would write files):
        # staged writes belong to one process's attempt.
        return (StagingStore, (str(self.root), self.fsync))


@dataclass(slots=True)
class StagedBatch:
    """What a staged batch task returns: counters, log bytes, catalogue, state writes."""

    result: BatchResult
    #: ``{relpath under the run: bytes}``, e.g. ``replay/llm_calls/host-123.jsonl``
    log: dict[str, bytes] = field(default_factory=dict)
    #: ``{dataset: {column: type}}`` the batch's rows need in the catalogue
    schema: dict[str, dict[str, str]] = field(default_factory=dict)
    #: ``{agent_id: {key: bytes}}`` workspace writes (new state versions)
    writes: dict[str, dict[str, bytes]] = field(default_factory=dict)
    pid: int = 0
    node: str = ""


_SWEPT: set[int] = set()


def _stage_root(run_dir: str) -> Path:
    # One directory per (worker process, run), outside the run so that nothing a
    # superseded attempt writes can ever show up there; reused by the process's next task.
    digest = hashlib.blake2b(str(Path(run_dir).resolve()).encode(), digest_size=6).hexdigest()
    base = Path(tempfile.gettempdir()) / "agentlab-stage"
    if os.getpid() not in _SWEPT:
        _SWEPT.add(os.getpid())
        _sweep_dead(base)
    return base / f"{os.getpid()}-{digest}"


def _sweep_dead(base: Path) -> None:
    """Remove staging directories of processes that are gone (killed workers leave them)."""
    import shutil

    try:
        entries = list(base.iterdir())
    except FileNotFoundError:
        return
    for d in entries:
        pid = d.name.split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:  # alive, another user's
            pass


def _take_log(root: Path) -> dict[str, bytes]:
    """Bytes of every staged shard, which are then emptied (same inode: the writer keeps
    its file and its ``_seq``, so sequence numbers stay unique per worker process)."""
    files = shard_files(root / TRACE_DIR)
    replay = root / REPLAY_DIR
    if replay.is_dir():
        for d in sorted(replay.iterdir()):
            if d.is_dir():
                files.extend(shard_files(d))
    out: dict[str, bytes] = {}
    for p in files:
        data = p.read_bytes()
        if data:
            out[p.relative_to(root).as_posix()] = data
            os.truncate(p, 0)
    return out


def run_staged_batch(batch: BatchSpec, proxy: Any) -> StagedBatch:
    """The body of a Ray batch task: run ``batch`` with every write staged (module doc)."""
    from agentlab.store.replay import get_replay_sink
    from agentlab.store.schema import load_schema
    from agentlab.store.trace import get_tracer

    root = _stage_root(proxy.run_dir)
    leftover = _take_log(root)  # an earlier task of this process that did not finish
    del leftover
    store = StagingStore(Path(proxy.run_dir) / "agents")
    proxy.stage(
        replay=get_replay_sink(root),
        trace=get_tracer(root),
        store=store,
    )
    result = run_batch_blocking(batch, proxy)  # flushes the staged sink and tracer
    schema = {
        name: dict(entry.get("columns", {}))
        for name, entry in load_schema(root)["datasets"].items()
    }
    return StagedBatch(
        result,
        log=_take_log(root),
        schema=schema,
        writes=store.take(),
        pid=os.getpid(),
        node=_node_id(),
    )


def _node_id() -> str:
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # outside Ray (tests call the body directly)
        return ""


class Promoted:
    """The driver side: commits accepted batches into one run, and can undo a tick's.

    The driver is the only process that appends to the run's log files (workers stage),
    so remembering each file's size before the first append of a tick is enough to cut
    an aborted tick's rows back out (:meth:`rollback`).
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self._columns: dict[str, dict[str, str]] = {}
        self._before: dict[str, int] = {}

    def begin(self) -> None:
        """Start a tick attempt: forget the sizes of the previous one."""
        self._before = {}

    def rollback(self) -> list[str]:
        """Cut every file appended to since :meth:`begin` back to its size then."""
        changed = []
        for rel, size in self._before.items():
            path = self.run_dir / rel
            try:
                if size == 0 and path.stat().st_size > 0:
                    path.unlink()
                elif path.stat().st_size > size:
                    os.truncate(path, size)
                else:
                    continue
            except FileNotFoundError:
                continue
            changed.append(rel)
        self._before = {}
        return changed

    def commit(self, staged: StagedBatch) -> None:
        """Register new columns, append the log bytes, write the agents' state."""
        from agentlab.store.schema import register_dataset

        for name, cols in staged.schema.items():
            have = self._columns.get(name, {})
            if not set(cols) <= set(have):
                self._columns[name] = register_dataset(self.run_dir, name, cols, strict=False)
        for rel, data in staged.log.items():
            path = self.run_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                if rel not in self._before:
                    self._before[rel] = os.fstat(fd).st_size
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        store = open_agent_store(self.run_dir, group_commit=True)  # packed: one transaction
        for agent_id, items in staged.writes.items():
            ws = Workspace(store, agent_id)
            for key, data in items.items():
                if key in SLOT_KEYS:
                    # The agent wrote the slot *not* holding its committed version: in place,
                    # as the worker would have (see agents/workspace.py).
                    ws.overwrite_bytes(key, data)
                else:
                    ws.write_bytes(key, data)
        flush = getattr(store, "flush", None)
        if flush is not None:  # a packed store's batch, before the driver commits the tick
            flush()
