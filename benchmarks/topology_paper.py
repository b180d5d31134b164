"""The agentraffic paper's Tables 2 and 3 from a simulated run, next to the published values.

3 topologies x ``--runs`` (default 200) runs x N = 4 experts on ``sim/vllm-3b`` under the
virtual clock, with the free-text workflow's paper defaults
(``agentlab.topology.WorkflowConfig``), analysed with the paper's definitions
(``agentlab.analysis.paper_summary_df`` / ``paper_fits_df``). Then the full-mesh burst
fraction for N = 3, 4, 5 (the scaling prediction). Prints both tables and the timing;
``--json`` writes everything.

    python benchmarks/topology_paper.py [--quick] [--runs N] [--json PATH] [--out DIR]

``--quick``: 40 runs per topology and per N. The must-show bound: the 3 x 200 x 4 run in
at most 2 minutes of wall time (``wall_s`` in the output).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

TOPOLOGIES = ["sequential", "star", "full_mesh"]
SCALING_N = (3, 4, 5)


def _run(topologies: list[str], agents: int, runs: int, seed: int, out: Path) -> Any:
    from agentlab.topology import Experiment

    exp = Experiment(topologies=topologies, agents=agents, runs=runs, llm="sim/vllm-3b",
                     seed=seed, clock="virtual", out=out, progress=False)  # fmt: skip
    return exp.run_sync()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="40 runs per topology and per N")
    ap.add_argument("--runs", type=int, default=None, help="runs per topology (default 200)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="parent of the run directories (default: temp)")
    ap.add_argument("--json", default=None, help="write the results to this JSON file")
    args = ap.parse_args(argv)
    runs = args.runs or (40 if args.quick else 200)

    import pandas as pd

    from agentlab.analysis import (
        paper_comparison_df,
        paper_fit_comparison_df,
        paper_fits_df,
        paper_summary_df,
    )

    base = Path(args.out or tempfile.mkdtemp(prefix="agentlab-bench-topology-paper-"))
    t0 = time.perf_counter()
    res = _run(TOPOLOGIES, 4, runs, args.seed, base / "n4")
    wall = time.perf_counter() - t0
    calls = res.calls_df()
    t1 = time.perf_counter()
    table = paper_summary_df(calls)
    fits = paper_fits_df(calls)
    analysis_s = time.perf_counter() - t1
    cmp2 = paper_comparison_df(table)
    cmp3 = paper_fit_comparison_df(fits)

    burst: dict[int, float] = {}
    for n in SCALING_N:
        if n == 4:
            sub = calls[calls.topology == "full_mesh"]
        else:
            sub = _run(["full_mesh"], n, runs, args.seed, base / f"mesh_n{n}").calls_df()
        burst[n] = float(paper_summary_df(sub)["burst_fraction"].iloc[0])

    pd.set_option("display.width", 220)
    pd.set_option("display.max_columns", 30)
    pd.set_option("display.max_rows", 200)
    print(f"\n3 topologies x {runs} runs x N=4 on sim/vllm-3b (virtual clock): {len(calls)} "
          f"calls in {wall:.1f} s wall (+{analysis_s:.2f} s analysis)")  # fmt: skip
    print("\nTable 2 (paper definitions) — simulated vs published:")
    wide = cmp2.pivot_table(index=["role", "metric"], columns="topology",
                            values=["simulated", "paper"], sort=False)  # fmt: skip
    print(wide.round(3).to_string())
    print("\nTable 3 (fit sample: IAT > 50 ms, fenced Sequential/Star, p99 clip):")
    wide3 = cmp3.pivot_table(index=["topology", "dist", "parameter"],
                             values=["simulated", "paper"], sort=False)  # fmt: skip
    print(wide3[["simulated", "paper"]].round(4).to_string())
    print("\nFull-mesh burst fraction (IAT < 50 ms) by N: "
          + ", ".join(f"N={n}: {b:.3f}" for n, b in burst.items()) + " (paper N=4: 0.382)")  # fmt: skip

    result = {
        "runs": runs, "agents": 4, "calls": len(calls), "wall_s": wall,
        "analysis_s": analysis_s, "table2": table.to_dict("records"),
        "table2_vs_paper": cmp2.to_dict("records"), "table3": fits.drop(columns="params")
        .to_dict("records"), "table3_vs_paper": cmp3.to_dict("records"),
        "full_mesh_burst_fraction_by_n": {str(k): v for k, v in burst.items()},
    }  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
