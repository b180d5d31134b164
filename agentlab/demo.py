"""``agentlab demo`` / ``make demo``: a real society on the simulated backend.

Each call writes a new run (``runs/demo-1``, ``runs/demo-2``...); ``--out DIR`` of an
existing run is refused unless ``--overwrite``.

200 persona agents (``LLMAgent``) share the ``social_feed`` for a few ticks; every LLM call
goes to ``sim/vllm-3b`` (a simulated vLLM server with a few slots and real latencies), so
the run takes 10-30 s and its log shows queueing, tool use and the feed filling up.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from agentlab.errors import install_hint

__all__ = ["main"]

# A bigger simulated vLLM than the default profile (more slots, faster prefill, a limiter
# that starts wide) so 200 agents x 5 ticks take ~10-30 s while still queueing visibly.
DEMO_LLM: dict[str, Any] = {
    "model": "sim/vllm-3b",
    "slots": 128,
    "prefill_tps": 300_000.0,
    "decode_tps": 150.0,
    "decode_degrade": 0.005,
    "completion_median": 48.0,
    "aimd_initial": 96,
    "max_retries": 3,
    # the simulator copies ids and users from the context; a small share of wrong ones
    "sim_p_invalid_args": 0.05,
}


def main(args: argparse.Namespace) -> int:
    """Run the demo society into a new run directory and print a summary.

    ``args.out`` ``None`` picks the next free ``runs/demo-<n>``; an ``--out`` that already
    holds a run is refused unless ``args.overwrite`` (then it is replaced under the
    run's writer lock: never while another process writes it).
    """
    from agentlab.errors import ConfigError
    from agentlab.llm import LLMClient
    from agentlab.runtime import Society
    from agentlab.store import summarize_run

    for name in ("agents", "ticks"):
        value = getattr(args, name)
        if value < 1:
            raise ConfigError(f"--{name} must be at least 1, got {value}")
    out = Path(args.out) if args.out else next_free("runs/demo")
    overwrite = bool(getattr(args, "overwrite", False))
    if not overwrite and out.exists() and any(out.iterdir()):
        raise ConfigError(
            f"{out} already holds a run; pass --overwrite to replace it, or another --out "
            "(without --out the demo writes a new runs/demo-<n>)"
        )
    opts = {k: v for k, v in DEMO_LLM.items() if k != "model"}
    llm = LLMClient(str(DEMO_LLM["model"]), seed=args.seed, **opts)
    society = Society.create(
        out,
        agents=[
            {
                "type": "llm",
                "n": args.agents,
                "prefix": "citizen",
                "config": {"max_iterations": 2, "memory_size": 6},
            }
        ],
        env=["social_feed"],
        llm=llm,
        seed=args.seed,
        exist_ok="replace" if overwrite else False,
    )
    try:
        stats = society.run_sync(ticks=args.ticks)
    finally:
        society.close()
    tool_calls, kinds = _tool_calls(out)
    states = society.agent_states()
    actions: Counter[str] = Counter()
    for st in states.values():
        actions.update(st["actions"])
    feed = society.env_state()[0]["state"]
    n_posts = len(feed.get("posts", []))
    summary = summarize_run(out)
    e = summary.errors
    print()
    print(f"demo society: {args.agents} agents x {stats['tick']} ticks on {DEMO_LLM['model']}")
    print(f"  status        {summary.status:>8}")
    print(f"  agent-steps   {stats['steps']:>8,}   ({stats['steps_per_s']:.0f}/s)")
    print(f"  LLM calls     {stats['llm_calls']:>8,}   tokens {stats['tokens']:,}")
    print(
        f"  tool calls    {tool_calls:>8,}   "
        + ", ".join(f"{k} {v}" for k, v in actions.most_common())
    )
    print(f"  step errors   {e.step_errors:>8}")
    share = e.tool_errors / tool_calls if tool_calls else 0.0
    print(
        f"  tool errors   {e.tool_errors:>8}   of {tool_calls:,} calls ({share:.1%})"
        + ("   " + ", ".join(f"{k} {v}" for k, v in kinds) if kinds else "")
    )
    failures = sum(e.llm_failures.values())
    print(
        f"  LLM failures  {failures:>8}"
        + ("   " + ", ".join(f"{k} {v}" for k, v in e.llm_failures.items()) if failures else "")
    )
    if n_posts:
        print(f"  posts on feed {n_posts:>8,}")
    print(f"  wall time     {stats['wall_s']:>8.1f} s")
    print()
    path = out.resolve()
    print(f"run directory: {path}")
    for line in open_hints(path):
        print(line)
    if stats["status"] == "stopped":  # Ctrl-C: the committed ticks are kept (above)
        left = args.ticks - int(stats["tick"])
        print(f"interrupted: the run keeps its committed ticks; continue it in Python with "
              f"agentlab.Society.open({str(path)!r}).run_sync(ticks={left})")  # fmt: skip
        return 130
    return 0


def _tool_calls(run_dir: Path) -> tuple[int, list[tuple[str, int]]]:
    """Tool calls and the three commonest ``tool: ErrorType`` failures of the committed run
    (its ``env.tool`` spans: what ``summarize_run`` counts errors from; the env host's own
    counters also held the calls of a tick stopped before its commit)."""
    from agentlab.store import open_run

    run = open_run(run_dir)
    try:
        df = run.sql(
            "select attributes['gen_ai.tool.name'] as tool, status_message from spans "
            "where name = 'env.tool'"
        )
    finally:
        run.close()  # (its DuckDB connection)
    failed = df[df["status_message"].notna()]
    kinds = Counter(
        f"{tool}: {str(msg).split(':', 1)[0]}"
        for tool, msg in zip(failed["tool"], failed["status_message"], strict=True)
    )
    return len(df), kinds.most_common(3)


def next_free(prefix: str | Path) -> Path:
    """``<prefix>-<n>`` for the smallest ``n >= 1`` that does not exist yet."""
    base = Path(prefix)
    n = 1
    while Path(f"{base}-{n}").exists():
        n += 1
    return Path(f"{base}-{n}")


def _command(name: str) -> str:
    """How to call the ``name`` script of this installation from the current directory:
    ``.venv/bin/name`` in a checkout's venv, ``name`` when it is on PATH, else its path."""
    exe = Path(sys.executable).parent / name
    if not exe.exists():
        return name
    found = shutil.which(name)
    if found and Path(found).resolve() == exe.resolve():
        return name
    try:
        return str(exe.relative_to(Path.cwd()))  # .venv/bin/<name> in a checkout
    except ValueError:
        return str(exe)


#: (extra, a module it installs): what opening a run in JupyterLab needs
_EXTRAS = (("viz", "anywidget"), ("lab", "jupyterlab"))


def open_hints(path: Path) -> list[str]:
    """Lines telling how to open the run at ``path`` in JupyterLab and in the shell
    (``--allow-root`` as root; the notebook path only where the checkout has it)."""
    lab = f"{_command('jupyter')} lab" + (" --allow-root" if os.geteuid() == 0 else "")
    nb = Path(__file__).resolve().parents[1] / "notebooks" / "05_replay_analysis.ipynb"
    lines = ["open it in JupyterLab:"]
    if nb.is_file():
        try:
            shown = str(nb.relative_to(Path.cwd()))
        except ValueError:
            shown = str(nb)
        lines.append(f"  {lab} {shown}")
        lines.append(f'  and set run_dir = "{path}" in its parameters cell, or in any notebook:')
    else:
        lines.append(f"  {lab}   and in a notebook:")
    lines.append(f'  import agentlab; run = agentlab.open_run("{path}"); agentlab.show(run)')
    missing = [extra for extra, mod in _EXTRAS if importlib.util.find_spec(mod) is None]
    if missing:
        lines.append(f"  (JupyterLab and the widgets need: {install_hint(','.join(missing))})")
    lines.append(
        f"summary in the shell: {_command('agentlab')} report {path} --html {path}/report.html"
    )
    return lines
