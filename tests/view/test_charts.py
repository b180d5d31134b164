"""The run browser's charts carry the numbers they claim (:mod:`agentlab.view.charts`)."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import numpy as np
import pandas as pd


def _traces(chart: dict[str, str]) -> dict[str, dict[str, list[float]]]:
    """The traces of a chart's HTML fragment, by name (plotly's JSON of its figure)."""
    m = re.search(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*(\[.*?\]),\s*\{", chart["html"], re.S)
    assert m, chart["html"][:400]
    return {t["name"]: {k: _values(t[k]) for k in ("x", "y")} for t in json.loads(m.group(1))}


def _values(v: Any) -> list[float]:
    """A trace's array: a list, or plotly's typed array (``{"dtype", "bdata"}``)."""
    if isinstance(v, dict):
        v = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).tolist()
    return [float(x) for x in v]


def test_latency_per_tick_draws_each_ticks_quantiles() -> None:
    from agentlab.view.charts import latency_per_tick_chart

    calls = pd.DataFrame({  # tick 1: latencies 1, 2, 3 s; tick 2: 4, 6 s (TTFT of one)
        "tick": [1, 1, 1, 2, 2],
        "start": [0.0, 0.5, 1.0, 10.0, 10.0],
        "end": [1.0, 2.5, 4.0, 14.0, 16.0],
        "first_token": [0.2, 0.9, 1.3, 10.5, None],
    })  # fmt: skip
    chart = latency_per_tick_chart(calls)
    assert chart and chart["title"] == "LLM call latency per tick"
    t = _traces(chart)
    assert list(t) == ["latency p50", "latency p95", "TTFT p50"]
    assert t["latency p50"]["x"] == [1, 2] and t["latency p50"]["y"] == [2, 5]
    assert [round(v, 6) for v in t["latency p95"]["y"]] == [
        2.9,
        5.9,
    ]  # (linear interpolation, as pandas)
    assert [round(v, 6) for v in t["TTFT p50"]["y"]] == [0.3, 0.5]


def test_a_run_whose_calls_took_no_time_gets_no_latency_chart() -> None:
    from agentlab.view.charts import latency_per_tick_chart

    calls = pd.DataFrame({"tick": [1, 2], "start": [0.0, 1.0], "end": [0.0, 1.0],
                          "first_token": [0.0, 1.0]})  # fmt: skip
    assert latency_per_tick_chart(calls) is None
    assert latency_per_tick_chart(calls.drop(columns="tick")) is None
