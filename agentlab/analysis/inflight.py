"""In-flight (concurrent) LLM requests from call intervals, by a sweep line.

A call is in flight on the half-open interval ``[start, end)``: it counts from the instant
it starts and no longer counts at the instant it ends. So a call ending at *t* and another
starting at *t* never overlap, and a zero-length call (``start == end``) is never in flight.
The timeline is a step function: each row ``(t, in_flight)`` holds on ``[t, next t)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from agentlab.analysis._frame import By, as_by, iter_groups, require_columns
from agentlab.analysis.iat import DEFAULT_BY

__all__ = ["inflight_summary_df", "inflight_timeline_df", "sweep_inflight"]


def sweep_inflight(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step function of concurrent intervals ``[start, end)``.

    Args:
        starts: interval start times.
        ends: interval end times (NaN ends, e.g. unfinished calls, are dropped with their start).

    Returns:
        ``(t, level)``: sorted distinct change times and the number in flight on
        ``[t[i], t[i+1])``; the last level is always 0.
    """
    s = np.asarray(starts, dtype=float)
    e = np.asarray(ends, dtype=float)
    ok = np.isfinite(s) & np.isfinite(e) & (e >= s)
    s, e = s[ok], e[ok]
    times = np.concatenate((s, e))
    deltas = np.concatenate((np.ones(len(s)), -np.ones(len(e))))
    # Summing the deltas per distinct instant is what makes the interval half-open: at t the
    # ends and starts cancel before the level is read, and start == end adds nothing.
    t, inv = np.unique(times, return_inverse=True)
    net = np.bincount(inv, weights=deltas, minlength=len(t))
    level = np.cumsum(net).round().astype(int)
    return t, level


def inflight_timeline_df(
    calls: pd.DataFrame, by: By = DEFAULT_BY, *, start: str = "start", end: str = "end"
) -> pd.DataFrame:
    """In-flight request count over time, per run.

    Returns:
        One row per change point: the ``by`` columns, ``t`` (seconds, the clock of the
        records), ``t_rel`` (seconds since the run's first start) and ``in_flight``, valid
        until the next row of the same run.
    """
    keys = as_by(by)
    require_columns(calls, [*keys, start, end], "calls")
    frames = []
    for key, sub in iter_groups(calls, keys):
        t, level = sweep_inflight(sub[start].to_numpy(), sub[end].to_numpy())
        if not len(t):
            continue
        out = pd.DataFrame(key, index=range(len(t)))
        out["t"] = t
        out["t_rel"] = t - t[0]
        out["in_flight"] = level
        frames.append(out)
    if not frames:
        return pd.DataFrame(columns=[*keys, "t", "t_rel", "in_flight"])
    return pd.concat(frames, ignore_index=True)


def _summary(t: np.ndarray, level: np.ndarray) -> dict[str, Any]:
    if len(t) < 2:
        return {
            "span_s": 0.0,
            "mean_in_flight": math.nan,
            "peak_in_flight": 0,
            "busy_fraction": math.nan,
        }
    dt = np.diff(t)
    span = float(t[-1] - t[0])
    lv = level[:-1]
    return {
        "span_s": span,
        # time-weighted mean over [first start, last end] = sum of latencies / span
        "mean_in_flight": float(np.dot(lv, dt) / span),
        "peak_in_flight": int(level.max()),
        "busy_fraction": float(dt[lv > 0].sum() / span),
    }


def inflight_summary_df(
    calls: pd.DataFrame, by: By = DEFAULT_BY, *, start: str = "start", end: str = "end"
) -> pd.DataFrame:
    """Mean (time-weighted), peak and busy fraction of in-flight requests per run.

    The window is ``[first start, last end]`` of each run's calls.

    Returns:
        One row per run: the ``by`` columns, ``calls``, ``span_s``, ``mean_in_flight``,
        ``peak_in_flight`` and ``busy_fraction`` (share of the window with >= 1 call).
    """
    keys = as_by(by)
    require_columns(calls, [*keys, start, end], "calls")
    rows = []
    for key, sub in iter_groups(calls, keys):
        t, level = sweep_inflight(sub[start].to_numpy(), sub[end].to_numpy())
        rows.append({**key, "calls": len(sub), **_summary(t, level)})
    cols = [*keys, "calls", "span_s", "mean_in_flight", "peak_in_flight", "busy_fraction"]
    return pd.DataFrame(rows, columns=cols)
