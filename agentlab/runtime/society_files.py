"""The files of a society's run directory besides agents and log: reading the two JSON
documents safely, cleaning up after an interrupted create, and per-tick checkpoints.

``<run>/SOCIETY.json``       the society's configuration (written once, at create)
``<run>/SOCIETY_STEP.json``  the commit record of the last committed tick
``<run>/env/ticks/<t>/``      env checkpoint of tick ``t`` (only the committed one is kept)
``<run>/checkpoints/<t>/``    with ``keep_checkpoints=True``: the commit record of tick ``t``
                              (``SOCIETY_STEP.json``) and every agent's state version of
                              that tick (``agents.jsonl``) — what ``Society.fork`` needs to
                              start a new run from any committed tick, not just the last
"""

from __future__ import annotations

import contextlib
import shutil
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from agentlab.agents.workspace import SLOT_KEYS, Workspace, pick_version
from agentlab.errors import CorruptRecordError, StoreError
from agentlab.runtime.envhost import ENV_CKPT_DIR
from agentlab.store.atomic import atomic_write_bytes, atomic_write_json, read_json
from agentlab.store.packed_store import PACKED_FILE, open_agent_store
from agentlab.store.writer_lock import WriterLock

__all__ = [
    "CHECKPOINTS_DIR",
    "SOCIETY_FILE",
    "SOCIETY_SCHEMA_VERSION",
    "STEP_FILE",
    "agent_versions",
    "check_not_a_file",
    "clear_interrupted_create",
    "drop_stale_checkpoints",
    "read_doc",
    "unlock_on_error",
    "write_tick_checkpoint",
]

SOCIETY_SCHEMA_VERSION = 1
SOCIETY_FILE = "SOCIETY.json"
STEP_FILE = "SOCIETY_STEP.json"
CHECKPOINTS_DIR = "checkpoints"
AGENTS_FILE = "agents.jsonl"


def clear_interrupted_create(run_dir: Path) -> None:
    """Remove what a create killed half-way left (nothing was committed without
    ``SOCIETY_STEP.json``), so create can start over."""
    packed = (PACKED_FILE, PACKED_FILE + "-wal", PACKED_FILE + "-shm")
    names = ("agents", *packed, "replay", "trace", "env", CHECKPOINTS_DIR, SOCIETY_FILE)
    leftovers = [run_dir / n for n in names]
    if not any(p.exists() for p in leftovers):
        return
    # (stacklevel: the caller of Society.create -> create_society -> here, a notebook cell)
    warnings.warn(f"{run_dir}: removing leftovers of an interrupted Society.create", stacklevel=4)
    for p in leftovers:
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def drop_stale_checkpoints(run_dir: Path, committed: int, *, keep: bool = False) -> None:
    """Remove checkpoints of uncommitted ticks (and of older ones unless ``keep``)."""
    for root in (run_dir / ENV_CKPT_DIR, run_dir / CHECKPOINTS_DIR):
        if not root.is_dir():
            continue
        for d in root.iterdir():
            if d.name.isdigit():
                t = int(d.name)
                if t > committed or (t < committed and not keep):
                    shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def unlock_on_error(lock: WriterLock) -> Iterator[None]:
    """Release ``lock`` if the block raises (a failed create/open keeps no lock)."""
    try:
        yield
    except BaseException:
        lock.release()
        raise


def check_not_a_file(run_dir: Path) -> None:
    """Raise ``StoreError`` if ``run_dir`` is a regular file."""
    if run_dir.exists() and not run_dir.is_dir():
        raise StoreError(
            f"{run_dir} is a file, not a run directory; pass the directory that holds "
            f"{SOCIETY_FILE} (or a new path for Society.create)"
        )


def read_doc(run_dir: Path, name: str) -> dict[str, Any] | None:
    """A society JSON file, ``None`` if absent; a clear error naming it if damaged."""
    path = run_dir / name
    try:
        doc = read_json(path)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        doc, problem = None, f"is not valid JSON ({exc})"
    else:
        if doc is None or isinstance(doc, dict):
            return doc
        problem = f"holds a {type(doc).__name__}, not a JSON object"
    # Both files are only ever replaced by an atomic rename, so a damaged one was cut or
    # edited outside agentlab (disk full, an interrupted copy, a manual edit).
    recover = (
        "it is written once at create: restore it from a copy of the run (run.json has "
        "the same configuration), or create the society again"
        if name == SOCIETY_FILE
        else "it is the commit record (tick, log offsets, env checkpoint): restore it from "
        "a copy of the run, or create the society again"
    )
    raise CorruptRecordError(
        f"{path} {problem}; {recover}. The log stays readable with "
        f"agentlab.open_run({str(run_dir)!r})"
    )


def agent_versions(
    run_dir: Path, agent_ids: Iterable[str], tick: int
) -> Iterator[tuple[str, int, Any]]:
    """``(agent_id, version tick, state)`` of each agent as of ``tick``.

    From ``checkpoints/<tick>/agents.jsonl`` when kept, else from the agents' state slots
    (which hold the last two versions, so this works for the last committed tick).
    """
    snap = run_dir / CHECKPOINTS_DIR / str(tick) / AGENTS_FILE
    if snap.exists():
        for line in snap.read_bytes().splitlines():
            doc = orjson.loads(line)
            yield doc["agent_id"], int(doc["tick"]), doc["value"]
        return
    yield from _slot_versions(run_dir, agent_ids, tick)


def write_tick_checkpoint(run_dir: Path, step: dict[str, Any], agent_ids: list[str]) -> None:
    """Keep tick ``step["tick"]``: its commit record and every agent's state version.

    Written before the commit itself, so a kill in between leaves a checkpoint of an
    uncommitted tick, which :func:`drop_stale_checkpoints` removes on resume.
    """
    tick = int(step["tick"])
    d = run_dir / CHECKPOINTS_DIR / str(tick)
    lines = [
        orjson.dumps({"agent_id": a, "tick": v, "value": value}, option=orjson.OPT_SORT_KEYS)
        for a, v, value in _slot_versions(run_dir, agent_ids, tick)
    ]
    atomic_write_bytes(d / AGENTS_FILE, b"\n".join(lines) + b"\n", fsync=False)
    atomic_write_json(d / STEP_FILE, step, fsync=False, compact=True)  # as the commit


def _slot_versions(
    run_dir: Path, agent_ids: Iterable[str], tick: int
) -> Iterator[tuple[str, int, Any]]:
    store = open_agent_store(run_dir)
    for agent_id in agent_ids:
        ws = Workspace(store, agent_id)
        slots = [ws.read_bytes(k) for k in SLOT_KEYS]
        _, version, value = pick_version(slots, tick, where=f"of {agent_id!r} ({ws.path})")
        yield agent_id, version, value
