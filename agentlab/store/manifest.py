"""The run manifest ``<run>/run.json``: what ran, with which code, config and seed.

Versions come from ``importlib.metadata`` (nothing heavy is imported); the git revision is
read only if the agentlab sources sit in a git checkout, and never makes this fail.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata as md
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentlab.store.atomic import atomic_write_json, read_json

__all__ = [
    "MANIFEST_NAME",
    "MANIFEST_SCHEMA_VERSION",
    "finish_manifest",
    "iso_time",
    "read_manifest",
    "write_manifest",
]

MANIFEST_NAME = "run.json"
MANIFEST_SCHEMA_VERSION = 1
_DEPENDENCIES = (
    "duckdb", "litellm", "numpy", "orjson", "pandas", "plotly", "pyarrow", "pydantic", "ray",
)  # fmt: skip


def iso_time(ts: float) -> str:
    """``ts`` (epoch seconds) as the manifest's ISO time (UTC, milliseconds)."""
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")


_iso = iso_time


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)  # one git call per process (it costs ~0.1-0.7 s here)
def _git_info() -> dict[str, Any] | None:
    src = Path(__file__).resolve().parents[2]
    if not (src / ".git").exists():
        return None
    try:
        rev = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
        # `git diff` compares content through the clean filters (.gitattributes): a
        # notebook that was only executed is not a change; `git status` would flag it
        # until the next `git add` because its size changed
        dirty = subprocess.run(
            ["git", "-C", str(src), "diff", "--name-only", "HEAD"],
            capture_output=True, text=True, timeout=5, check=False,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return {"revision": rev or None, "dirty": bool(dirty)}


def _plain(obj: Any) -> Any:
    """Config objects (dataclass, pydantic, ``to_dict``) → JSON-able values."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if callable(getattr(obj, "to_dict", None)):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return obj


def _find(config: Any, params: Mapping[str, Any], key: str) -> Any:
    for source in (params, config if isinstance(config, Mapping) else {}):
        if key in source:
            return source[key]
    llm = config.get("llm") if isinstance(config, Mapping) else None
    if isinstance(llm, Mapping):
        return llm.get(key)
    if isinstance(llm, str) and key == "model":  # (``config={"llm": "sim/instant"}``)
        return llm
    return None


def write_manifest(
    run_dir: str | os.PathLike[str],
    *,
    kind: str,
    config: Any,
    seed: int | None,
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``run.json`` for a run that is starting; returns the document.

    On resume (``run.json`` exists) ``created`` is kept and the start is appended to
    ``starts``.

    Args:
        run_dir: the run directory (created if missing).
        kind: what kind of run (``"society"``, ``"sweep"``, ``"experiment"``...).
        config: the run's configuration (mapping, dataclass, pydantic model).
        seed: the root seed.
        params: notebook/sweep parameters.
    """
    root = Path(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    now = time.time()
    old = read_json(root / MANIFEST_NAME, default=None)
    cfg, prm = _plain(config), _plain(dict(params or {}))
    doc: dict[str, Any] = {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "kind": kind,
        "agentlab_version": _version("agentlab") or _agentlab_version(),
        "git": dict(g) if (g := _git_info()) else None,
        "config": cfg,
        "params": prm,
        "seed": seed,
        "model": _find(cfg, prm, "model"),
        "profile": _find(cfg, prm, "profile"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "dependencies": {d: _version(d) for d in _DEPENDENCIES},
        "created": old.get("created", _iso(now)) if isinstance(old, dict) else _iso(now),
        "started": _iso(now),
        "ended": None,
        "status": "running",
        "starts": [*(old.get("starts", []) if isinstance(old, dict) else []), _iso(now)],
    }
    atomic_write_json(root / MANIFEST_NAME, doc)
    return doc


def _agentlab_version() -> str:
    from agentlab import __version__

    return __version__


def finish_manifest(
    run_dir: str | os.PathLike[str], status: str = "ok", **extra: Any
) -> dict[str, Any]:
    """Mark the run ended with ``status`` (``ok``, ``error``, ``interrupted``...)."""
    path = Path(run_dir) / MANIFEST_NAME
    doc = read_json(path, default=None) or {"schema_version": MANIFEST_SCHEMA_VERSION}
    doc.update(extra)
    doc["ended"], doc["status"] = _iso(time.time()), status
    atomic_write_json(path, doc)
    return doc


def read_manifest(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """``run.json`` as a dict (empty if the run has none)."""
    doc = read_json(Path(run_dir) / MANIFEST_NAME, default=None)
    return doc if isinstance(doc, dict) else {}
