"""Build run directories on fixed seeds, or compare two such folders byte by byte.

A restructure that "changes no behaviour" must leave every run directory the same. This
script makes that checkable: ``build OUT`` writes a fixed set of runs under ``OUT`` (each
in a fresh interpreter with ``PYTHONHASHSEED=random``, so nothing can depend on hash order
or on state left in memory), ``compare A B`` lists every file that differs.

Runs built (all on fixed seeds, virtual clock where the driver has one):

- ``society``: LLM persona agents on ``social_feed`` that hand their intent to the env's
  ``codegen`` router (``env_mode="ask"``), ``sim/vllm-3b``, virtual clock, local executor;
  40 agents x 3 ticks, ~5 s for all three runs on the shared 2-core box (``--agents 200``
  for the size issue 25 names: ~10-20 s).
- ``topology``: an ``Experiment`` (star and full mesh, 3 agents, 2 runs each, 2 tasks).
- ``threads``: an ``AgentSystem`` on a SQLite thread store in the run directory with the
  deterministic ``ScriptedModel`` and one tool, 6 threads x 3 user turns.

Usage::

    python scripts/compare_runs.py build /tmp/base            # on the commit before
    python scripts/compare_runs.py build /tmp/after           # on the commit after
    python scripts/compare_runs.py compare /tmp/base /tmp/after  # exit 1 if any differ

The comparison is byte for byte, file by file, after renaming what the writing process
names by its pid (see ``ALLOWED``). Differences that are not wall-clock fields are listed
with the first differing line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: What two runs of one seed may differ in, and why. Nothing else is ignored: a file not
#: named here must match byte for byte, and in a file named here every other field must.
#: (Measured: two builds of one commit differ in exactly these and nothing else.)
#:
#: - **log shards** ``replay/<dataset>/<host>-<pid>.jsonl`` and ``trace/<host>-<pid>.jsonl``:
#:   the file name and the ``_shard`` column are the writing process's pid; ``_seq`` and
#:   the line order are the order in which concurrently running agents finished, which
#:   the codegen router's sandbox (real worker processes, real time) decides. A shard is
#:   therefore compared as a multiset of rows, each row minus:
#:   ``_shard``, ``_seq``; ``wall_s`` (wall-clock seconds of a tick or slice, also inside
#:   ``detail``); ``trace_id``/``span_id``/``parent`` (random span ids, per-process
#:   generator seeded by ``os.urandom``).
#: - ``process_metrics`` (topology experiment): the OS's measurements of the process,
#:   sampled on the wall clock, so how many rows there are and every value in them; only
#:   the dataset's presence is compared.
#: - ``env_requests.latency_s``: wall-clock seconds a router request took.
#: - ``replay/_schema.json``: each dataset's ``created`` (wall-clock registration time).
#: - ``run.json``: ``created``, ``started``, ``starts``, ``ended`` (wall clock) and ``git``
#:   (the commit the run was made with: the one thing that is meant to change).
#: - ``SOCIETY_STEP.json``: ``offsets`` and ``marks`` are keyed by shard file and hold the
#:   byte counts and CRCs of those files (pid in every row, row order as above); only each
#:   dataset's committed line count is compared.
#: - ``WRITER.lock`` / ``.schema.lock``: lock files holding the writer's pid.
#: - SQLite databases (``threads.db``) are compared by their dumped rows, not their pages.
ROW_FIELDS = frozenset({"_shard", "_seq", "wall_s", "trace_id", "span_id", "parent"})
DATASET_FIELDS = {"env_requests": frozenset({"latency_s"})}
WALL_SAMPLED = frozenset({"process_metrics"})
META_FIELDS = {
    "_schema.json": frozenset({"created"}),
    "run.json": frozenset({"created", "started", "starts", "ended", "git"}),
}
LOCKS = frozenset({"WRITER.lock", ".schema.lock"})
SHARD_NAME = re.compile(r"[A-Za-z0-9_.]+-\d+(?=\.jsonl$)")

SOCIETY = r"""
import sys
from agentlab import Society
from agentlab.llm import LLMClient
out, n, ticks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = Society.create(
    out, agents=[{"type": "llm", "n": n, "config": {"env_mode": "ask"}}],
    env=[{"type": "social_feed", "router": "codegen"}],
    llm=LLMClient("sim/vllm-3b", seed=11), clock="virtual", seed=11, batch_size=64,
    progress=False,
)
s.run_sync(ticks=ticks)
s.close()
"""

TOPOLOGY = r"""
import sys
from agentlab.topology import Experiment
tasks = [{"id": "a", "category": "x", "prompt": "sum two numbers"},
         {"id": "b", "category": "y", "prompt": "sort a list"}]
Experiment(topologies=["star", "full_mesh"], agents=3, runs=2, tasks=tasks, seed=5,
           progress=False, out=sys.argv[1]).run_sync()
"""

THREADS = r"""
import asyncio, sys
from pathlib import Path
from agentlab.core.clock import VirtualClock
from agentlab.runtime.threads import AgentSystem, ScriptedModel, SQLiteThreadStore, Tool

def work(ctx, args):
    return f"result of {ctx.call_id} for {ctx.thread_id}"

async def main(out):
    Path(out).mkdir(parents=True, exist_ok=True)
    system = AgentSystem(ScriptedModel(tool="work", seed=3),
                         SQLiteThreadStore(str(Path(out) / "threads.db")),
                         [Tool("work", work)], run_dir=out, token_budget=3000,
                         clock=VirtualClock())
    async with system:
        for turn in range(3):
            for t in range(6):
                system.send_user(f"t{t}", f"turn {turn} of t{t}", f"u{turn}")
            await system.drain()

asyncio.run(main(sys.argv[1]))
"""


def _child(code: str, *args: str) -> float:
    env = {**os.environ, "AGENTLAB_PROGRESS": "0", "PYTHONHASHSEED": "random"}
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, cwd=ROOT, capture_output=True, text=True
    )
    if r.returncode:
        raise SystemExit(f"run failed ({args[0]}):\n{r.stderr[-4000:]}")
    return time.perf_counter() - t0


def build(out: Path, agents: int, ticks: int) -> None:
    """Write the fixed runs under ``out`` (which must not exist yet)."""
    if out.exists():
        raise SystemExit(f"{out} exists: pick a new folder")
    out.mkdir(parents=True)
    for name, code, args in [
        ("society", SOCIETY, [str(agents), str(ticks)]),
        ("topology", TOPOLOGY, []),
        ("threads", THREADS, []),
    ]:
        s = _child(code, str(out / name), *args)
        print(f"built {name} in {s:.1f} s")


# ---------------------------------------------------------------- comparison


def _drop(obj: Any, fields: frozenset[str]) -> Any:
    if isinstance(obj, dict):
        return {k: _drop(v, fields) for k, v in obj.items() if k not in fields}
    if isinstance(obj, list):
        return [_drop(v, fields) for v in obj]
    return obj


def _shard_rows(p: Path) -> list[str]:
    if p.parent.name in WALL_SAMPLED:
        return []
    fields = ROW_FIELDS | DATASET_FIELDS.get(p.parent.name, frozenset())
    rows = []
    for line in p.read_bytes().splitlines():
        row = _drop(json.loads(line), fields)
        rows.append(json.dumps(row))
    return sorted(rows)


def _commit(p: Path) -> str:
    step = json.loads(p.read_bytes())
    lines = sorted((SHARD_NAME.sub("<shard>", k), v["lines"]) for k, v in step.pop("marks").items())
    del step["offsets"]
    return json.dumps({**step, "committed_lines": lines}, indent=1)


def _files(root: Path) -> dict[str, list[Path]]:
    """Relative path (a pid-named shard as ``<shard>.jsonl``) -> the files there."""
    out: dict[str, list[Path]] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in LOCKS and not p.name.endswith(("-wal", "-shm")):
            rel = SHARD_NAME.sub("<shard>", p.relative_to(root).as_posix())
            out.setdefault(rel, []).append(p)
    return out


def _text(ps: list[Path]) -> list[str]:
    """The comparable content of the files at one relative path (see ``ALLOWED``)."""
    p = ps[0]
    if SHARD_NAME.search(p.name):  # all shards of one dataset: one multiset of rows
        return sorted(r for q in ps for r in _shard_rows(q))
    if p.name == "SOCIETY_STEP.json":
        return _commit(p).splitlines()
    if p.name in META_FIELDS:
        return json.dumps(
            _drop(json.loads(p.read_bytes()), META_FIELDS[p.name]), indent=1
        ).splitlines()
    if p.suffix == ".db":
        return _dump_sqlite(p)
    return p.read_bytes().decode("utf-8", "backslashreplace").splitlines()


def _dump_sqlite(p: Path) -> list[str]:
    import sqlite3

    con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
    try:
        return list(con.iterdump())
    finally:
        con.close()


def compare(a: Path, b: Path) -> int:
    """Print every differing file of two built folders; return how many differ."""
    fa, fb = _files(a), _files(b)
    bad = 0
    for rel in sorted(fa.keys() | fb.keys()):
        if rel not in fa or rel not in fb:
            print(f"ONLY IN {'A' if rel in fa else 'B'}: {rel}")
            bad += 1
            continue
        if [p.read_bytes() for p in fa[rel]] == [p.read_bytes() for p in fb[rel]]:
            continue
        la, lb = _text(fa[rel]), _text(fb[rel])
        if la == lb:
            continue
        bad += 1
        i = next((k for k, (u, v) in enumerate(zip(la, lb, strict=False)) if u != v), None)
        print(
            f"DIFFERS: {rel} "
            + (f"(line {i + 1})" if i is not None else f"({len(la)} vs {len(lb)} lines)")
        )
        if i is not None:
            print(f"  A: {la[i][:300]}\n  B: {lb[i][:300]}")
    n = len(fa.keys() | fb.keys())
    print(f"{n} files compared, {bad} differ" + ("" if bad else ": identical"))
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the fixed runs into a new folder")
    b.add_argument("out", type=Path)
    b.add_argument("--agents", type=int, default=40, help="persona agents (issue size: 200)")
    b.add_argument("--ticks", type=int, default=3)
    c = sub.add_parser("compare", help="compare two built folders byte by byte")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "build":
        build(args.out, args.agents, args.ticks)
        return 0
    return 1 if compare(args.a, args.b) else 0


if __name__ == "__main__":
    sys.exit(main())
