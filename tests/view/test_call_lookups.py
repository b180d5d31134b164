"""The call behind a message or a span (``view.data.message_calls`` / ``span_calls``): each
agent's calls are picked out once per page (a page filtered the whole calls table per row).
Checked against the rule written out as a filter per row, on calls of several runs and
ticks with ties and rows before any call."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from agentlab.view.data import message_calls, span_calls


def _calls(seed: int, with_runs: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = 400
    start = np.round(rng.uniform(0, 100, n), 1)  # rounded: ties in start and end
    df = pd.DataFrame({
        "request_id": [f"r{i}" for i in range(n)],
        "agent_id": rng.choice(["a", "b", "c"], n),
        "tick": rng.integers(1, 5, n).astype(float),
        "run_id": rng.choice(["x", "y"], n) if with_runs else None,
        "start": start,
        "end": start + np.round(rng.uniform(0, 10, n), 1),
    })  # fmt: skip
    return df.sort_values(["start", "request_id"], kind="stable").reset_index(drop=True)


def _message_rule(calls: pd.DataFrame, sender: Any, run_id: Any, ts: Any, tick: Any) -> Any:
    c = calls[calls["agent_id"] == sender]
    if run_id is not None and c["run_id"].notna().any():
        c = c[c["run_id"] == run_id]
    elif tick is not None and c["tick"].notna().any():
        c = c[c["tick"] == tick]
    if ts is not None and len(c):
        before = c[c["end"] <= float(ts) + 1e-6]
        c = before if len(before) else c
    return None if not len(c) else str(c.iloc[-1]["request_id"])


def _span_rule(calls: pd.DataFrame, agent: Any, tick: Any, start: Any) -> Any:
    if agent is None:
        return None
    c = calls[calls["agent_id"] == agent]
    if tick is not None:
        c = c[c["tick"] == tick]
    if start is not None and len(c):
        before = c[c["start"] <= float(start) + 1e-3]
        c = before if len(before) else c
    return None if not len(c) else str(c.iloc[-1]["request_id"])


def test_the_call_behind_each_message_and_span_follows_the_rule() -> None:
    rng = np.random.default_rng(1)
    for seed, with_runs in ((0, True), (1, False)):
        calls = _calls(seed, with_runs)
        find_message, find_span = message_calls(calls), span_calls(calls)
        for _ in range(600):
            agent = rng.choice(["a", "b", "c", "nobody"])
            run_id = rng.choice(["x", "y", "z", None])  # z: a run the agent never called in
            tick = rng.choice([1, 2, 3, 4, 9, None])
            t = rng.choice([None, -1.0, float(np.round(rng.uniform(0, 115), 1))])
            got = find_message(agent, run_id, t, tick)
            assert got == _message_rule(calls, agent, run_id, t, tick), (agent, run_id, t, tick)
            got = find_span(agent, tick, t)
            assert got == _span_rule(calls, agent, tick, t), (agent, tick, t)
    empty = _calls(0, True).iloc[:0]
    assert message_calls(empty)("a", "x", 1.0, 1) is None and span_calls(empty)("a", 1, 1) is None
