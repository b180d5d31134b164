"""Reading a sweep back: a readable per-point table and replicates with confidence intervals.

- :func:`points_table` — the sweep's points as a compact table for a terminal: swept
  parameters, status, duration and the recorded scalars, numbers rounded, long values cut.
- :func:`aggregate_df` — points that differ only in the replicate parameter (``seed`` by
  default) are replicates: one row per remaining parameter combination with the mean,
  standard deviation, count and a Student-t confidence interval of each metric.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentlab.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["aggregate_df", "points_table", "swept_columns"]

_PATHS = ("tables/", "figures/")


def swept_columns(df: pd.DataFrame, params: Sequence[str]) -> list[str]:
    """The parameters whose value differs between points (the rest are constants)."""
    out = []
    for c in params:
        if c in df.columns and df[c].map(lambda v: json.dumps(v, default=str)).nunique() > 1:
            out.append(c)
    return out


def points_table(df: pd.DataFrame, params: Sequence[str]) -> pd.DataFrame:
    """A copy of a ``Sweep.df()`` for reading: swept parameters, status, duration and
    recorded scalars (table/figure paths and errors left out)."""
    swept = swept_columns(df, params) or [c for c in params if c in df.columns][:1]
    skip = {"point_id", "error", "status", "duration_s", *params}
    metrics = [
        c
        for c in df.columns
        if c not in skip
        and not df[c].map(lambda v: isinstance(v, str) and v.startswith(_PATHS)).any()
    ]
    cols = [*swept, "status", "duration_s", *metrics]
    return df[[c for c in cols if c in df.columns]]


def aggregate_df(
    df: pd.DataFrame,
    by: Sequence[str],
    metrics: Sequence[str],
    *,
    replicate: str = "seed",
    ci: float = 0.95,
    ok_only: bool = True,
) -> pd.DataFrame:
    """Mean, std, n and a two-sided Student-t ``ci`` interval of each metric over the
    replicates of every ``by`` combination.

    Args:
        df: one row per point (``Sweep.df()``).
        by: the parameters that define a combination (e.g. ``["agents", "topology"]``).
        metrics: recorded numeric columns to aggregate.
        replicate: the parameter that varies between replicates (only checked to exist).
        ci: confidence level in (0, 1).
        ok_only: aggregate only points whose status is ``ok``.

    Returns:
        One row per combination: ``by`` columns, ``n``, and per metric ``<m>_mean``,
        ``<m>_std``, ``<m>_ci_low``, ``<m>_ci_high`` (NaN bounds when n < 2).
    """
    import pandas as pd
    from scipy import stats

    if not 0 < ci < 1:
        raise ConfigError(f"ci={ci!r}; give a confidence level between 0 and 1, e.g. 0.95")
    missing = [c for c in [*by, *metrics, replicate] if c not in df.columns]
    if missing:
        raise ConfigError(f"columns {missing} not in the sweep table; have {list(df.columns)}")
    data = df[df["status"] == "ok"] if ok_only and "status" in df.columns else df
    rows = []
    for key, grp in data.groupby(list(by), sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row: dict[str, Any] = dict(zip(by, key, strict=True))
        row["n"] = int(grp[replicate].nunique())
        for m in metrics:
            vals = pd.to_numeric(grp[m], errors="coerce").dropna()
            n = len(vals)
            mean = float(vals.mean()) if n else math.nan
            sd = float(vals.std(ddof=1)) if n > 1 else math.nan
            half = (
                float(stats.t.ppf(0.5 + ci / 2, n - 1)) * sd / math.sqrt(n) if n > 1 else math.nan
            )
            row.update(
                {
                    f"{m}_mean": mean,
                    f"{m}_std": sd,
                    f"{m}_ci_low": mean - half,
                    f"{m}_ci_high": mean + half,
                }
            )
        rows.append(row)
    return pd.DataFrame(rows)
