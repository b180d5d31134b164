"""``agentlab sweep NOTEBOOK -p name=v1,v2 ... [--params FILE] --out DIR``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentlab.core.text_table import format_table
from agentlab.sweep.grid import load_params_file, parse_param_args
from agentlab.sweep.sweep import sweep

__all__ = ["main"]


def main(args: argparse.Namespace) -> int:
    """Run the sweep, print one readable row per point; exit 1 if any point failed."""
    grid: dict[str, Any] = load_params_file(args.params) if args.params else {}
    grid.update(parse_param_args(args.param))
    s = sweep(
        args.notebook,
        grid or [{}],  # no parameters: one point with the notebook's defaults
        out=args.out,
        executor=args.executor,
        max_parallel=args.max_parallel,
        timeout=args.timeout,
        resume=args.resume,
    )
    df = s.df()
    print(format_table(s.table()))
    bad = df[df["status"] != "ok"]
    for _, row in bad.iterrows():
        print(f"point {row['point_id']}: {row['status']}: {row['error']}")
    ok = len(df) - len(bad)
    print(f"{ok}/{len(df)} points ok; sweep directory: {s.out}")
    if s.status == "stopped":  # Ctrl-C
        print("interrupted: the same command with --resume runs the points that did not "
              "finish", file=sys.stderr)  # fmt: skip
        return 130
    return 1 if len(bad) else 0
