"""Crash-safe ticks: remember the log's size, and cut it back after a crash.

The society runtime calls, at each committed tick::

    flush every writer (driver and workers)      # nothing may sit in a buffer
    offsets = log_offsets(run_dir)               # {relpath: bytes}, stored with the tick

and on resume, *before any process writes again*::

    truncate_log(run_dir, offsets)

which truncates every replay/trace shard back to its recorded size and deletes shards
created later, so the log holds exactly what the committed ticks wrote. Compactions that
covered the dropped bytes are deleted too. Writers of this process drop their unflushed
rows and re-read their sequence numbers; writers in other processes must not be running.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentlab.store._writer import writers_for
from agentlab.store.layout import COMPACT_NAME, REPLAY_DIR, TRACE_DIR, shard_files

__all__ = ["log_offsets", "truncate_log"]


def _shards(root: Path) -> list[Path]:
    out = shard_files(root / TRACE_DIR)
    replay = root / REPLAY_DIR
    if replay.is_dir():
        for d in sorted(replay.iterdir()):
            if d.is_dir():
                out.extend(shard_files(d))
    return out


def log_offsets(run_dir: str | os.PathLike[str]) -> dict[str, int]:
    """Byte size of every replay and trace shard, keyed by POSIX path relative to the run.

    Call after flushing every writer, so every size ends on a line boundary.
    """
    root = Path(run_dir)
    return {p.relative_to(root).as_posix(): p.stat().st_size for p in _shards(root)}


def truncate_log(run_dir: str | os.PathLike[str], offsets: dict[str, int]) -> list[str]:
    """Cut the log back to ``offsets`` (from :func:`log_offsets`); returns changed paths."""
    root = Path(run_dir)
    for w in writers_for(root):
        w.reset()
    changed: list[str] = []
    for p in _shards(root):
        rel = p.relative_to(root).as_posix()
        keep = offsets.get(rel)
        if keep is None:
            p.unlink()
        elif p.stat().st_size > keep:
            os.truncate(p, keep)
        else:
            continue
        changed.append(rel)
        stale = p.parent / COMPACT_NAME
        if stale.exists():
            stale.unlink()
    return changed
