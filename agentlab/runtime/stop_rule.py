"""The stop rule of a society run: a tick whose agent steps failed is not committed.

Without it a tick in which every agent's step failed (a model the server lacks, a replay
cache that does not match, an expired API key) committed ``steps=0, errors=N`` and
``run()`` went on to the next tick and returned normally. ``Society.create(...,
max_error_share=x)`` sets the rule, kept in the run: a tick fails when no agent step
succeeded (always, unless the rule is ``None``) or when more than ``x`` of the agents
failed every attempt. ``step()`` then raises :class:`~agentlab.errors.TickFailedError`
before the commit (the run stays at the last committed tick, ``run()`` marks it
``failed``), naming the share and the first error; the tick's ``agent_errors`` rows stay
readable with ``open_run`` until the run is opened or stepped again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentlab.errors import TickFailedError

__all__ = ["DEFAULT_MAX_ERROR_SHARE", "check_tick"]

#: the default: only a tick with no successful agent step stops the run
DEFAULT_MAX_ERROR_SHARE = 1.0


def check_tick(
    run_dir: str,
    tick: int,
    agents: int,
    steps: int,
    failed: list[str],
    rule: Any,
    flush: Callable[[], None],
) -> None:
    """Raise :class:`TickFailedError` if tick ``tick``'s results break the stop rule.

    Args:
        run_dir: the run (its ``agent_errors`` rows name the first error; flushed first).
        tick: the tick just stepped (not committed).
        agents: agents stepped in the tick.
        steps: agent steps that succeeded.
        failed: ids of agents whose every attempt failed.
        rule: the run's ``max_error_share`` (``None``: never stop).
        flush: makes the tick's rows readable (called only when the rule is broken).
    """
    if rule is None or agents == 0:
        return
    share = len(failed) / agents
    if steps > 0 and share <= float(rule):
        return
    why = (
        "no agent step succeeded"
        if steps == 0
        else f"{share:.0%} of agents failed, above max_error_share={rule}"
    )
    flush()
    raise TickFailedError(
        f"{run_dir}: tick {tick} was not committed: {why} ({len(failed)} of {agents} agents "
        f"failed every attempt){_first_error(run_dir, tick)}. The run stays at tick "
        f"{tick - 1}; fix the cause and run again, or set max_error_share (None: never "
        "stop) in Society.create"
    )


def _first_error(run_dir: str, tick: int) -> str:
    from agentlab.store.run import open_run

    try:
        df = open_run(run_dir).df("agent_errors")
        df = df[(df["tick"] == tick) & df["final"]]
    except Exception:  # the message is a hint; the rule holds without it
        return ""
    if df.empty:
        return ""
    first = df.iloc[0]
    return f"; first: agent {first['agent_id']!r}: {first['error_class']}: {first['error']}"
