"""In-flight (concurrent) LLM requests from call intervals, by a sweep line.

A call is in flight on the half-open interval ``[start, end)``: it counts from the instant
it starts and no longer counts at the instant it ends. So a call ending at *t* and another
starting at *t* never overlap, and a zero-length call (``start == end``) is never in flight.
The timeline is a step function: each row ``(t, in_flight)`` holds on ``[t, next t)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from agentlab.analysis._frame import By, as_by, group_ids, require_columns
from agentlab.analysis.iat import DEFAULT_BY

__all__ = ["inflight_summary_df", "inflight_timeline_df", "sweep_inflight"]


def _sweep(
    starts: np.ndarray, ends: np.ndarray, gid: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sweep many groups at once: (group id, change time, level) sorted by group then time."""
    s = np.asarray(starts, dtype=float)
    e = np.asarray(ends, dtype=float)
    ok = np.isfinite(s) & np.isfinite(e) & (e >= s)
    s, e, g = s[ok], e[ok], gid[ok]
    times = np.concatenate((s, e))
    deltas = np.concatenate((np.ones(len(s)), -np.ones(len(e))))
    groups = np.concatenate((g, g))
    order = np.lexsort((times, groups))
    times, deltas, groups = times[order], deltas[order], groups[order]
    if not len(times):
        return groups, times, deltas.astype(int)
    new = np.r_[True, (groups[1:] != groups[:-1]) | (times[1:] != times[:-1])]
    first = np.flatnonzero(new)
    # Summing the deltas per distinct instant is what makes the interval half-open: at t the
    # ends and starts cancel before the level is read, and start == end adds nothing. Every
    # group's deltas sum to 0, so one running sum over all groups restarts at 0 per group.
    net = np.add.reduceat(deltas, first)
    level = np.cumsum(net).round().astype(int)
    return groups[first], times[first], level


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
    _, t, level = _sweep(s, np.asarray(ends, dtype=float), np.zeros(len(s), dtype=np.int64))
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
    gid, key_table = group_ids(calls, keys)
    g, t, level = _sweep(calls[start].to_numpy(), calls[end].to_numpy(), gid)
    out = key_table.iloc[g].reset_index(drop=True) if keys else pd.DataFrame(index=range(len(t)))
    out["t"] = t
    first = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1] if len(g) else np.array([], int)
    out["t_rel"] = t - np.repeat(t[first], np.diff(np.r_[first, len(g)])) if len(g) else t
    out["in_flight"] = level
    return out


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
    gid, key_table = group_ids(calls, keys)
    n_groups = len(key_table)
    g, t, level = _sweep(calls[start].to_numpy(), calls[end].to_numpy(), gid)
    same = g[1:] == g[:-1]
    dt = np.where(same, np.diff(t), 0.0)  # a level never carries over into the next run
    lv = level[:-1]
    gs = g[:-1]
    weighted = np.bincount(gs, weights=lv * dt, minlength=n_groups)
    busy = np.bincount(gs, weights=np.where(lv > 0, dt, 0.0), minlength=n_groups)
    span = np.bincount(gs, weights=dt, minlength=n_groups)
    peak = np.zeros(n_groups, dtype=int)
    np.maximum.at(peak, g, level)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(span > 0, weighted / span, np.nan)
        busy_fraction = np.where(span > 0, busy / span, np.nan)
    out = key_table.reset_index(drop=True) if keys else pd.DataFrame(index=range(n_groups))
    out["calls"] = np.bincount(gid, minlength=n_groups)
    out["span_s"] = span
    out["mean_in_flight"] = mean
    out["peak_in_flight"] = peak
    out["busy_fraction"] = busy_fraction
    return out
