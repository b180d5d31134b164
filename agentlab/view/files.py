"""The runs folder as the browser sees it: what is a run, a sweep, a paper; safe paths.

Nothing here follows a symbolic link: a link inside the runs folder is neither listed nor
served nor copied into a bundle (it could point anywhere on the machine). Paths come in
URL-decoded and relative to the root; :func:`resolve` refuses any that leave it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Entry",
    "change_marker",
    "find_entries",
    "marker_token",
    "read_doc",
    "resolve",
    "tree_marker",
]

#: how deep under the root runs are looked for (a sweep's point holds runs of its own)
DEPTH = 6


@dataclass(frozen=True)
class Entry:
    """One run directory under the root: ``rel`` (POSIX path from the root, "" for the
    root itself), ``kind`` (manifest kind, or ``sweep`` / ``paper``), ``parent`` (the rel
    of the sweep or paper that holds it, or None)."""

    rel: str
    path: Path
    kind: str
    parent: str | None = None
    manifest: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def read_doc(path: Path) -> dict[str, Any]:
    """A JSON object file, or ``{}`` when it is missing, unreadable or not an object."""
    try:
        if path.is_symlink():
            return {}
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


#: run.json path -> (stamp, manifest): a walk re-reads only manifests that changed, so
#: following a folder of hundreds of runs costs a few ``stat`` calls per run
_MANIFESTS: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}


def _manifest(path: Path) -> dict[str, Any]:
    stamp = _stamp(path)
    hit = _MANIFESTS.get(str(path))
    if hit is not None and hit[0] == stamp:
        return hit[1]
    doc = read_doc(path)
    _MANIFESTS[str(path)] = (stamp, doc)
    return doc


def _kind(d: Path, manifest: dict[str, Any]) -> str:
    if (d / "sweep.json").is_file():
        return "sweep"
    kind = manifest.get("kind")
    if kind == "topology_experiment":
        return "experiment"
    return str(kind or "run")


def find_entries(root: Path) -> list[Entry]:
    """Every run directory (a ``run.json``) under ``root``, sweeps and papers included,
    with the runs inside them (their ``parent`` set); symlinks are skipped."""
    found: list[Entry] = []

    def walk(d: Path, rel: str, level: int, parent: str | None) -> None:
        manifest_file = d / "run.json"
        if manifest_file.is_file() and not manifest_file.is_symlink():
            m = _manifest(manifest_file)
            e = Entry(rel, d, _kind(d, m), parent, m)
            found.append(e)
            if e.kind not in ("sweep", "paper"):
                return  # a run's own folders hold no runs
            parent = rel
        if level >= DEPTH:
            return
        try:
            subs = sorted(os.scandir(d), key=lambda s: s.name)
        except OSError:
            return
        for s in subs:
            if s.name.startswith(".") or s.is_symlink() or not s.is_dir(follow_symlinks=False):
                continue
            if s.name in ("agents", "replay", "trace", "env", "llm_cache"):
                continue  # the insides of a run
            walk(Path(s.path), f"{rel}/{s.name}" if rel else s.name, level + 1, parent)

    walk(root, "", 0, None)
    return found


def resolve(root: Path, rel: str) -> Path | None:
    """``root/rel`` if it exists without passing a symlink or leaving ``root``, else None."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    d = root
    for p in parts:
        d = d / p
        if d.is_symlink() or not d.exists():
            return None
    try:
        d.resolve().relative_to(root.resolve())
    except ValueError:
        return None
    return d


def _stamp(p: Path) -> tuple[int, int]:
    try:
        st = p.stat()
    except OSError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


#: files a driver rewrites or appends to when a run makes progress: the manifest (status),
#: the society's committed step, an experiment's finished runs, a point's status
_MARKS = ("run.json", "SOCIETY_STEP.json", "status.json", "sweep.json")
_MARK_DIRS = ("replay/experiment_runs", "replay/timeline")


def change_marker(d: Path) -> tuple[Any, ...]:
    """A value that changes when run ``d`` commits progress (a tick, a finished
    experiment run, a status change) and stays the same while it is idle: a few ``stat``
    calls, no read."""
    out: list[Any] = [_stamp(d / name) for name in _MARKS]
    for sub in _MARK_DIRS:
        try:
            out += [(s.name, _stamp(Path(s.path))) for s in os.scandir(d / sub)]
        except OSError:
            pass
    return tuple(out)


def tree_marker(root: Path) -> tuple[Any, ...]:
    """:func:`change_marker` of every run under ``root`` (and the set of runs)."""
    return tuple((e.rel, change_marker(e.path)) for e in find_entries(root))


def marker_token(marker: tuple[Any, ...]) -> str:
    """A short text for a change marker (a page carries the one it was rendered at)."""
    return hashlib.sha1(repr(marker).encode()).hexdigest()[:16]
