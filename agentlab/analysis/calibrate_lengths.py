"""Reply lengths for :mod:`agentlab.analysis.calibrate`: a log-normal per stage, or a law
per call label (qualified by topology, round and task category) keeping its quartiles, p95
and mean, and how a group's lengths move together (``length_corr``: the intraclass
correlation of the length scores within runs)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from agentlab.errors import ConfigError
from agentlab.llm.sim_lengths import LengthDist

__all__ = [
    "QUALIFIERS",
    "fit_length_corr",
    "fit_length_laws",
    "fit_stage_lengths",
    "stage_length_ci",
]

_MIN_STAGE_CALLS = 5
_MIN_LAW_CALLS = 10  # calls per label key for a quantile law (fewer: the pooled key)


def fit_stage_lengths(d: pd.DataFrame, stage_col: str) -> dict[str, tuple[float, float, int]]:
    out = {}
    logs = np.log(d["completion_tokens"].to_numpy())
    out[""] = (float(np.exp(logs.mean())), float(logs.std()), len(logs))
    for stage, g in d.groupby(stage_col, dropna=True):
        if len(g) >= _MIN_STAGE_CALLS:
            lg = np.log(g["completion_tokens"].to_numpy())
            out[str(stage)] = (float(np.exp(lg.mean())), float(lg.std()), len(g))
    return out


#: label columns that qualify a length key (sim_lengths.length_keys): column -> prefix
QUALIFIERS = {"topology": "@", "round": "#", "task_category": "/"}


def _length_key(base: Any, quals: dict[str, Any]) -> str | None:
    if base is None or (isinstance(base, float) and math.isnan(base)) or base is pd.NA:
        return None
    key = str(base)
    for col in QUALIFIERS:  # the order length_keys reads: name@topology#round/category
        v = quals.get(col)
        if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
            continue
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        key += f"{QUALIFIERS[col]}{v}"
    return key


def fit_length_laws(d: pd.DataFrame, by: list[str]) -> dict[str, tuple[LengthDist, int]]:
    """Length laws per label key: the first column of ``by`` names the call (e.g. ``call``
    or ``stage``), the others (``round``, ``topology``) qualify it; each key with at least
    :data:`_MIN_LAW_CALLS` calls gets the empirical quartiles, p95 and mean
    (:meth:`LengthDist.from_quantiles`), every base name also its pooled law."""
    base, quals = by[0], by[1:]
    keys = []
    for _, r in d.iterrows():
        q = {c: r[c] for c in quals}
        keys.append((_length_key(r[base], q), _length_key(r[base], {})))
    tokens = d["completion_tokens"].to_numpy()
    groups: dict[str, list[float]] = {}
    for (k, kb), n in zip(keys, tokens, strict=True):
        for key in {k, kb} - {None}:
            groups.setdefault(str(key), []).append(float(n))
    cap = float(tokens.max())
    out = {}
    for key, xs in groups.items():
        if len(xs) < _MIN_LAW_CALLS:
            continue
        p25, p50, p75, p95 = np.percentile(xs, [25, 50, 75, 95])
        mean = float(np.mean(xs))
        out[key] = (_law(p25, p50, p75, mean, p95, cap + 1), len(xs))
    return out


def fit_length_corr(
    d: pd.DataFrame,
    by: list[str],
    laws: dict[str, tuple[LengthDist, int]],
    group_col: str,
    rng: np.random.Generator,
    n_boot: int,
) -> dict[str, tuple[float, float, float, int]]:
    """Per call label (``by[0]``): (rho, 95 % interval, calls) of its length scores within
    ``group_col`` groups: each call's score is ``Phi^-1`` of its length's probability under
    the most specific fitted law for its labels (the simulator's draw inverted; a length at
    the largest seen, the output cap, scores the middle of the law's mass from there up),
    and rho their one-way intraclass correlation, clipped to [0, 0.99]. Labels with fewer
    than 3 groups of 2 or more calls are left out."""
    from statistics import NormalDist

    inv = NormalDist().inv_cdf
    base, quals = by[0], by[1:]
    cap = float(d["completion_tokens"].max())
    scores: dict[str, list[tuple[Any, float]]] = {}
    for _, r in d.iterrows():
        group, name = r[group_col], _length_key(r[base], {})
        if name is None or group is None or (isinstance(group, float) and math.isnan(group)):
            continue
        key = _length_key(r[base], {c: r[c] for c in quals})
        law = (laws.get(str(key)) or laws.get(name) or (None, 0))[0]
        if law is None:
            continue
        n = float(r["completion_tokens"])
        u = (1.0 + law.cdf(n - 1.0)) / 2.0 if n >= cap else law.cdf(n)
        u = min(max(u, 1e-6), 1.0 - 1e-6)
        scores.setdefault(name, []).append((group, inv(u)))
    out = {}
    for name, pairs in scores.items():
        by_group: dict[Any, list[float]] = {}
        for g, z in pairs:
            by_group.setdefault(g, []).append(z)
        groups = [np.asarray(v) for v in by_group.values() if len(v) >= 2]
        if len(groups) < 3:
            continue
        rho = _icc(groups)
        boot = [_icc([groups[i] for i in rng.integers(0, len(groups), len(groups))])
                for _ in range(n_boot)]  # fmt: skip
        lo, hi = np.percentile(boot, [2.5, 97.5]) if boot else (math.nan, math.nan)
        out[name] = (rho, float(lo), float(hi), sum(len(g) for g in groups))
    return out


def _icc(groups: list[np.ndarray]) -> float:
    """One-way random-effects intraclass correlation of unequal groups (ANOVA estimator:
    ``(MSB - MSW) / (MSB + (n0 - 1) MSW)``, ``n0`` the size-adjusted mean group size),
    clipped to [0, 0.99]."""
    sizes = np.array([len(g) for g in groups], dtype=float)
    k, total = len(groups), sizes.sum()
    means = np.array([g.mean() for g in groups])
    grand = sum(g.sum() for g in groups) / total
    msb = float((sizes * (means - grand) ** 2).sum() / (k - 1))
    msw = float(sum(((g - m) ** 2).sum() for g, m in zip(groups, means, strict=True)) / (total - k))
    n0 = (total - (sizes**2).sum() / total) / (k - 1)
    den = msb + (n0 - 1.0) * msw
    rho = (msb - msw) / den if den > 0 else 0.0
    return float(min(max(rho, 0.0), 0.99))


def _law(p25: float, p50: float, p75: float, mean: float, p95: float, cap: float) -> LengthDist:
    """Through the quartiles, p95 and mean; where a few calls' p95 and mean do not hold
    together (the p95 of ~15 calls is near their largest), through the quartiles and mean
    only (the body's upper slope up to z95); else through the quartiles and p95."""
    for m, q in ((mean, p95), (mean, None), (None, p95)):
        try:
            law = LengthDist.from_quantiles(p25, p50, p75, m, q, cap=cap)
        except ConfigError:
            continue
        if m is None or law.mean(cap) >= 0.99 * m:  # the far slope's bound can fall short
            return law
    return LengthDist.from_quantiles(p25, p50, p75)


def stage_length_ci(
    d: pd.DataFrame, stage_col: str, stage: str, rng: np.random.Generator, n_boot: int, k: int
) -> dict[str, float]:
    vals = (
        d["completion_tokens"] if not stage else d.loc[d[stage_col] == stage, "completion_tokens"]
    )
    lg = np.log(vals.to_numpy())
    est = []
    for _ in range(n_boot):
        s = lg[rng.integers(0, len(lg), len(lg))]
        est.append(float(np.exp(s.mean())) if k == 0 else float(s.std()))
    return {"ci_low": float(np.percentile(est, 2.5)), "ci_high": float(np.percentile(est, 97.5))}
