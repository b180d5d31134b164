"""Society throughput on one vs two Ray nodes, with and without a shared filesystem.

Each configuration runs its driver in a fresh subprocess: ``counter`` agents on
``sim/instant`` with one LLM call per step (CPU-bound: no simulated latency to hide
overhead behind), ``--ticks`` ticks, batches of ``N / 8`` agents. Configurations:

* ``local``: the local executor (the reference);
* ``ray 1 node``: a throw-away head with 1 CPU (``tests/runtime/ray_cluster.py``);
* ``ray 2 nodes``: head + a second node (1 CPU each), both seeing the run directory;
* ``ray 2 nodes, no shared fs``: the second node in its own mount namespace with the
  run's parent hidden under an empty tmpfs (needs root and ``unshare``).

    python benchmarks/ray_nodes.py                 # N = 2000, 3 ticks
    python benchmarks/ray_nodes.py --quick         # N = 500, 2 ticks
    python benchmarks/ray_nodes.py --agents 500 --ticks 2
    python benchmarks/ray_nodes.py --json out.json

On a 2-core machine the two "nodes" share the same two cores with the driver, so this
shows correctness and per-batch overhead (segments shipped, rows returned, driver commits),
not a speed-up. Every configuration's committed agent states are compared with local's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

_DRIVER = r"""
import json, sys, time
path, address, cfg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ticks = cfg.pop("ticks")
from agentlab.runtime import Society
options = {}
if address:
    import ray
    from agentlab.runtime.ray_init import ensure_ray
    ensure_ray(address)
    want = int(cfg.pop("nodes"))
    deadline = time.monotonic() + 90
    while sum(n["Alive"] for n in ray.nodes()) < want and time.monotonic() < deadline:
        time.sleep(0.2)
    options = {"address": address}
else:
    cfg.pop("nodes")
t0 = time.perf_counter()
s = Society.create(path, progress=False, executor_options=options or None, **cfg)
create_s = time.perf_counter() - t0
s.run_sync(ticks=1)  # warm-up: worker processes start, imports
out = s.run_sync(ticks=ticks)
states = s.agent_states()
nodes = dict(getattr(s.executor, "batch_nodes", {}))
s.close()
print("RESULT " + json.dumps({"create_s": create_s, "wall_s": out["wall_s"],
      "steps": out["steps"], "steps_per_s": out["steps_per_s"], "nodes": len(nodes),
      "batches_per_node": sorted(nodes.values()), "states": states}), flush=True)
"""


def _drive(path: Path, address: str, cfg: dict[str, Any], env: dict[str, str] | None) -> Any:
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(path), address, json.dumps(cfg)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError((proc.stdout + proc.stderr)[-3000:])
    return json.loads(lines[-1][7:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 500, 2 ticks")
    ap.add_argument("--agents", type=int, default=None, help="agents (2000)")
    ap.add_argument("--ticks", type=int, default=None, help="ticks (3)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    args.agents = args.agents or (500 if args.quick else 2000)
    args.ticks = args.ticks or (2 if args.quick else 3)
    from tests.runtime.ray_cluster import can_isolate, two_node_cluster

    base: dict[str, Any] = {
        "agents": [{"type": "counter", "n": args.agents, "config": {"llm_calls": 1}}],
        "llm": "sim/instant",
        "seed": 11,
        "batch_size": max(1, args.agents // 8),
        "ticks": args.ticks,
    }
    tmp = Path(tempfile.mkdtemp(prefix="ray-nodes-"))
    rows: list[dict[str, Any]] = []
    try:
        configs: list[tuple[str, str, int, bool]] = [
            ("local", "local", 1, False),
            ("ray 1 node", "ray", 1, False),
            ("ray 2 nodes", "ray", 2, False),
        ]
        if can_isolate():
            configs.append(("ray 2 nodes, no shared fs", "ray", 2, True))
        for i, (name, executor, nodes, isolate) in enumerate(configs):
            hidden = tmp / f"runs{i}"
            hidden.mkdir()
            cfg = {**base, "executor": executor, "nodes": nodes}
            if executor == "local":
                res = _drive(hidden / "run", "", cfg, None)
            else:
                with two_node_cluster(
                    tmp / f"cluster{i}", hide=[hidden] if isolate else None, second=nodes == 2
                ) as cluster:
                    res = _drive(hidden / "run", cluster.address, cfg, cluster.env)
            res["name"] = name
            rows.append(res)
            print(f"{name}: {res['steps_per_s']:.0f} agent-steps/s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ref = rows[0]["states"]
    print(f"\nN = {args.agents}, {args.ticks} ticks after a warm-up tick, batches of "
          f"{base['batch_size']}, sim/instant, 1 call per step")  # fmt: skip
    print("| configuration | agent-steps/s | wall s | nodes used | batches per node | "
          "states equal local |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {r['steps_per_s']:.0f} | {r['wall_s']:.2f} | "
              f"{r['nodes'] or '-'} | {r['batches_per_node'] or '-'} | "
              f"{r['states'] == ref} |")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: v for k, v in r.items() if k != "states"} for r in rows], f, indent=1)


if __name__ == "__main__":
    main()
