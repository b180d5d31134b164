"""Small helpers shared by the analysis modules: column checks, grouping, zero handling."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from agentlab.errors import ConfigError

__all__ = [
    "DEFAULT_EPS",
    "DEFAULT_ZEROS",
    "ZerosPolicy",
    "as_by",
    "as_sample",
    "group_ids",
    "iter_groups",
    "percentile",
    "positive_values",
    "require_columns",
    "select_key",
]

ZerosPolicy = Literal["floor", "drop", "error"]
ZEROS_CHOICES: tuple[str, ...] = ("floor", "drop", "error")
#: Default treatment of IATs that are exactly zero (ties): floor them at ``DEFAULT_EPS``.
DEFAULT_ZEROS: ZerosPolicy = "floor"
#: Timing resolution in seconds used to floor zero IATs (1 µs, below any real clock jitter).
DEFAULT_EPS = 1e-6

By = str | Sequence[str] | None


def as_by(by: By) -> list[str]:
    """Normalise a ``by`` argument (``None``, one name or several) to a list of names."""
    if by is None:
        return []
    if isinstance(by, str):
        return [by]
    return list(by)


def require_columns(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    """Raise :class:`ConfigError` naming every column of ``columns`` missing from ``df``."""
    if not isinstance(df, pd.DataFrame):
        hint = ""
        for method in ("calls_df", "llm_calls_df"):  # experiment results, a Run
            if hasattr(df, method):
                hint = f" (its calls: .{method}())"
        raise ConfigError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}{hint}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        hint = ""
        if what == "iats" and "start" in df.columns and "end" in df.columns:
            hint = "; this looks like a calls table: take its IATs first, iat_df(calls)"
        raise ConfigError(
            f"{what}: missing column(s) {missing}; available: {sorted(map(str, df.columns))}{hint}"
        )


def iter_groups(df: pd.DataFrame, by: list[str]) -> Iterator[tuple[dict[str, Any], pd.DataFrame]]:
    """Yield ``({key column: value}, sub-frame)`` per group; one group when ``by`` is empty.

    Missing key values (NaN) form their own group rather than being silently dropped.
    """
    if not by:
        yield {}, df
        return
    for key, sub in df.groupby(by, sort=True, dropna=False):
        values = key if isinstance(key, tuple) else (key,)
        yield dict(zip(by, values, strict=True)), sub


def group_ids(df: pd.DataFrame, by: list[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """Integer group id per row (groups in sorted key order) and the key table.

    Row ``i`` of the key table holds the ``by`` values of group ``i``. Vectorised
    alternative to :func:`iter_groups` for per-run work over hundreds of runs.
    """
    if not by:
        return np.zeros(len(df), dtype=np.int64), pd.DataFrame(index=range(1 if len(df) else 0))
    g = df.groupby(by, sort=True, dropna=False)
    keys = g.size().reset_index()[by]
    return g.ngroup().to_numpy(dtype=np.int64), keys


def select_key(df: pd.DataFrame, key: dict[str, Any]) -> pd.DataFrame:
    """Rows of ``df`` matching every ``column == value`` of ``key`` (NaN matches NaN)."""
    mask = np.ones(len(df), dtype=bool)
    for col, val in key.items():
        mask &= (df[col].isna() if pd.isna(val) else df[col] == val).to_numpy()
    return df[mask]


def percentile(x: np.ndarray, q: float) -> float:
    """The ``q``-th percentile of the finite values of ``x`` (NaN when there are none)."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if len(x) else math.nan


def as_sample(x: Any, what: str = "IATs") -> np.ndarray:
    """``x`` (an array, Series or list of numbers) as a 1-D float array. A DataFrame or
    values that are not numbers are refused with what to pass instead: ``fit_iat(calls)``
    failed deep in numpy on the first request id ("could not convert string to float")."""
    if isinstance(x, pd.DataFrame):
        if "iat" in x.columns:
            hint = "pass its column (df['iat']: one pooled sample) or fit per group: fits_df(df)"
        elif "start" in x.columns:
            hint = ("it looks like a calls table: take its IATs first, fit_iat(iat_df(calls)"
                    "['iat']), or per topology fits_df(iat_df(calls))")  # fmt: skip
        else:
            hint = "pass one column of it"
        cols = list(map(str, x.columns))
        more = ", ..." if len(cols) > 8 else ""
        raise ConfigError(
            f"expected a sample of {what} in seconds (an array, Series or list), got a "
            f"DataFrame with columns [{', '.join(cols[:8])}{more}]: {hint}"
        )
    try:
        return np.asarray(x, dtype=float).ravel()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"expected {what} as numbers in seconds, got {type(x).__name__}: "
                          f"{exc}") from None  # fmt: skip


def positive_values(
    x: Any, *, zeros: ZerosPolicy = DEFAULT_ZEROS, eps: float = DEFAULT_EPS, what: str = "IATs"
) -> np.ndarray:
    """Finite values of ``x`` made strictly positive, as the log-scale fits need.

    NaNs are dropped. Negative values are an error (IATs from sorted start times never are).
    Zeros — ties, e.g. fan-out calls that start at the same virtual instant — follow
    ``zeros``: ``"floor"`` replaces them by ``eps`` (keeps the sample size, so the fan-out
    mode still counts), ``"drop"`` removes them (describes only the positive part),
    ``"error"`` raises.
    """
    if zeros not in ZEROS_CHOICES:
        raise ConfigError(f"zeros={zeros!r} is not valid; choose one of {list(ZEROS_CHOICES)}")
    if not eps > 0:
        raise ConfigError(f"eps must be > 0 seconds, got {eps!r}")
    arr = as_sample(x, what)
    arr = arr[np.isfinite(arr)]
    if (arr < 0).any():
        raise ConfigError(f"{what} must be >= 0; found minimum {arr.min()!r}")
    small = arr < eps
    if small.any():
        if zeros == "error":
            raise ConfigError(
                f"{int(small.sum())} {what} are below eps={eps!r} (zeros/ties); "
                "pass zeros='floor' or zeros='drop'"
            )
        arr = np.maximum(arr, eps) if zeros == "floor" else arr[~small]
    return arr
