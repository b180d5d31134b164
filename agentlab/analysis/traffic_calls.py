"""A run's ``llm_calls`` as the replayable call list every traffic export is written from
(:mod:`agentlab.analysis.traffic` for the trace files, :mod:`agentlab.analysis.sharegpt`
for vLLM's benchmark): one dict per call with its start offset, sizes, latency and the
call it followed in the same agent's turn."""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["SCHEMA_VERSION", "traffic_trace"]

SCHEMA_VERSION = 1


def traffic_trace(run: Any) -> list[dict[str, Any]]:
    """The replayable trace of a run's ``llm_calls`` (see the module docstring).

    Args:
        run: a run directory or an opened run (:func:`agentlab.store.open_run`).
    """
    from agentlab.store import open_run

    r = open_run(run) if isinstance(run, (str, os.PathLike)) else run
    df = r.df("llm_calls")
    if df.empty:
        return []
    df = df.sort_values(["start", "request_id"]).reset_index(drop=True)
    t0 = float(df["start"].min())
    open_by_agent: dict[tuple[Any, Any], list[tuple[float, str]]] = {}
    out: list[dict[str, Any]] = []
    for row in df.to_dict("records"):
        labels = _labels(row.get("labels"))
        who = row.get("agent_id") or labels.get("sender")
        tick = row.get("tick")
        tick = None if tick is None or tick != tick else int(tick)  # NaN → None
        start, end = float(row["start"]), float(row["end"])
        parent, think = None, None
        if who is not None:
            done = [c for c in open_by_agent.get((who, tick), []) if c[0] <= start + 1e-9]
            if done:
                p_end, parent = max(done)
                think = max(0.0, start - p_end)
            open_by_agent.setdefault((who, tick), []).append((end, str(row["request_id"])))
        out.append(
            {
                "schema_version": SCHEMA_VERSION,
                "id": str(row["request_id"]),
                "t": start - t0,
                "agent_id": row.get("agent_id"),
                "labels": labels,
                "tick": tick,
                "prompt_tokens": int(row.get("prompt_tokens") or 0),
                "completion_tokens": int(row.get("completion_tokens") or 0),
                "stream": bool(row.get("stream")),
                "latency": end - start,
                "parent": parent,
                "think_s": think,
            }
        )
    return out


def _labels(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value:
        try:
            parsed = json.loads(value)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}
