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
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from agentlab.analysis._frame import (
    DEFAULT_EPS,
    DEFAULT_ZEROS,
    By,
    ZerosPolicy,
    as_by,
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
    keep_id = id_col is not None and id_col in sel.columns
    frames: list[pd.DataFrame] = []
    for key, sub in iter_groups(sel, keys):
        # mergesort is stable: ties keep their recorded order, so output is deterministic
        sub = sub.sort_values(start, kind="mergesort")
        t = sub[start].to_numpy(dtype=float)
        if len(t) < 2:
            continue
        out = pd.DataFrame(key, index=range(len(t) - 1))
        out["index"] = np.arange(1, len(t))
        out["start"] = t[1:]
        out["prev_start"] = t[:-1]
        out["iat"] = np.diff(t)
        if keep_id:
            out["request_id"] = sub[id_col].to_numpy()[1:]
        frames.append(out)
    if not frames:
        cols = [*keys, "index", "start", "prev_start", "iat"] + (["request_id"] if keep_id else [])
        return pd.DataFrame({c: pd.Series(dtype=float) for c in cols})
    return pd.concat(frames, ignore_index=True)


def _clusters(iat: np.ndarray, threshold: float) -> np.ndarray:
    """Cluster sizes of one run (calls per cluster) from its IAT sequence."""
    # a new cluster starts at call 0 and after every IAT >= threshold
    breaks = np.flatnonzero(iat >= threshold) + 1
    bounds = np.concatenate(([0], breaks, [len(iat) + 1]))
    return np.diff(bounds)


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
    rows: list[dict[str, Any]] = []
    for key, sub in iter_groups(iats, keys):
        sizes = _clusters(sub[iat].to_numpy(dtype=float), threshold)
        for i, s in enumerate(sizes[sizes >= 2]):
            rows.append({**key, "burst": i, "size": int(s)})
    return pd.DataFrame(rows, columns=[*keys, "burst", "size"])


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
        ``t1``, ``duration`` and ``calls`` (arrivals inside an ON period; 0 for OFF).
    """
    _check_threshold(threshold)
    keys = as_by(by)
    require_columns(iats, [*keys, iat, start, prev_start], "iats")
    rows: list[dict[str, Any]] = []
    for key, sub in iter_groups(iats, keys):
        gaps = sub[iat].to_numpy(dtype=float)
        times = np.concatenate((sub[prev_start].to_numpy(dtype=float)[:1], sub[start].to_numpy()))
        on_start = 0  # index into times of the first arrival of the current ON period
        for i, g in enumerate(gaps):
            if g >= threshold:
                rows.append(_on_row(key, times, on_start, i))
                rows.append(
                    {**key, "period": "off", "t0": times[i], "t1": times[i + 1], "calls": 0}
                )
                on_start = i + 1
        rows.append(_on_row(key, times, on_start, len(times) - 1))
    out = pd.DataFrame(rows, columns=[*keys, "period", "t0", "t1", "calls"])
    out["duration"] = out["t1"] - out["t0"]
    return out


def _on_row(key: dict[str, Any], times: np.ndarray, first: int, last: int) -> dict[str, Any]:
    return {**key, "period": "on", "t0": times[first], "t1": times[last], "calls": last - first + 1}


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
    rows = []
    for key, sub in iter_groups(sel, keys):
        dur = float(sub[end].max() - sub[start].min())
        rows.append(
            {
                **key,
                "calls": len(sub),
                "duration_s": dur,
                "call_rate": len(sub) / dur if dur > 0 else math.nan,
            }
        )
    return pd.DataFrame(rows, columns=[*keys, "calls", "duration_s", "call_rate"])
