"""Staged Ray batches: a batch task never touches the run directory; the driver commits.

The driver reads the committed workspace bytes of a batch's agents (:func:`read_segment`,
a :data:`Segment`) and sends them with the task. The task runs its agents on a
:class:`SegmentStore` over those bytes, writes its log rows, spans and a real provider's
response cache into a per-process staging directory under its own temp dir, and asks
people through the run's human desk (``runtime/ray_human.py``). When it ends it returns a
:class:`StagedBatch`: the counters, the log bytes, the catalogue columns, the new state
versions and the diagnostics it appended. So a node needs nothing but Ray (and the
installed package): no shared filesystem.

The driver *accepts* an attempt by receiving that return value and commits it with
:meth:`Promoted.commit`: the log bytes are appended to the run's shard of the worker
(``replay/<ds>/<host>-<pid>.jsonl``, the layout readers already know), the state slots are
written, new columns are registered in the catalogue.

Why this is the fence: an attempt the driver gave up on (its worker crashed, was
cancelled, ran past its deadline, or sits on a partitioned node) can only ever write into
its own staging directory and memory, never into the run. However late it runs, nothing
it does reaches the committed log or a committed state slot — even when cancelling it
failed. The driver is the only writer of the run's log files, so it may cut back what an
aborted tick appended (:meth:`Promoted.rollback`) and ``truncate_log`` on resume holds its
premise.
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
from agentlab.core.ids import validate_agent_id
from agentlab.errors import StoreError
from agentlab.llm.cache_backend import CACHE_DIR
from agentlab.runtime.batch import BatchResult, BatchSpec, run_batch_blocking
from agentlab.store.agent_store import AgentStore, DirectoryStore, iter_bytes, validate_key
from agentlab.store.atomic import atomic_write_bytes
from agentlab.store.layout import REPLAY_DIR, TRACE_DIR, shard_files
from agentlab.store.packed_store import open_agent_store

__all__ = [
    "Promoted",
    "Segment",
    "SegmentStore",
    "StagedBatch",
    "read_segment",
    "run_staged_batch",
    "stage_root",
    "take_log",
]


#: ``{agent_id: {key: bytes}}``: agents' workspace bytes travelling between driver and task
Segment = dict[str, dict[str, bytes]]

#: keys under this prefix are diagnostics, never state: not shipped to a task
_DIAGNOSTICS = ".runtime/"


def read_segment(store: AgentStore, agent_ids: list[str]) -> Segment:
    """The committed workspace bytes of ``agent_ids`` (the driver's side of a batch).

    Every key but the ``.runtime/`` diagnostics: both state slots (the task picks the
    version not after the committed tick, as it would from files), ``config.json``,
    ``AGENT.json`` and whatever else an agent keeps in its workspace.
    """
    out: Segment = {}
    for agent_id in agent_ids:
        keys = [k for k in store.keys(agent_id) if not k.startswith(_DIAGNOSTICS)]
        out[agent_id] = iter_bytes(store, agent_id, keys)
    return out


class SegmentStore:
    """An :class:`AgentStore` over a :data:`Segment` held in memory (the task's side).

    Reads see the task's own writes first, then the segment the driver sent; writes and
    diagnostic appends stay in memory until :meth:`take`. It never opens a file, so a
    batch task runs on a node that cannot see the run directory.
    """

    def __init__(self, segment: Segment, run: str = "") -> None:
        self._base = segment
        self._run = run
        self._writes: Segment = {}
        self._appends: dict[str, dict[str, bytearray]] = {}

    def read(self, agent_id: str, key: str) -> bytes | None:
        staged = self._writes.get(agent_id)
        if staged is not None and key in staged:
            return staged[key]
        return self._base.get(agent_id, {}).get(key)

    def write(self, agent_id: str, key: str, data: bytes) -> None:
        """Store one key (in memory)."""
        self.write_many(agent_id, {key: data})

    def write_many(self, agent_id: str, items: Mapping[str, bytes]) -> None:
        staged = self._writes.setdefault(validate_agent_id(agent_id), {})
        for key, data in items.items():
            staged[validate_key(key)] = bytes(data)

    def append(self, agent_id: str, key: str, data: bytes) -> None:
        """Append to a diagnostic key (``.runtime/logs/...``); the driver appends it."""
        logs = self._appends.setdefault(validate_agent_id(agent_id), {})
        logs.setdefault(validate_key(key), bytearray()).extend(data)

    def delete(self, agent_id: str) -> None:
        raise StoreError(
            f"a batch task cannot delete agent {agent_id!r}: its store is the segment of "
            f"{self._run or 'the run'} the driver sent"
        )

    def agents(self) -> list[str]:
        return sorted(set(self._base) | set(self._writes))

    def keys(self, agent_id: str) -> list[str]:
        return sorted(set(self._base.get(agent_id, {})) | set(self._writes.get(agent_id, {})))

    def exists(self, agent_id: str) -> bool:
        """Whether the segment (or a write of this task) holds the agent."""
        return agent_id in self._base or agent_id in self._writes

    def take(self) -> tuple[Segment, dict[str, dict[str, bytes]]]:
        """``(writes, appends)`` of the task; both are empty afterwards."""
        writes, self._writes = self._writes, {}
        appends = {a: {k: bytes(v) for k, v in d.items()} for a, d in self._appends.items()}
        self._appends = {}
        return writes, appends

    def __repr__(self) -> str:
        return f"<segment of {len(self._base)} agents of {self._run or 'a run'}>"


@dataclass(slots=True)
class StagedBatch:
    """What a staged batch task returns: counters, log bytes, catalogue, state writes."""

    result: BatchResult
    #: ``{relpath under the run: bytes}``, e.g. ``replay/llm_calls/host-123.jsonl``
    log: dict[str, bytes] = field(default_factory=dict)
    #: ``{dataset: {column: type}}`` the batch's rows need in the catalogue
    schema: dict[str, dict[str, str]] = field(default_factory=dict)
    #: ``{agent_id: {key: bytes}}`` workspace writes (new state versions)
    writes: Segment = field(default_factory=dict)
    #: ``{agent_id: {key: bytes}}`` appended to diagnostics (``.runtime/logs/...``)
    appends: dict[str, dict[str, bytes]] = field(default_factory=dict)
    pid: int = 0
    node: str = ""


_SWEPT: set[int] = set()


def stage_root(run_dir: str) -> Path:
    """This process's staging directory for ``run_dir`` (under its own temp dir).

    One directory per (process, run), outside the run so that nothing a superseded
    attempt writes can ever show up there; reused by the process's next task.
    """
    digest = hashlib.blake2b(str(Path(run_dir).absolute()).encode(), digest_size=6).hexdigest()
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


#: written once per run (the driver keeps the first), never appended
_ONCE = (f"{CACHE_DIR}/config.json",)


def take_log(root: Path) -> dict[str, bytes]:
    """Bytes of every staged shard under ``root``, which are then emptied (same inode: the
    writer keeps its file and its ``_seq``, so sequence numbers stay unique per process).

    Also the response cache a real provider records (``llm_cache/``).
    """
    files = shard_files(root / TRACE_DIR)
    replay = root / REPLAY_DIR
    if replay.is_dir():
        for d in sorted(replay.iterdir()):
            if d.is_dir():
                files.extend(shard_files(d))
    cache = root / CACHE_DIR
    if cache.is_dir():
        files.extend(sorted(cache.glob("*.jsonl")))
    out: dict[str, bytes] = {}
    for p in files:
        data = p.read_bytes()
        if data:
            out[p.relative_to(root).as_posix()] = data
            os.truncate(p, 0)
    for rel in _ONCE:
        if (root / rel).is_file():
            out[rel] = (root / rel).read_bytes()
    return out


def staged_schema(root: Path) -> dict[str, dict[str, str]]:
    """``{dataset: {column: type}}`` of the staged catalogue under ``root``."""
    from agentlab.store.schema import load_schema

    return {
        name: dict(entry.get("columns", {}))
        for name, entry in load_schema(root)["datasets"].items()
    }


def run_staged_batch(
    batch: BatchSpec, proxy: Any, segment: Segment, token: str = "", virtual: Any = None
) -> StagedBatch:
    """The body of a Ray batch task: run ``batch`` on ``segment`` with every write staged.

    Touches nothing of the run directory: state comes from ``segment``, rows, spans and
    a real provider's response cache go to this process's staging directory, and human
    requests to the run's desk (``RunServices.human_desk``), which also learns where the
    attempt ``token`` runs. ``virtual`` (a virtual-clock run): ``(time server, batch
    index, tick start)``; the batch's calls and clock are then the time server's
    (``runtime/vclock_worker.py``).
    """
    from agentlab.store.replay import get_replay_sink
    from agentlab.store.trace import get_tracer

    desk = getattr(proxy, "human_desk", None)
    if token and desk is not None:  # where this attempt runs, for the executor's deadline
        desk.started.remote(token, _node_id(), os.getpid())
    root = stage_root(proxy.run_dir)
    take_log(root)  # drop what an earlier task of this process left unfinished
    store = SegmentStore(segment, proxy.run_dir)
    if virtual is None:
        proxy.stage(replay=get_replay_sink(root), trace=get_tracer(root), store=store, root=root)
        result = run_batch_blocking(batch, proxy)  # flushes the staged sink and tracer
    else:
        from agentlab.runtime.vclock_worker import PROCESS_CLOCK, run_virtual_batch

        proxy.bind_clock(PROCESS_CLOCK)  # first: binding a clock drops the staged tracer
        trace = get_tracer(root, clock=PROCESS_CLOCK)
        proxy.stage(replay=get_replay_sink(root), trace=trace, store=store, root=root)
        result = run_virtual_batch(batch, proxy, *virtual)
    writes, appends = store.take()
    return StagedBatch(
        result,
        log=take_log(root),
        schema=staged_schema(root),
        writes=writes,
        appends=appends,
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
        self.commit_log(staged.log, staged.schema)
        self.commit_state(staged.writes, staged.appends)

    def commit_log(self, log: Mapping[str, bytes], schema: Mapping[str, Mapping[str, str]]) -> None:
        """Register new columns and append staged log bytes to the run's shards."""
        from agentlab.store.schema import register_dataset

        for name, cols in schema.items():
            have = self._columns.get(name, {})
            if not set(cols) <= set(have):
                self._columns[name] = register_dataset(self.run_dir, name, dict(cols), strict=False)
        for rel, data in log.items():
            path = self.run_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if rel in _ONCE:
                if not path.exists():
                    atomic_write_bytes(path, data, fsync=False)
                continue
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                if rel not in self._before:
                    self._before[rel] = os.fstat(fd).st_size
                _write_all(fd, data)
            finally:
                os.close(fd)

    def commit_state(self, writes: Segment, appends: dict[str, dict[str, bytes]]) -> None:
        """Write the agents' new state versions and append their diagnostics."""
        store = open_agent_store(self.run_dir, group_commit=True)  # packed: one transaction
        for agent_id, items in writes.items():
            ws = Workspace(store, agent_id)
            for key, data in items.items():
                if key in SLOT_KEYS:
                    # The agent wrote the slot *not* holding its committed version: in place,
                    # as the worker would have (see agents/workspace.py).
                    ws.overwrite_bytes(key, data)
                else:
                    ws.write_bytes(key, data)
        for agent_id, items in appends.items():
            for key, data in items.items():
                append_diagnostic(store, agent_id, key, data)
        flush = getattr(store, "flush", None)
        if flush is not None:  # a packed store's batch, before the driver commits the tick
            flush()


def append_diagnostic(store: AgentStore, agent_id: str, key: str, data: bytes) -> None:
    """Append ``data`` to one diagnostic key (a file append in a directory store)."""
    if isinstance(store, DirectoryStore):
        path = store.path(agent_id) / validate_key(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            f.write(data)
        return
    store.write_many(agent_id, {key: (store.read(agent_id, key) or b"") + data})


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
