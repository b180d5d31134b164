"""``agentlab demo`` / ``make demo``: a real society on the simulated backend.

200 persona agents (``LLMAgent``) share the ``social_feed`` for a few ticks; every LLM call
goes to ``sim/vllm-3b`` (a simulated vLLM server with a few slots and real latencies), so
the run takes 10-30 s and its log shows queueing, tool use and the feed filling up.
"""

from __future__ import annotations

import argparse
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

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
    """Run the demo society into ``args.out`` and print a summary."""
    from agentlab.errors import ConfigError
    from agentlab.llm import LLMClient
    from agentlab.runtime import Society

    # Checked before the old demo run is removed: a typo must not cost the last run.
    for name in ("agents", "ticks"):
        value = getattr(args, name)
        if value < 1:
            raise ConfigError(f"--{name} must be at least 1, got {value}")
    out = Path(args.out)
    if (out / "SOCIETY.json").exists():
        shutil.rmtree(out)  # the demo always starts fresh
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
    )
    try:
        stats = society.run_sync(ticks=args.ticks)
        host = getattr(society.executor, "host", None)
        tool_calls, tool_errors = (host.calls, host.errors) if host is not None else (0, 0)
        kinds = host.routing.call_errors.most_common(3) if host is not None else []
    finally:
        society.close()
    states = society.agent_states()
    actions: Counter[str] = Counter()
    for st in states.values():
        actions.update(st["actions"])
    feed = society.env_state()[0]["state"]
    n_posts = len(feed.get("posts", []))
    print()
    print(f"demo society: {args.agents} agents x {stats['tick']} ticks on {DEMO_LLM['model']}")
    print(f"  agent-steps   {stats['steps']:>8}   ({stats['steps_per_s']:.0f}/s)")
    print(f"  LLM calls     {stats['llm_calls']:>8}   tokens {stats['tokens']}")
    print(f"  step errors   {stats['errors']:>8}")
    print(
        f"  tool calls    {sum(actions.values()):>8}   "
        + ", ".join(f"{k} {v}" for k, v in actions.most_common())
    )
    share = tool_errors / tool_calls if tool_calls else 0.0
    print(
        f"  tool errors   {tool_errors:>8}   of {tool_calls} calls ({share:.1%})"
        + ("   " + ", ".join(f"{k} {v}" for k, v in kinds) if kinds else "")
    )
    if n_posts:
        print(f"  posts on feed {n_posts:>8}")
    print(f"  wall time     {stats['wall_s']:>8.1f} s")
    print()
    print(f"run directory: {out.resolve()}")
    path = out.resolve()
    print("open it in JupyterLab:")
    print("  .venv/bin/jupyter lab notebooks/05_replay_analysis.ipynb")
    print(f'  and set run_dir = "{path}" in its parameters cell, or in any notebook:')
    print(f'  import agentlab; run = agentlab.open_run("{path}"); agentlab.show(run)')
    print(f"summary in the shell: .venv/bin/agentlab report {path} --html {path}/report.html")
    return 0
