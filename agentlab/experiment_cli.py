"""``agentlab experiment``: the coordination-topology study from a terminal.

A study of hundreds of runs against a real endpoint runs for hours: in a terminal (tmux,
a batch job) rather than a notebook. Before this command it took a Python script around
``Experiment(...).run()``. Here::

    agentlab experiment --out runs/topo --runs 200                       # sim, virtual clock
    agentlab experiment --out runs/real --llm hosted_vllm/x --base-url URL --runs 50
    agentlab experiment --out runs/topo --resume                         # after Ctrl-C / crash

It prints a progress bar, then the traffic table per topology (calls per run, burst
fraction, IAT median, latency and TTFT medians, mean in flight: ``traffic_summary_df``).
Ctrl-C stops it (exit 130; the run in flight is dropped) and ``--resume`` runs the rest, as
``Experiment.open(out).run()`` does; an experiment whose runs keep failing stops with
:class:`~agentlab.errors.RunsFailedError` (exit 1).

Top layer (beside ``agentlab.cli``): it joins ``topology`` and ``analysis``, which do not
import each other. The parser is built without importing either (``--help`` stays fast).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_arguments", "main"]


def add_arguments(e: argparse.ArgumentParser, profiles: str) -> None:
    """The ``agentlab experiment`` options (``profiles``: the ``sim/`` names, for help)."""
    e.add_argument("--out", required=True, help="run directory")
    e.add_argument("--resume", action="store_true",
                   help="continue the experiment in --out: its finished runs are kept, the "
                   "rest run (with the settings its run.json holds; give no others)")  # fmt: skip
    e.add_argument("--overwrite", action="store_true", help="replace an experiment in --out")
    e.add_argument(
        "--topologies",
        default=None,
        help="comma-separated, of sequential, star, full_mesh (default: all three)",
    )
    e.add_argument("--agents", type=int, default=None, help="experts per run (default 4)")
    e.add_argument("--runs", type=int, default=None, help="runs per topology (default 10)")
    e.add_argument(
        "--llm",
        default=None,
        help=f"model (default sim/vllm-3b): {profiles}, or a litellm model string",
    )
    e.add_argument("--base-url", default=None, help="an OpenAI-compatible endpoint's URL")
    e.add_argument(
        "--clock",
        choices=["virtual", "real"],
        default=None,
        help="default: virtual for a sim/ model (seconds for a study), else real",
    )
    e.add_argument("--seed", type=int, default=None, help="root seed (default 0)")
    e.add_argument("--parallel-runs", type=int, default=None,
                   help="runs in flight at once (default 1: each run's calls one arrival "
                   "process, as the paper)")  # fmt: skip
    e.add_argument("--max-error-share", default=None, metavar="X",
                   help="stop when more than this share of the last five runs failed "
                   "(default 1.0: when none succeeded; 'none': never)")  # fmt: skip


_SETTINGS = ("topologies", "agents", "runs", "llm", "base_url", "clock", "seed",
             "parallel_runs", "max_error_share")  # fmt: skip


def _experiment(args: argparse.Namespace) -> Any:
    from agentlab.errors import ConfigError
    from agentlab.topology import Experiment

    given = [f"--{k.replace('_', '-')}" for k in _SETTINGS if getattr(args, k) is not None]
    if args.resume:
        if given or args.overwrite:
            raise ConfigError(f"--resume continues the experiment in {args.out!r} with the "
                              "settings its run.json holds; drop "
                              f"{', '.join(given or ['--overwrite'])}")  # fmt: skip
        return Experiment.open(args.out)
    from agentlab.store.summary import is_run

    if is_run(args.out) and not args.overwrite:  # (Experiment says it in its exist_ok terms)
        raise ConfigError(f"{args.out!r} already holds a run: --resume continues it (an "
                          "experiment), --overwrite replaces it, another --out keeps it")  # fmt: skip
    kwargs: dict[str, Any] = {k: getattr(args, k) for k in ("agents", "runs", "seed",
                                                             "parallel_runs")}  # fmt: skip
    if args.topologies:
        kwargs["topologies"] = [t.strip() for t in args.topologies.split(",") if t.strip()]
    if args.llm or args.base_url:
        from agentlab.llm import LLMClient

        kwargs["llm"] = LLMClient(args.llm or "sim/vllm-3b", base_url=args.base_url)
    sim = str(args.llm or "sim/").startswith("sim/")  # (a real endpoint needs the real clock)
    kwargs["clock"] = args.clock or ("virtual" if sim and not args.base_url else "real")
    given_kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if args.max_error_share is not None:  # (after the filter: "none" is None, never stop)
        share = args.max_error_share
        given_kwargs["max_error_share"] = None if share == "none" else _share(share)
    return Experiment(out=args.out, exist_ok="replace" if args.overwrite else False,
                      **given_kwargs)  # fmt: skip


def _share(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        from agentlab.errors import ConfigError

        raise ConfigError(
            f"--max-error-share takes a number in [0, 1] or 'none', got {text!r}"
        ) from None


def main(args: argparse.Namespace) -> int:
    """Run (or ``--resume``) the experiment; print its traffic table; exit 0 when done,
    130 when stopped (Ctrl-C), 1 when its runs kept failing."""
    import asyncio

    from agentlab.errors import RunsFailedError

    exp = _experiment(args)
    try:
        res = asyncio.run(exp.run())
    except RunsFailedError as exc:
        print(f"failed: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {res.status}, {res.runs_done} runs")
    from agentlab.analysis.run_report import study_table_text, study_traffic

    traffic = study_traffic(res.run, res.run.llm_calls_df())  # (its finished runs')
    if traffic:
        print(study_table_text(traffic["rows"], traffic["columns"]))
    print(f"more: agentlab report {args.out} [--html report.html]; "
          f"in Python: agentlab.open_run({args.out!r})")  # fmt: skip
    if res.status == "stopped":
        print(f"stopped: `agentlab experiment --out {args.out} --resume` runs the rest")
        return 130
    return 0
