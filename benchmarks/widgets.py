"""Society throughput with and without the live widgets attached (same config, interleaved).

    python benchmarks/widgets.py            # full
    python benchmarks/widgets.py --quick    # < 1 minute
    python benchmarks/widgets.py --json out.json

"with widgets" = ``agentlab.viz.show(run_dir)`` following the run in the same process at
the default 20 frames/s (SocietyView, ConversationView, IATHistogram, HumanInput): the
follower threads tail the log, fold rows and serialise every frame's state (outside a
kernel nothing is put on the wire, but the state is still built and encoded).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("AGENTLAB_PROGRESS", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _trial(agents: int, ticks: int, widgets: bool, seed: int) -> dict[str, float]:
    from agentlab.runtime import Society

    run_dir = Path(tempfile.mkdtemp(prefix="agentlab-bench-widgets-")) / "run"
    soc = Society.create(run_dir, agents=agents, llm="sim/instant", seed=seed, progress=False)
    dash = None
    if widgets:
        from agentlab.viz import show

        dash = show(run_dir)
    t0 = time.perf_counter()
    out = asyncio.run(soc.run(ticks=ticks))
    wall = time.perf_counter() - t0
    frames = 0
    if dash is not None:
        time.sleep(0.3)  # let the followers catch up, then count what they sent
        frames = sum(w.frame for w in dash.parts)
        ticks_seen = dash.society.summary.get("tick")
        dash.stop()
        assert ticks_seen == soc.tick, (ticks_seen, soc.tick)
    soc.close()
    return {"steps_per_s": out["steps"] / wall, "wall_s": wall, "frames": frames}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)  # e.g. generated personas
    agents, ticks, reps = (50, 20, 3) if args.quick else (100, 30, 5)
    _trial(10, 2, True, 0)  # warm imports for both arms
    res: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    for rep in range(reps):  # interleaved, so drift on a shared box hits both arms
        for arm in ("without", "with") if rep % 2 == 0 else ("with", "without"):
            res[arm].append(_trial(agents, ticks, arm == "with", seed=rep))
    med = {a: statistics.median(r["steps_per_s"] for r in rs) for a, rs in res.items()}
    ratio = med["with"] / med["without"]
    print(f"society: {agents} agents x {ticks} ticks, sim/instant, local executor, {reps} reps")
    print(f"{'arm':<16}{'steps/s (median)':>18}{'runs':>30}{'frames':>10}")
    for arm in ("without", "with"):
        runs = " ".join(f"{r['steps_per_s']:.0f}" for r in res[arm])
        frames = statistics.median(r["frames"] for r in res[arm])
        print(f"{arm + ' widgets':<16}{med[arm]:>18.1f}{runs:>30}{frames:>10.0f}")
    print(f"throughput with/without: {ratio:.3f}  (cost {100 * (1 - ratio):.1f}%, target <= 10%)")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "agents": agents,
                    "ticks": ticks,
                    "reps": reps,
                    "median": med,
                    "ratio": ratio,
                    "trials": res,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
