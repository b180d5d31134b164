"""Fixed-seed ``llm_calls`` rows of ``sim/vllm-3b`` runs, to compare two engine versions.

Runs (virtual clock, fixed seeds) a topology experiment (3 topologies x ``--runs`` runs x 4
experts) and a small persona society on ``social_feed`` (``--agents`` agents, ``--ticks``
ticks), and writes their ``llm_calls`` rows (times, tokens, outcome, labels; no wall-clock
or id fields) as JSON. ``--compare A.json B.json`` checks two such files row by row: equal
tokens, outcomes and labels, times within ``--tol`` seconds.

    python benchmarks/sim_engine_rows.py --out /tmp/rows-after.json
    PYTHONPATH=/tmp/engine_base python benchmarks/sim_engine_rows.py --out /tmp/rows-before.json
    python benchmarks/sim_engine_rows.py --compare /tmp/rows-before.json /tmp/rows-after.json

Extra profile overrides (``--set prefix_caching=false``) apply to both runs through the
client's defaults, so the engine's mechanisms can be switched off for the comparison.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

KEEP = ("agent_id", "tick", "start", "end", "first_token", "queue_wait", "prompt_tokens",
        "completion_tokens", "outcome", "finish_reason", "labels", "cached_tokens")  # fmt: skip
TIMES = ("start", "end", "first_token", "queue_wait")


def _rows(run: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for f in sorted((run / "replay" / "llm_calls").glob("*.jsonl"))
            for line in f.read_bytes().splitlines() if line.strip()]  # fmt: skip
    out = [{k: r.get(k) for k in KEEP if k in r} for r in rows]
    out.sort(
        key=lambda r: (
            r.get("start") or 0.0,
            str(r.get("agent_id")),
            json.dumps(r.get("labels"), sort_keys=True),
        )
    )
    return out


def _overrides(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in pairs:
        k, _, v = p.partition("=")
        out[k] = {"true": True, "false": False}.get(v.lower(), v)
    return out


def collect(runs: int, agents: int, ticks: int, overrides: dict[str, Any]) -> dict[str, Any]:
    from agentlab import Society
    from agentlab.llm import LLMClient
    from agentlab.topology import Experiment

    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        llm = LLMClient("sim/vllm-3b", seed=0, **overrides)
        exp = Experiment(topologies=["sequential", "star", "full_mesh"], agents=4, runs=runs,
                         llm=llm, seed=0, clock="virtual", out=Path(d) / "topo", progress=False)  # fmt: skip
        exp.run_sync()
        res["topology"] = sorted((r for p in (Path(d) / "topo").rglob("llm_calls") for r in _rows(p.parent.parent)),
                                 key=lambda r: json.dumps(r, sort_keys=True))  # fmt: skip
        run = Path(d) / "soc"
        s = Society.create(run, agents=agents, env=["social_feed"],
                           llm=LLMClient("sim/vllm-3b", seed=7, **overrides), clock="virtual",
                           seed=7, batch_size=max(1, -(-agents // 8)), progress=False)  # fmt: skip
        s.run_sync(ticks=ticks)
        s.close()
        res["society"] = _rows(run)
    return res


def compare(a: dict[str, Any], b: dict[str, Any], tol: float) -> int:
    bad = 0
    for part in sorted(set(a) | set(b)):
        ra, rb = a.get(part, []), b.get(part, [])
        worst = 0.0
        if len(ra) != len(rb):
            print(f"{part}: {len(ra)} vs {len(rb)} rows")
            bad += 1
            continue
        diffs = 0
        for x, y in zip(ra, rb, strict=True):
            for k in set(x) | set(y):
                if k == "cached_tokens" and (x.get(k) or 0) == (y.get(k) or 0):
                    continue
                u, v = x.get(k), y.get(k)
                if k in TIMES and u is not None and v is not None:
                    d = abs(float(u) - float(v))
                    worst = max(worst, d)
                    if d > tol:
                        diffs += 1
                elif u != v:
                    diffs += 1
        print(f"{part}: {len(ra)} rows, {diffs} differing fields, max |dt| {worst:.3g} s")
        bad += diffs
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="2 runs per topology, 20 agents")
    ap.add_argument("--runs", type=int, default=None, help="runs per topology (6)")
    ap.add_argument("--agents", type=int, default=None, help="society agents (60)")
    ap.add_argument("--ticks", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="profile override k=v")
    ap.add_argument("--compare", nargs=2, default=None)
    ap.add_argument("--tol", type=float, default=1e-6)
    args = ap.parse_args(argv)
    args.runs = args.runs or (2 if args.quick else 6)
    args.agents = args.agents or (20 if args.quick else 60)
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        return 1 if compare(a, b, args.tol) else 0
    res = collect(args.runs, args.agents, args.ticks, _overrides(args.set))
    text = json.dumps(res, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text)
    print(
        {k: len(v) for k, v in res.items()}, "rows; hash", hash(text) if not math.isnan(0.0) else 0
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
