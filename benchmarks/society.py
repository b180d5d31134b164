"""Society throughput: agent-steps/s, wall per tick, peak RSS, bytes on disk per agent.

Each configuration (N agents x executor) runs in a fresh subprocess with ``sim/instant``
and ``counter`` agents making exactly one LLM call per step (so every step also writes one
``llm_calls`` row, one ``agent_states`` row, one span and one state file). Creation is
timed separately from stepping; Ray start-up is excluded (reported as ``ray_init_s``).

    python benchmarks/society.py            # N = 1k, 10k, 100k; local and ray
    python benchmarks/society.py --quick    # N = 1k, 10k; local and ray (< 1 min idle box)
    python benchmarks/society.py --quick --no-ray --profile   # + pyinstrument of 10k local
    python benchmarks/society.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _disk_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return total


def _one(n: int, executor: str, ticks: int, root: str, profile: str | None) -> dict[str, Any]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from agentlab.runtime import Society

    run = Path(root) / f"society-{executor}-{n}"
    shutil.rmtree(run, ignore_errors=True)
    ray_init = 0.0
    options: dict[str, Any] = {}
    if executor == "ray":
        import ray

        t = time.perf_counter()
        ray.init(
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
            configure_logging=False,
        )
        ray_init = time.perf_counter() - t
    t = time.perf_counter()
    s = Society.create(
        run,
        agents=[{"type": "counter", "n": n, "config": {"llm_calls": 1}}],
        llm="sim/instant",
        seed=0,
        executor=executor,
        progress=False,
        executor_options=options,
    )
    create_s = time.perf_counter() - t
    s.run_sync(ticks=1)  # warm-up tick: imports, first file opens, Ray worker start
    prof = None
    if profile:
        from pyinstrument import Profiler

        prof = Profiler()
        prof.start()
    t = time.perf_counter()
    out = s.run_sync(ticks=ticks)
    wall = time.perf_counter() - t
    if prof is not None:
        prof.stop()
        Path(profile).write_text(prof.output_text(unicode=False, color=False, show_all=False))
    s.close()
    assert out["steps"] == n * ticks and out["llm_calls"] == n * ticks, out
    agents_bytes = _disk_bytes(run / "agents")
    return {
        "n": n,
        "executor": executor,
        "ticks": ticks,
        "steps_per_s": n * ticks / wall,
        "llm_calls_per_s": out["llm_calls"] / wall,
        "wall_per_tick_s": wall / ticks,
        "create_s": create_s,
        "ray_init_s": ray_init,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "agent_bytes_per_agent": agents_bytes / n,
        "run_bytes_per_agent": _disk_bytes(run) / n,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="N = 1k and 10k only")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray executor")
    ap.add_argument("--ticks", type=int, default=None, help="timed ticks (default 2; quick 1)")
    ap.add_argument("--dir", default=None, help="where runs go (default: a temp dir)")
    ap.add_argument("--profile", default=None, help="write a pyinstrument profile of 10k local")
    ap.add_argument("--json", default=None, help="write the figures to this path")
    ap.add_argument("--one", nargs=2, metavar=("N", "EXECUTOR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    ticks = args.ticks or (1 if args.quick else 2)
    root = args.dir or tempfile.mkdtemp(prefix="agentlab-bench-")
    if args.one:
        n, ex = int(args.one[0]), args.one[1]
        prof = args.profile if (n == 10_000 and ex == "local") else None
        print(json.dumps(_one(n, ex, ticks, root, prof)))
        return 0
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    executors = ["local"] if args.no_ray else ["local", "ray"]
    rows: list[dict[str, Any]] = []
    for n in sizes:
        for ex in executors:
            cmd = [
                sys.executable,
                __file__,
                "--one",
                str(n),
                ex,
                "--ticks",
                str(ticks),
                "--dir",
                root,
            ] + (["--profile", args.profile] if args.profile else [])
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"N={n} {ex}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            shutil.rmtree(Path(root) / f"society-{ex}-{n}", ignore_errors=True)
    head = (
        f"{'N':>7} {'executor':>8} {'steps/s':>9} {'s/tick':>8} {'create s':>9} "
        f"{'peak RSS MB':>11} {'B/agent (ws)':>12} {'B/agent (run)':>13}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['n']:>7} {r['executor']:>8} {r['steps_per_s']:>9.0f} "
            f"{r['wall_per_tick_s']:>8.2f} {r['create_s']:>9.1f} {r['peak_rss_mb']:>11.0f} "
            f"{r['agent_bytes_per_agent']:>12.0f} {r['run_bytes_per_agent']:>13.0f}"
        )
    local = {r["n"]: r for r in rows if r["executor"] == "local"}
    for r in rows:
        if r["executor"] == "ray" and r["n"] in local:
            ratio = r["steps_per_s"] / local[r["n"]]["steps_per_s"]
            print(f"N={r['n']}: ray/local steps/s = {ratio:.2f} (ray init {r['ray_init_s']:.0f} s)")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; runs in {root}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "ticks": ticks}, indent=1))
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
