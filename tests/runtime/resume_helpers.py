"""Strict run comparison for the resume guarantee: everything but where a row was written.

Two runs of one seed under the virtual clock must agree on every committed agent state
file, the committed env checkpoint, the learned LLM state in the commit, and every log
row with **all** its columns — timing (``start``, ``end``, ``first_token``, ``ts``,
``queue_wait``, ``aimd_limit``, ``in_flight``) and request ids included. Only these
columns are left out, and why:

- ``_shard``: the name of the writing process's shard (``<host>-<pid>``); a resumed run
  is written by another process by design.
- ``_seq``: the row's position inside that shard (restarts in the new shard).
- ``wall_s``: wall-clock seconds a tick took on this machine (not virtual time).
- ``latency_s`` (``env_requests``): wall-clock seconds a router request took.

Trace spans are compared the same way, with all their timing, minus their random ids
(``trace_id``, ``span_id``, ``parent``: random on purpose, from a per-process generator
seeded by ``os.urandom``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

#: the only columns a resumed run may differ in (see the module docstring)
# traceback: where an error was raised is diagnostic text; its frames differ by executor
# (a Ray worker's vclock_worker frames, a local run's own), not by what the run did
WALL_OR_STORAGE_ONLY = frozenset({"_shard", "_seq", "wall_s", "traceback", "latency_s"})
SPAN_IDS = frozenset({"trace_id", "span_id", "parent"})


def strict_rows(run_dir: Path) -> dict[str, Counter[str]]:
    """Every replay row per dataset as a multiset of canonical JSON (see module docs)."""
    out: dict[str, Counter[str]] = {}
    for d in sorted((run_dir / "replay").iterdir()):
        if not d.is_dir():
            continue
        rows: Counter[str] = Counter()
        for f in sorted(d.glob("*.jsonl")):
            for line in f.read_bytes().splitlines():
                row = json.loads(line)
                keep = {k: v for k, v in row.items() if k not in WALL_OR_STORAGE_ONLY}
                rows[json.dumps(keep, sort_keys=True)] += 1
        out[d.name] = rows
    return out


def strict_spans(run_dir: Path) -> Counter[str]:
    """Every span with its timing and attributes, random ids left out, as a multiset."""
    c: Counter[str] = Counter()
    drop = WALL_OR_STORAGE_ONLY | SPAN_IDS
    for f in sorted((run_dir / "trace").glob("*.jsonl")):
        for line in f.read_bytes().splitlines():
            span = json.loads(line)
            c[json.dumps({k: v for k, v in span.items() if k not in drop}, sort_keys=True)] += 1
    return c


def committed_files(run_dir: Path) -> dict[str, Any]:
    """Bytes of every committed state file: agent workspaces (diagnostic logs under
    ``.runtime/`` left out), the committed env checkpoint, and the commit itself minus
    its byte offsets and marks (keyed by shard names, which differ per process; their
    committed line counts per dataset are compared instead)."""
    step = json.loads((run_dir / "SOCIETY_STEP.json").read_bytes())
    files: dict[str, Any] = {}
    agents = run_dir / "agents"
    for p in sorted(agents.rglob("*")):
        rel = p.relative_to(agents).as_posix()
        if p.is_file() and "/.runtime/" not in f"/{rel}" and not p.name.endswith(".tmp"):
            files[f"agents/{rel}"] = p.read_bytes()
    for rel in step.get("env") or []:
        files[rel] = (run_dir / rel).read_bytes()
    # kept per-tick checkpoints (keep_checkpoints=True); without it an older env
    # checkpoint may outlive a kill right after the commit until the next open drops it
    if json.loads((run_dir / "SOCIETY.json").read_bytes()).get("keep_checkpoints"):
        for p in sorted((run_dir / "env" / "ticks").glob("*/*.json")):
            files[p.relative_to(run_dir).as_posix()] = p.read_bytes()
    for p in sorted((run_dir / "checkpoints").glob("*/*")):
        rel = p.relative_to(run_dir).as_posix()
        if p.name == "SOCIETY_STEP.json":
            doc = json.loads(p.read_bytes())
            files[rel] = {k: v for k, v in doc.items() if k not in ("offsets", "marks")}
        elif not p.name.endswith(".tmp"):
            files[rel] = p.read_bytes()
    files["SOCIETY_STEP.json"] = {k: v for k, v in step.items() if k not in ("offsets", "marks")}
    # offsets and marks are keyed by shard (process) name; their line counts must agree
    lines: Counter[str] = Counter()
    for rel, mark in (step.get("marks") or {}).items():
        lines[rel.rsplit("/", 1)[0]] += mark["lines"]
    files["committed lines per dataset"] = dict(lines)
    return files


def diff_summary(a: dict[str, Counter[str]], b: dict[str, Counter[str]]) -> str:
    """A short, readable account of how two :func:`strict_rows` results differ."""
    lines = []
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name, Counter()), b.get(name, Counter())
        if x != y:
            only_a, only_b = sorted((x - y).elements()), sorted((y - x).elements())
            lines.append(
                f"{name}: {len(only_a)} rows only in the reference, {len(only_b)} only in the "
                f"resumed run; e.g. {only_a[:1]} vs {only_b[:1]}"
            )
    return "\n".join(lines)


def run_in_new_process(script: str, *args: str) -> None:
    """Run ``python -c script *args`` in a fresh interpreter (random hash seed, no
    progress bars), from the repository root; fail with its stderr if it fails. Nothing
    survives in memory between two such parts of a run."""
    env = {**os.environ, "AGENTLAB_PROGRESS": "0", "PYTHONHASHSEED": "random"}
    r = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert r.returncode == 0, r.stderr[-3000:]


def dataset_rows(run: Path, dataset: str) -> list[dict[str, Any]]:
    """Every row of one replay dataset, as written (all shards)."""
    out = []
    for f in sorted((run / "replay" / dataset).glob("*.jsonl")):
        out.extend(json.loads(line) for line in f.read_bytes().splitlines())
    return out
