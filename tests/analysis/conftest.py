"""Hand-made call tables with answers that can be worked out on paper."""

from __future__ import annotations

import pandas as pd
import pytest


def _call(topology: str, run_id: int, rid: str, stage: str, start: float, end: float, **kw):
    row = {
        "request_id": rid,
        "model": "sim/test",
        "agent_id": kw.pop("agent_id", "a0"),
        "start": start,
        "end": end,
        "first_token": kw.pop("first_token", start + 0.1),
        "queue_wait": kw.pop("queue_wait", 0.0),
        "prompt_tokens": kw.pop("prompt_tokens", 10),
        "completion_tokens": kw.pop("completion_tokens", 5),
        "outcome": "ok",
        "topology": topology,
        "run_id": run_id,
        "task_id": "t0",
        "stage": stage,
        "iteration": 0,
        "round": 0,
        "sender": None,
        "receiver_role": None,
    }
    row.update(kw)
    return row


@pytest.fixture()
def timeline_calls() -> pd.DataFrame:
    """Two runs of 'star' and one of 'mesh'; rows deliberately out of start order.

    star/1 discussion starts: 0, 0.01, 0.02, 1.0, 1.03, 3.0  (plus an execution call at 0.5)
      IATs 0.01 0.01 0.98 0.03 1.97 -> bursts of 3 and 2 calls, then a lone call.
    star/2 discussion starts: 10, 10 (tie), 12 -> IATs 0, 2.
    mesh/1 discussion starts: 0, 0.25, 0.5  -> IATs exactly 0.25 (binary-exact).
    """
    c = _call
    rows = [
        c("star", 1, "s1-4", "discussion", 1.0, 2.0),
        c("star", 1, "s1-1", "discussion", 0.0, 0.8),
        c("star", 1, "s1-x", "execution", 0.5, 0.9),
        c("star", 1, "s1-3", "discussion", 0.02, 0.9),
        c("star", 1, "s1-2", "discussion", 0.01, 0.7),
        c("star", 1, "s1-6", "discussion", 3.0, 4.0),
        c("star", 1, "s1-5", "discussion", 1.03, 2.5),
        c("star", 2, "s2-1", "discussion", 10.0, 11.0),
        c("star", 2, "s2-2", "discussion", 10.0, 11.5),
        c("star", 2, "s2-3", "discussion", 12.0, 12.5, first_token=float("nan")),
        c("mesh", 1, "m1-1", "discussion", 0.0, 1.0),
        c("mesh", 1, "m1-2", "discussion", 0.25, 1.0),
        c("mesh", 1, "m1-3", "discussion", 0.5, 1.0),
    ]
    return pd.DataFrame(rows)
