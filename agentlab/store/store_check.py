"""Is a run's agent store there and as new as the run's commit? Checked when a run opens.

A society's commit record (``SOCIETY_STEP.json``) says tick ``t`` is committed; the agents'
states of ``t`` live in the agent store. If that store was deleted (``agents.sqlite``,
``agents/``) or lost its newest writes (``agents.sqlite-wal`` deleted or replaced while
the run was not closed), stepping the run would fail every agent (or, worse, step agents
from older states) and commit that as a tick. :func:`check_agent_store` refuses such a run
at open, naming the file:

- directory store: ``<run>/agents/`` must exist and hold a folder per agent;
- packed store: ``<run>/agents.sqlite`` must exist, and the tick it records as written
  (``PackedStore.mark_committed``, set by every commit) must be at least the committed
  tick. Runs written before the mark existed are checked for holding any agent at all.

Nothing is written: the packed file is opened read-only.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from agentlab.errors import CorruptRecordError, StoreError
from agentlab.store.packed_store import PACKED_FILE

__all__ = ["check_agent_store"]

_RESTORE = "restore it from a copy of the run (the log stays readable with agentlab.open_run)"


def check_agent_store(
    run_dir: str | os.PathLike[str],
    agent_ids: Sequence[str],
    tick: int,
    kind: str | None = None,
) -> None:
    """Raise if the agent store of ``run_dir`` cannot hold the states of committed ``tick``.

    Args:
        run_dir: the run directory.
        agent_ids: every agent of the run.
        tick: the committed tick.
        kind: ``"packed"`` or ``"directory"`` as recorded at create (``None``: unknown),
            to name the missing file when the run has neither store.

    Raises:
        StoreError: the store is missing (the message names the file or folder).
        CorruptRecordError: the store is older than the commit, or agents are missing.
    """
    run = Path(run_dir)
    packed, dirs = run / PACKED_FILE, run / "agents"
    # the store in use is the one whose file is there (as ``open_agent_store`` decides: a
    # packed run exported to ``agents/`` with ``export_dirs`` runs on as a directory run);
    # the kind recorded at create only says which one is missing when neither is
    if packed.exists() or (kind == "packed" and not dirs.exists()):
        _check_packed(packed, len(agent_ids), tick)
    else:
        _check_dirs(dirs, agent_ids)


def _check_dirs(root: Path, agent_ids: Sequence[str]) -> None:
    if not agent_ids:
        return
    try:
        present = set(os.listdir(root))
    except FileNotFoundError:
        raise StoreError(
            f"{root} is missing: the folder of the run's agent workspaces (every agent's "
            f"state) was deleted or moved; {_RESTORE}"
        ) from None
    missing = [a for a in agent_ids if a not in present]
    if missing:
        raise CorruptRecordError(
            f"{root}: {len(missing)} of {len(agent_ids)} agents have no workspace (first: "
            f"{root / missing[0]}); they were deleted outside agentlab; {_RESTORE}"
        )


def _check_packed(path: Path, n_agents: int, tick: int) -> None:
    if not path.is_file():
        raise StoreError(
            f"{path} is missing: the run's packed agent store (every agent's state) was "
            f"deleted or moved; {_RESTORE}"
        )
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=60.0)
    except sqlite3.Error as exc:
        raise CorruptRecordError(f"{path} cannot be opened ({exc}); {_RESTORE}") from exc
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        mark = None
        if "stamp" in tables:
            row = db.execute("SELECT tick FROM stamp WHERE name='committed'").fetchone()
            mark = None if row is None else int(row[0])
        any_agent = "kv" in tables and db.execute("SELECT 1 FROM kv LIMIT 1").fetchone()
    except sqlite3.Error as exc:
        raise CorruptRecordError(
            f"{path} is not a readable agent store ({exc}); {_RESTORE}"
        ) from exc
    finally:
        db.close()
    wal = path.with_name(path.name + "-wal")
    if mark is not None and mark < tick:
        raise CorruptRecordError(
            f"{path} holds agent states up to tick {mark}, but the run committed tick "
            f"{tick}: the newer states were in its write-ahead log {wal}, which was deleted "
            f"or replaced while the run was open; restore both files from a copy of the run "
            "(the log stays readable with agentlab.open_run)"
        )
    if mark is None and n_agents and not any_agent:
        raise CorruptRecordError(
            f"{path} holds no agents, but the run has {n_agents}: its write-ahead log {wal} "
            f"(where a small run's states live until the store is closed) was deleted or "
            f"replaced; {_RESTORE}"
        )
