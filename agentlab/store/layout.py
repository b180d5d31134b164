"""Run-directory layout of the run log: paths, shard names, name validation.

```
<run>/run.json                          manifest (agentlab.store.manifest)
<run>/replay/_schema.json               dataset catalog
<run>/replay/<dataset>/<shard>.jsonl    append-only rows, one shard per writing process
<run>/replay/<dataset>/_compact.parquet optional compaction (see Run.compact)
<run>/trace/<shard>.jsonl               finished spans
<run>/trace/_compact.parquet            optional compaction of the spans
```
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from agentlab.errors import ConfigError

__all__ = [
    "COMPACT_NAME",
    "REPLAY_DIR",
    "SCHEMA_NAME",
    "SPANS",
    "TRACE_DIR",
    "default_shard_name",
    "log_shards",
    "shard_files",
    "validate_dataset",
    "validate_shard",
]

REPLAY_DIR = "replay"
TRACE_DIR = "trace"
SCHEMA_NAME = "_schema.json"
COMPACT_NAME = "_compact.parquet"
#: reserved dataset name under which readers expose the trace spans
SPANS = "spans"

# Used with fullmatch: "$" would also accept a trailing newline ("a\n").
_DATASET = re.compile(r"[a-z][a-z0-9_]{0,63}")
_SHARD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def validate_dataset(name: str) -> str:
    """Return ``name`` if it is a valid dataset name (a plain SQL identifier), else raise."""
    if not isinstance(name, str) or not _DATASET.fullmatch(name):
        raise ConfigError(
            f"invalid dataset name {name!r}: use 1-64 characters from [a-z0-9_], "
            "starting with a letter (it becomes a directory and a SQL view name)"
        )
    if name == SPANS:
        raise ConfigError(f"dataset name {SPANS!r} is reserved for the trace spans")
    return name


def validate_shard(name: str) -> str:
    """Return ``name`` if it is safe as a single file-name stem, else raise."""
    if not isinstance(name, str) or not _SHARD.fullmatch(name) or name in {".", ".."}:
        raise ConfigError(
            f"invalid shard name {name!r}: use 1-128 characters from [A-Za-z0-9_.-], "
            "starting with a letter or digit"
        )
    return name


def default_shard_name() -> str:
    """``<hostname>-<pid>`` for the current process (hostname sanitised)."""
    host = re.sub(r"[^A-Za-z0-9_.\-]", "_", socket.gethostname() or "host").lstrip(".-_")
    return f"{host[:64] or 'host'}-{os.getpid()}"


def shard_files(directory: Path) -> list[Path]:
    """The ``*.jsonl`` shards in ``directory``, sorted by name (empty if it is missing)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return [directory / n for n in sorted(names) if n.endswith(".jsonl") and n[0] != "."]


def log_shards(run_dir: Path) -> list[tuple[str, Path]]:
    """``(dataset, shard)`` for every shard of a run's log: the trace's (as :data:`SPANS`),
    then each replay dataset's, each sorted by name."""
    out = [(SPANS, p) for p in shard_files(run_dir / TRACE_DIR)]
    replay = run_dir / REPLAY_DIR
    if replay.is_dir():
        for d in sorted(replay.iterdir()):
            if d.is_dir():
                out.extend((d.name, p) for p in shard_files(d))
    return out
