"""Inter-arrival times (IATs) of LLM calls, bursts, ON/OFF periods, log histograms, call rate.

An *arrival* is the start of one LLM call. Within one run (the ``by`` key, by default
``("topology", "run_id")``) the calls of one stage are sorted by start time and the IAT of
call *i* is ``start[i] - start[i-1]``; runs are never chained together, so a run with k
calls contributes k - 1 IATs. Pooling across runs is simply concatenating those rows.

Bursts: consecutive calls whose IAT is strictly below ``threshold`` (default 50 ms) belong
to the same *cluster*. A cluster of two or more calls is a *burst*. The *burst fraction* is
the fraction of IATs below the threshold. ON/OFF periods alternate per run: an ON period
spans a cluster (first to last arrival; a lone call is an ON period of length 0) and an OFF
period is the silent gap between clusters, i.e. an IAT at or above the threshold. So the
ON and OFF durations of a run add up to ``last start - first start``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from agentlab.analysis._frame import (
    DEFAULT_EPS,
    DEFAULT_ZEROS,
    By,
    ZerosPolicy,
    as_by,
    group_ids,
    iter_groups,
    positive_values,
    require_columns,
    select_key,
)
from agentlab.errors import ConfigError

__all__ = [
    "DEFAULT_BY",
    "DEFAULT_STAGE",
    "DEFAULT_THRESHOLD",
    "burst_sizes_df",
    "burst_summary_df",
    "call_rate_df",
    "iat_df",
    "log_histogram_df",
    "on_off_df",
]

#: One run of one topology: the unit inside which IATs are computed.
DEFAULT_BY: tuple[str, ...] = ("topology", "run_id")
#: The stage whose arrivals the paper models.
DEFAULT_STAGE = "discussion"
#: Burst threshold in seconds (an IAT strictly below it joins the previous call's burst).
DEFAULT_THRESHOLD = 0.05


def _check_threshold(threshold: float) -> None:
    if not (isinstance(threshold, int | float) and threshold > 0 and math.isfinite(threshold)):
        raise ConfigError(f"threshold must be a positive number of seconds, got {threshold!r}")


def _select_stage(
    calls: pd.DataFrame, stage: str | Sequence[str] | None, stage_col: str
) -> pd.DataFrame:
    if stage is None:
        return calls
    require_columns(calls, [stage_col], "calls")
    stages = [stage] if isinstance(stage, str) else list(stage)
    return calls[calls[stage_col].isin(stages)]


def iat_df(
    calls: pd.DataFrame,
    stage: str | Sequence[str] | None = DEFAULT_STAGE,
    by: By = DEFAULT_BY,
    *,
    start: str = "start",
    stage_col: str = "stage",
    id_col: str | None = "request_id",
) -> pd.DataFrame:
    """IATs per run from the calls of ``stage`` sorted by start time.

    Args:
        calls: one row per LLM call (the ``llm_calls`` dataset).
        stage: stage name(s) to keep; ``None`` keeps every call.
        by: columns identifying one run (IATs never cross runs).
        start: column with the call start time in seconds.
        stage_col: column with the stage label.
        id_col: request id column copied to the output when present (``None`` to skip).

    Returns:
        One row per IAT: the ``by`` columns, ``index`` (position of the later call in its
        run, from 1), ``start`` (arrival time of the later call), ``prev_start`` and ``iat``
        in seconds, plus ``request_id`` of the later call when available. Ties give 0.
    """
    keys = as_by(by)
    require_columns(calls, [*keys, start], "calls")
    sel = _select_stage(calls, stage, stage_col)
    if sel.empty and len(calls):
        # the default keeps the topology workflow's discussion calls: a society's calls
        # carry no stage, and an empty table here made every IAT statistic NaN, unexplained
        present = sorted(map(str, calls[stage_col].dropna().unique()))[:10]
        warnings.warn(
            f"iat_df: none of the {len(calls)} calls has {stage_col} {stage!r} "
            f"({stage_col}s present: {present or 'none'}); stage=None keeps every call",
            stacklevel=2,
        )
    sel = sel[np.isfinite(sel[start].to_numpy(dtype=float))]
    keep_id = id_col is not None and id_col in sel.columns
    gid, _ = group_ids(sel, keys)
    t = sel[start].to_numpy(dtype=float)
    # primary key: run; secondary: start. np.lexsort is stable, so ties keep recorded order
    order = np.lexsort((t, gid))
    g, ts = gid[order], t[order]
    pos = np.arange(len(g))
    if len(g):
        first = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
        pos = pos - np.repeat(first, np.diff(np.r_[first, len(g)]))
    later = np.flatnonzero(pos > 0)  # every call but the first of its run
    out = sel.iloc[order[later]][keys].reset_index(drop=True)
    out["index"] = pos[later]
    out["start"] = ts[later]
    out["prev_start"] = ts[later - 1]
    out["iat"] = ts[later] - ts[later - 1]
    if keep_id:
        out["request_id"] = sel[id_col].to_numpy()[order[later]]
    return out


@dataclass
class _Clusters:
    """Per-call view of an IAT table, all runs at once (vectorised over hundreds of runs)."""

    keys: pd.DataFrame  # row g = the key values of run g
    run: np.ndarray  # run id of each cluster
    size: np.ndarray  # calls in each cluster
    t0: np.ndarray | None  # first / last arrival of each cluster (when times are known)
    t1: np.ndarray | None


def _clusters(
    iats: pd.DataFrame,
    keys: list[str],
    threshold: float,
    iat: str,
    times: tuple[str, str] | None = None,
) -> _Clusters:
    gid, key_table = group_ids(iats, keys)
    order = np.argsort(gid, kind="stable")  # runs together, arrival order kept inside
    g = gid[order]
    gaps = iats[iat].to_numpy(dtype=float)[order]
    first_rows = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1] if len(g) else np.array([], int)
    # one entry per call: a run's first call (inserted before its first IAT row) opens a
    # cluster, and so does every call whose IAT is at or above the threshold
    opens = np.insert(gaps >= threshold, first_rows, True)
    call_run = np.insert(g, first_rows, g[first_rows])
    cid = np.cumsum(opens) - 1
    size = np.bincount(cid, minlength=int(opens.sum()))
    run = call_run[opens]
    t0 = t1 = None
    if times is not None:
        start = iats[times[0]].to_numpy(dtype=float)[order]
        prev = iats[times[1]].to_numpy(dtype=float)[order]
        t = np.insert(start, first_rows, prev[first_rows])
        t0 = t[opens]
        last = np.r_[np.flatnonzero(opens)[1:], len(t)] - 1
        t1 = t[last]
    return _Clusters(key_table, run, size, t0, t1)


def _with_keys(cl: _Clusters, runs: np.ndarray, keys: list[str]) -> pd.DataFrame:
    if keys:
        return cl.keys.iloc[runs].reset_index(drop=True)
    return pd.DataFrame(index=range(len(runs)))


def burst_sizes_df(
    iats: pd.DataFrame,
    threshold: float = DEFAULT_THRESHOLD,
    by: By = DEFAULT_BY,
    *,
    iat: str = "iat",
) -> pd.DataFrame:
    """Sizes (number of calls) of the bursts in each run: clusters of two or more calls.

    Args:
        iats: output of :func:`iat_df` (rows in arrival order within each run).
        threshold: burst threshold in seconds; an IAT strictly below it joins the burst.
        by: run key columns.
        iat: IAT column.

    Returns:
        One row per burst: the ``by`` columns, ``burst`` (0-based within the run), ``size``.
    """
    _check_threshold(threshold)
    keys = as_by(by)
    require_columns(iats, [*keys, iat], "iats")
    cl = _clusters(iats, keys, threshold, iat)
    burst = cl.size >= 2
    runs = cl.run[burst]
    out = _with_keys(cl, runs, keys)
    # 0-based rank of each burst inside its run (runs are contiguous and in order)
    firsts = np.r_[0, np.flatnonzero(runs[1:] != runs[:-1]) + 1] if len(runs) else runs
    out["burst"] = np.arange(len(runs)) - np.repeat(firsts, np.diff(np.r_[firsts, len(runs)]))
    out["size"] = cl.size[burst].astype(int)
    return out


def on_off_df(
    iats: pd.DataFrame,
    threshold: float = DEFAULT_THRESHOLD,
    by: By = DEFAULT_BY,
    *,
    iat: str = "iat",
    start: str = "start",
    prev_start: str = "prev_start",
) -> pd.DataFrame:
    """Alternating ON/OFF periods per run (see the module docstring for the definitions).

    Returns:
        One row per period: the ``by`` columns, ``period`` (``"on"``/``"off"``), ``t0``,
        ``t1``, ``calls`` (arrivals inside an ON period; 0 for OFF) and ``duration``.
    """
    _check_threshold(threshold)
    keys = as_by(by)
    require_columns(iats, [*keys, iat, start, prev_start], "iats")
    cl = _clusters(iats, keys, threshold, iat, times=(start, prev_start))
    assert cl.t0 is not None and cl.t1 is not None
    on = _with_keys(cl, cl.run, keys)
    on["period"], on["t0"], on["t1"], on["calls"] = "on", cl.t0, cl.t1, cl.size
    on["_run"], on["_kind"], on["_seq"] = cl.run, 0, np.arange(len(cl.run))
    # an OFF period runs from the end of one cluster to the start of the next in its run
    nxt = np.flatnonzero(cl.run[1:] == cl.run[:-1])
    off = _with_keys(cl, cl.run[nxt], keys)
    off["period"], off["t0"], off["t1"], off["calls"] = "off", cl.t1[nxt], cl.t0[nxt + 1], 0
    off["_run"], off["_kind"], off["_seq"] = cl.run[nxt], 1, nxt
    both = pd.concat([on, off], ignore_index=True)
    both = both.sort_values(["_run", "_seq", "_kind"], kind="mergesort")
    out = both.drop(columns=["_run", "_kind", "_seq"]).reset_index(drop=True)
    out["duration"] = out["t1"] - out["t0"]
    return out


def burst_summary_df(
    iats: pd.DataFrame,
    threshold: float = DEFAULT_THRESHOLD,
    by: By = "topology",
    *,
    run_by: By = DEFAULT_BY,
    iat: str = "iat",
) -> pd.DataFrame:
    """Burst statistics pooled over the runs of each ``by`` group.

    Returns:
        One row per group: ``iats``, ``burst_fraction`` (IATs < threshold / all IATs),
        ``bursts``, ``mean_burst_size``, ``max_burst_size``, ``mean_on_s``, ``mean_off_s``
        and ``threshold``.
    """
    keys = as_by(by)
    runs = as_by(run_by)
    require_columns(iats, [*keys, *runs, iat], "iats")
    sizes = burst_sizes_df(iats, threshold, runs, iat=iat)
    periods = (
        on_off_df(iats, threshold, runs, iat=iat)
        if {"start", "prev_start"} <= set(iats.columns)
        else None
    )
    rows = []
    for key, sub in iter_groups(iats, keys):
        x = sub[iat].to_numpy(dtype=float)
        s = select_key(sizes, key)["size"].to_numpy()
        row: dict[str, Any] = {
            **key,
            "iats": len(x),
            "burst_fraction": float(np.mean(x < threshold)) if len(x) else math.nan,
            "bursts": len(s),
            "mean_burst_size": float(s.mean()) if len(s) else math.nan,
            "max_burst_size": int(s.max()) if len(s) else 0,
        }
        if periods is not None:
            p = select_key(periods, key)
            for kind in ("on", "off"):
                d = p.loc[p["period"] == kind, "duration"]
                row[f"mean_{kind}_s"] = float(d.mean()) if len(d) else math.nan
        row["threshold"] = threshold
        rows.append(row)
    return pd.DataFrame(rows)


def log_histogram_df(
    values: pd.DataFrame | Sequence[float] | np.ndarray,
    by: By = "topology",
    *,
    value: str = "iat",
    bins_per_decade: int = 8,
    zeros: ZerosPolicy = DEFAULT_ZEROS,
    eps: float = DEFAULT_EPS,
) -> pd.DataFrame:
    """Histogram on log-spaced bins aligned to decades (edges ``10**(k / bins_per_decade)``).

    Every group shares the same edge grid, so groups can be compared bin by bin. Values
    are made positive with :func:`~agentlab.analysis._frame.positive_values` (``zeros``).

    Args:
        values: a DataFrame (column ``value``) or a plain array (``by`` then ignored).
        by: grouping columns.
        value: column to histogram.
        bins_per_decade: bins per factor of ten (default 8).
        zeros: treatment of zeros/ties (``"floor"``, ``"drop"``, ``"error"``).
        eps: floor in seconds for ``zeros="floor"``.

    Returns:
        One row per (group, bin) between the group's smallest and largest value: the
        ``by`` columns, ``left``, ``right``, ``center`` (geometric), ``count``,
        ``fraction`` and ``density_per_decade`` (fraction per unit of log10 x, the
        quantity to compare with ``pdf(x) * x * ln 10``).
    """
    if not (isinstance(bins_per_decade, int) and bins_per_decade >= 1):
        raise ConfigError(f"bins_per_decade must be a positive int, got {bins_per_decade!r}")
    if isinstance(values, pd.DataFrame):
        keys = as_by(by)
        require_columns(values, [*keys, value], "values")
        groups = list(iter_groups(values, keys))
    else:
        keys = []
        groups = [({}, pd.DataFrame({value: np.asarray(values, dtype=float)}))]
    frames = []
    for key, sub in groups:
        x = positive_values(sub[value], zeros=zeros, eps=eps)
        if not len(x):
            continue
        lx = np.log10(x) * bins_per_decade
        # tiny slack so an exact edge (e.g. 0.1) is not pushed into the bin below by rounding
        k_lo = math.floor(lx.min() + 1e-9)
        k_hi = max(math.floor(lx.max() + 1e-9) + 1, k_lo + 1)
        edges = 10.0 ** (np.arange(k_lo, k_hi + 1) / bins_per_decade)
        idx = np.clip(np.floor(lx + 1e-9).astype(int) - k_lo, 0, len(edges) - 2)
        counts = np.bincount(idx, minlength=len(edges) - 1)
        out = pd.DataFrame(key, index=range(len(counts)))
        out["left"] = edges[:-1]
        out["right"] = edges[1:]
        out["center"] = np.sqrt(edges[:-1] * edges[1:])
        out["count"] = counts
        out["fraction"] = counts / len(x)
        out["density_per_decade"] = out["fraction"] * bins_per_decade
        frames.append(out)
    if not frames:
        cols = [*keys, "left", "right", "center", "count", "fraction", "density_per_decade"]
        return pd.DataFrame(columns=cols)
    return pd.concat(frames, ignore_index=True)


def call_rate_df(
    calls: pd.DataFrame,
    by: By = DEFAULT_BY,
    *,
    stage: str | Sequence[str] | None = None,
    start: str = "start",
    end: str = "end",
    stage_col: str = "stage",
) -> pd.DataFrame:
    """Calls per second in each run: calls / (last end - first start) over the chosen stages.

    Returns:
        One row per run: the ``by`` columns, ``calls``, ``duration_s`` and ``call_rate``
        (NaN when the run has zero duration).
    """
    keys = as_by(by)
    require_columns(calls, [*keys, start, end], "calls")
    sel = _select_stage(calls, stage, stage_col)
    if sel.empty:
        return pd.DataFrame(columns=[*keys, "calls", "duration_s", "call_rate"])
    agg = (
        sel.assign(_s=sel[start].astype(float), _e=sel[end].astype(float))
        .groupby(keys or (lambda _: 0), sort=True, dropna=False)
        .agg(calls=("_s", "size"), t0=("_s", "min"), t1=("_e", "max"))
    )
    out = agg.reset_index(drop=not keys)
    out["duration_s"] = out["t1"] - out["t0"]
    dur = out["duration_s"].to_numpy(dtype=float)
    out["call_rate"] = np.divide(
        out["calls"].to_numpy(dtype=float), dur, out=np.full(len(dur), np.nan), where=dur > 0
    )
    return out[[*keys, "calls", "duration_s", "call_rate"]]
