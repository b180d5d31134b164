"""The paper-style coordination-topology run: 3 topologies x N runs x 4 agents on sim/vllm-3b.

Runs the AgentVerse-style workflow (``agentlab.topology.Experiment``) under the virtual
clock and prints the per-topology traffic table (``agentlab.analysis.traffic_summary_df``:
IAT mean/median/p95 and burst fraction over discussion-stage calls, calls and tokens per
run, latency and TTFT percentiles, call rate, mean in-flight) and the IAT fit table
(``agentlab.analysis.fits_df``: ranked by AIC). All topologies run in one process, side by
side, with the same seed.

    python benchmarks/topology.py [--quick] [--runs N] [--json PATH] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _scratch import scratch_path

TOPOLOGIES = ["sequential", "star", "full_mesh"]
TABLE_COLS = [
    "topology", "runs", "calls_per_run", "iat_mean", "iat_median", "iat_p95", "burst_fraction",
    "latency_p50", "latency_p95", "ttft_p50", "ttft_p95", "tokens_per_run", "call_rate",
    "mean_in_flight",
]  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="40 runs per topology (< 1 minute)")
    ap.add_argument("--runs", type=int, default=None, help="runs per topology (default 200)")
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="run directory (default: a temp dir)")
    ap.add_argument("--json", default=None, help="write the figures to this JSON file")
    args = ap.parse_args(argv)
    runs = args.runs or (40 if args.quick else 200)

    import pandas as pd

    from agentlab.analysis import fits_df, iat_df, traffic_summary_df
    from agentlab.topology import Experiment

    out = str(scratch_path(args.out, "agentlab-bench-topology-"))
    t0 = time.perf_counter()
    exp = Experiment(topologies=TOPOLOGIES, agents=args.agents, runs=runs, llm="sim/vllm-3b",
                     seed=args.seed, clock="virtual", out=out, progress=False)  # fmt: skip
    res = exp.run_sync()
    wall = time.perf_counter() - t0
    calls = res.calls_df()
    t1 = time.perf_counter()
    table = traffic_summary_df(calls)
    fits = fits_df(iat_df(calls))
    analysis_s = time.perf_counter() - t1

    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 30)
    cols = [c for c in TABLE_COLS if c in table.columns]
    print(f"\n{len(TOPOLOGIES)} topologies x {runs} runs x N={args.agents} on sim/vllm-3b, "
          f"virtual clock: {len(calls)} calls, {len(res.messages_df())} messages, "
          f"experiment {wall:.1f} s wall, analysis {analysis_s:.1f} s; run dir {out} (removed at exit unless --out)")  # fmt: skip
    print("\nper-topology traffic (IAT over discussion-stage calls; seconds, tokens, calls/s)")
    print(table[cols].round(3).to_string(index=False))
    fit_cols = [c for c in ("topology", "dist", "n", "aic", "delta_aic", "ks_stat", "ks_pvalue")
                if c in fits.columns]  # fmt: skip
    print("\nIAT fits (MLE, ranked by AIC within each topology)")
    print(fits[fit_cols].round(4).to_string(index=False))
    stages = calls.groupby(["topology", "stage"]).size().unstack(fill_value=0) / runs
    print("\nmean calls per run by stage")
    print(stages.round(2).to_string())

    figures = {
        "runs_per_topology": runs, "agents": args.agents, "calls": len(calls),
        "wall_s": wall, "analysis_s": analysis_s, "run_dir": out,
        "table": json.loads(table[cols].to_json(orient="records")),
        "fits": json.loads(fits[fit_cols].to_json(orient="records")),
    }  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    return figures


if __name__ == "__main__":
    main()
