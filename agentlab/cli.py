"""The ``agentlab`` command line. Subcommands import their implementation lazily."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentlab", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="run the demo society on the simulated backend")
    d.add_argument("--out", default="runs/demo", help="run directory (default runs/demo)")
    d.add_argument("--agents", type=int, default=200)
    d.add_argument("--ticks", type=int, default=5)
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(target="agentlab.demo:main")

    r = sub.add_parser("run", help="run a society from a TOML/YAML config")
    r.add_argument("config", nargs="?", help="TOML or YAML config file (optional with --fork)")
    r.add_argument("--resume", action="store_true", help="continue from the last committed tick")
    r.add_argument(
        "--fork",
        default=None,
        metavar="RUN@TICK",
        help="start from committed tick TICK of run RUN (config: only the changes)",
    )
    r.add_argument("--executor", choices=["local", "ray"], default=None)
    r.add_argument("--batch-size", type=int, default=None)
    r.add_argument("--ticks", type=int, default=None)
    r.add_argument("--out", default=None, help="run directory (default from the config)")
    r.set_defaults(target="agentlab.runtime.cli_run:main")

    s = sub.add_parser("sim-serve", help="OpenAI-compatible HTTP server over the simulator")
    s.add_argument("--profile", default="vllm-3b")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8600)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(target="agentlab.llm.sim_serve:main")

    rep = sub.add_parser("report", help="summarise a run directory")
    rep.add_argument("run", help="run directory")
    rep.add_argument("--html", default=None, help="also write an HTML report with figures")
    rep.set_defaults(target="agentlab.store.report:main")

    sw = sub.add_parser("sweep", help="run a notebook over a parameter grid")
    sw.add_argument("notebook")
    sw.add_argument("-p", "--param", action="append", default=[], metavar="NAME=V1,V2")
    sw.add_argument("--out", required=True)
    sw.add_argument("--executor", choices=["local", "ray"], default="local")
    sw.add_argument("--max-parallel", type=int, default=None)
    sw.add_argument("--timeout", type=float, default=None)
    sw.add_argument("--resume", action="store_true")
    sw.set_defaults(target="agentlab.sweep.cli:main")

    ca = sub.add_parser("calibrate", help="fit a sim profile (TOML) from a run's llm_calls")
    ca.add_argument("run", help="run directory")
    ca.add_argument("--out", required=True, help="profile TOML to write")
    ca.add_argument("--name", default=None, help="profile name (default: the file's stem)")
    ca.add_argument("--slots", type=int, default=None, help="server max_num_seqs")
    ca.add_argument("--max-num-batched-tokens", type=int, default=0)
    ca.add_argument("--by", default=None, help="column separating independent servers")
    ca.add_argument("--client", default=None, help="column of closed-loop clients (replay)")
    ca.set_defaults(target="agentlab.analysis.calibrate:main")

    pa = sub.add_parser("paper", help="execute a notebook fresh and export it to HTML")
    pa.add_argument("notebook")
    pa.add_argument("--out", required=True)
    pa.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")
    pa.set_defaults(target="agentlab.sweep.paper:main")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentlab`` script; returns the process exit code."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    args = _build_parser().parse_args(argv)
    module, func = args.target.split(":")
    from agentlab.errors import AgentlabError

    try:
        result = getattr(importlib.import_module(module), func)(args)
    except AgentlabError as exc:
        print(f"agentlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"agentlab {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
