"""``agentlab sweep NOTEBOOK -p name=v1,v2 ... --out DIR``."""

from __future__ import annotations

import argparse

from agentlab.sweep.grid import parse_param_args
from agentlab.sweep.sweep import sweep

__all__ = ["main"]


def main(args: argparse.Namespace) -> int:
    """Run the sweep; exit 1 if any point did not finish ``ok``."""
    grid = parse_param_args(args.param)
    if not grid:
        grid = {"_": [0]}  # no parameters: one point
    s = sweep(
        args.notebook,
        grid,
        out=args.out,
        executor=args.executor,
        max_parallel=args.max_parallel,
        timeout=args.timeout,
        resume=args.resume,
    )
    df = s.df()
    cols = [c for c in df.columns if c != "error"]
    print(df[cols].to_string(index=False))
    bad = df[df["status"] != "ok"]
    for _, row in bad.iterrows():
        print(f"point {row['point_id']}: {row['status']}: {row['error']}")
    print(f"sweep directory: {s.out}")
    return 1 if len(bad) else 0
