"""The layers under the agents: the LLM backend (server metrics) and the experiment process.

Backend samples come from ``client.server_metrics()`` (the simulator reports vLLM's
names: ``num_requests_running``, ``num_requests_waiting``, ``generation_tokens_per_s``,
cumulative ``*_tokens_total``); process samples from psutil (``cpu_percent``,
``rss_bytes``). Column names are matched through aliases, and a per-second rate missing
from the samples is derived from its cumulative total, so both the simulator's and a real
vLLM scrape's shapes work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from agentlab.analysis._frame import By, as_by, iter_groups, require_columns
from agentlab.errors import ConfigError

__all__ = ["BACKEND_METRICS", "backend_summary_df", "process_summary_df"]

#: metric name in the output -> accepted input column names, in order of preference
BACKEND_METRICS: dict[str, tuple[str, ...]] = {
    "requests_running": ("requests_running", "num_requests_running"),
    "requests_waiting": ("requests_waiting", "num_requests_waiting"),
    "prompt_tokens_per_s": ("prompt_tokens_per_s",),
    "generation_tokens_per_s": ("generation_tokens_per_s",),
    "in_flight": ("in_flight",),
    "aimd_limit": ("aimd_limit",),
}
# rates that can be derived from a cumulative counter when not sampled directly
_RATE_FROM_TOTAL = {
    "prompt_tokens_per_s": "prompt_tokens_total",
    "generation_tokens_per_s": "generation_tokens_total",
}


def _describe(x: np.ndarray, out: dict[str, Any], name: str) -> None:
    x = x[np.isfinite(x)]
    out[f"{name}_mean"] = float(x.mean()) if len(x) else math.nan
    out[f"{name}_peak"] = float(x.max()) if len(x) else math.nan


def _resolve(df: pd.DataFrame, metrics: Sequence[str]) -> dict[str, tuple[str, str]]:
    """metric -> ("col", column) for a sampled value or ("total", column) for a counter."""
    found: dict[str, tuple[str, str]] = {}
    for metric in metrics:
        names = BACKEND_METRICS.get(metric, (metric,))
        col = next((c for c in names if c in df.columns), None)
        if col is not None:
            found[metric] = ("col", col)
        elif _RATE_FROM_TOTAL.get(metric) in df.columns:
            found[metric] = ("total", _RATE_FROM_TOTAL[metric])
    return found


def backend_summary_df(
    server: pd.DataFrame,
    by: By = "topology",
    *,
    ts: str = "ts",
    metrics: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Backend layer: mean and peak of sampled LLM-server metrics per group.

    Samples are averaged with equal weight (the sampler's interval is regular). A rate
    taken from a cumulative counter uses successive differences over ``ts``.

    Args:
        server: sampled server metrics.
        by: grouping columns.
        ts: sample time column (clock seconds).
        metrics: output metric names (default: every one of :data:`BACKEND_METRICS`
            present); a name requested explicitly but not present raises.

    Returns:
        One row per group: ``samples``, ``duration_s`` and ``<metric>_mean`` /
        ``<metric>_peak``.
    """
    keys = as_by(by)
    require_columns(server, [*keys, ts], "server metrics")
    wanted = list(BACKEND_METRICS) if metrics is None else list(metrics)
    found = _resolve(server, wanted)
    missing = [m for m in wanted if m not in found]
    if (metrics is not None and missing) or not found:
        raise ConfigError(
            f"server metrics: no column for {missing}; accepted names: "
            f"{ {m: BACKEND_METRICS.get(m, (m,)) for m in missing} }; "
            f"available: {sorted(map(str, server.columns))}"
        )
    rows = []
    for key, sub in iter_groups(server, keys):
        sub = sub.sort_values(ts, kind="mergesort")
        t = sub[ts].to_numpy(dtype=float)
        row: dict[str, Any] = {
            **key,
            "samples": len(sub),
            "duration_s": float(t[-1] - t[0]) if len(t) else 0.0,
        }
        for metric, (kind, col) in found.items():
            v = sub[col].to_numpy(dtype=float)
            if kind == "total":
                dt = np.diff(t)
                v = np.divide(np.diff(v), dt, out=np.full(len(dt), np.nan), where=dt > 0)
            _describe(v, row, metric)
        rows.append(row)
    return pd.DataFrame(rows)


def process_summary_df(
    process: pd.DataFrame,
    by: By = None,
    *,
    ts: str = "ts",
    cpu: str = "cpu_percent",
    rss: str = "rss_bytes",
) -> pd.DataFrame:
    """Process layer: CPU percent and resident memory of the experiment process.

    Returns:
        One row per group (one row overall by default): ``samples``, ``duration_s``,
        ``cpu_percent_mean``/``_peak`` and ``rss_mb_mean``/``_peak`` (MiB).
    """
    keys = as_by(by)
    require_columns(process, [*keys, ts, cpu, rss], "process metrics")
    rows = []
    for key, sub in iter_groups(process, keys):
        row: dict[str, Any] = {
            **key,
            "samples": len(sub),
            "duration_s": float(sub[ts].max() - sub[ts].min()) if len(sub) else 0.0,
        }
        _describe(sub[cpu].to_numpy(dtype=float), row, "cpu_percent")
        _describe(sub[rss].to_numpy(dtype=float) / 2**20, row, "rss_mb")
        rows.append(row)
    return pd.DataFrame(rows)
