"""Maximum-likelihood fits of IAT distributions, with exact KS p-values, AIC and BIC.

Families (location fixed at 0, so every one needs x > 0; see
:func:`~agentlab.analysis._frame.positive_values` for how zeros/ties are handled):

| name          | aliases       | parameters (scipy names) | MLE                                    |
|---------------|---------------|--------------------------|----------------------------------------|
| ``lognorm``   | lognormal     | ``s``, ``scale``         | closed form: std / mean of log x        |
| ``expon``     | exponential   | ``scale``                | closed form: mean                       |
| ``weibull_min`` | weibull     | ``c``, ``scale``         | 1-D root of the profile score (brentq)  |
| ``gamma``     |               | ``a``, ``scale``         | 1-D root of log a - digamma(a) = s      |

The 1-D root equations are exact MLE conditions and are solved to ~1e-12, so these fits
are faster and more reliable than a generic optimiser (they match ``scipy.stats.<dist>.fit(x,
floc=0)``, which the tests check). The KS p-value is the exact one for a *fully specified*
distribution (``scipy.stats.kstwo``); with parameters estimated from the same data it is
conservative — use :func:`~agentlab.analysis.gof.bootstrap_ks_df` for a calibrated one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

from agentlab.analysis._frame import (
    DEFAULT_EPS,
    DEFAULT_ZEROS,
    By,
    ZerosPolicy,
    as_by,
    as_sample,
    iter_groups,
    positive_values,
    require_columns,
)
from agentlab.errors import ConfigError, UnknownNameError

__all__ = [
    "DEFAULT_DISTS",
    "FAMILIES",
    "fit_iat",
    "fit_params",
    "fit_sample",
    "fits_df",
    "frozen_dist",
    "ks_exact",
    "resolve_dists",
]


def _check_spread(x: np.ndarray) -> None:
    if len(x) < 2 or np.ptp(x) == 0:
        raise ConfigError(
            f"need at least two distinct positive values to fit, got n={len(x)} "
            f"({'all equal' if len(x) else 'empty'})"
        )


def _fit_lognorm(x: np.ndarray) -> dict[str, float]:
    lx = np.log(x)
    return {"s": float(lx.std()), "scale": float(math.exp(lx.mean()))}


def _fit_expon(x: np.ndarray) -> dict[str, float]:
    return {"scale": float(x.mean())}


def _bracket_root(f: Callable[[float], float], x0: float, increasing: bool) -> tuple[float, float]:
    """Grow ``[lo, hi]`` around ``x0`` by factors of 2 until ``f`` changes sign."""
    lo = hi = x0
    sign = 1.0 if increasing else -1.0
    for _ in range(200):
        if sign * f(lo) <= 0:
            break
        lo /= 2
    for _ in range(200):
        if sign * f(hi) >= 0:
            break
        hi *= 2
    return lo, hi


def _fit_weibull(x: np.ndarray) -> dict[str, float]:
    lx = np.log(x)
    top = lx.max()
    ly = lx - top  # work with y = x / max(x) <= 1 so y**c never overflows
    mean_ly = ly.mean()

    def score(c: float) -> tuple[float, float]:
        # profile-likelihood score in the shape c and its derivative; the score rises
        # strictly from -inf (c -> 0) to -mean(ly) (c -> inf), so the root is unique
        w = np.exp(c * ly)
        w /= w.sum()
        m1 = float((w * ly).sum())  # not `@`: BLAS threads cost ms on a busy box
        var = float((w * (ly - m1) ** 2).sum())
        return m1 - 1.0 / c - mean_ly, var + 1.0 / c**2

    # moment start: sd(ln x) = pi / (c sqrt 6) for a Weibull; then safeguarded Newton
    c = math.pi / (math.sqrt(6.0) * max(float(ly.std()), 1e-12))
    lo, hi = 0.0, math.inf
    for _ in range(200):
        g, dg = score(c)
        if g < 0:
            lo = c
        else:
            hi = c
        step = c - g / dg
        nxt = step if lo < step < hi else (lo + hi) / 2 if math.isfinite(hi) else 2 * c
        if abs(nxt - c) <= 1e-13 * c:
            c = nxt
            break
        c = nxt
    scale = math.exp(top) * float(np.mean(np.exp(c * ly))) ** (1.0 / c)
    return {"c": float(c), "scale": scale}


def _fit_gamma(x: np.ndarray) -> dict[str, float]:
    s = math.log(x.mean()) - float(np.log(x).mean())  # > 0 by Jensen unless all equal

    def score(a: float) -> float:
        return float(math.log(a) - special.digamma(a) - s)  # decreasing in a

    a0 = (3 - s + math.sqrt((s - 3) ** 2 + 24 * s)) / (12 * s)  # Minka's starting point
    lo, hi = _bracket_root(score, a0, increasing=False)
    a = float(optimize.brentq(score, lo, hi, xtol=1e-14, rtol=1e-13, maxiter=500))
    return {"a": a, "scale": float(x.mean()) / a}


@dataclass(frozen=True)
class _Family:
    name: str
    k: int  # free parameters (loc is fixed at 0 and not counted)
    fit: Callable[[np.ndarray], dict[str, float]]


#: Registered families by scipy name.
FAMILIES: dict[str, _Family] = {
    f.name: f
    for f in (
        _Family("lognorm", 2, _fit_lognorm),
        _Family("expon", 1, _fit_expon),
        _Family("weibull_min", 2, _fit_weibull),
        _Family("gamma", 2, _fit_gamma),
    )
}
_ALIASES = {"lognormal": "lognorm", "exponential": "expon", "weibull": "weibull_min"}
#: The families fitted when ``dists`` is not given.
DEFAULT_DISTS: tuple[str, ...] = tuple(FAMILIES)


def resolve_dists(dists: str | Sequence[str] | None) -> list[str]:
    """Canonical family names for ``dists`` (aliases accepted; unknown names raise)."""
    names = (
        list(DEFAULT_DISTS) if dists is None else [dists] if isinstance(dists, str) else list(dists)
    )
    out = []
    for d in names:
        canon = _ALIASES.get(str(d).lower(), str(d).lower())
        if canon not in FAMILIES:
            raise UnknownNameError("distribution", str(d), [*FAMILIES, *_ALIASES])
        if canon not in out:
            out.append(canon)
    if not out:
        raise ConfigError("dists must name at least one distribution")
    return out


def fit_params(x: Any, dist: str) -> dict[str, float]:
    """MLE parameters (scipy names, loc = 0) of family ``dist`` for positive data ``x``."""
    (name,) = resolve_dists(dist)
    arr = np.asarray(x, dtype=float)
    if (arr <= 0).any() or not np.isfinite(arr).all():
        raise ConfigError("fit_params needs finite x > 0; clean the data with positive_values()")
    _check_spread(arr)
    return FAMILIES[name].fit(arr)


def frozen_dist(dist: str, params: dict[str, float]) -> Any:
    """The frozen ``scipy.stats`` distribution for ``params`` (loc = 0)."""
    (name,) = resolve_dists(dist)
    return getattr(stats, name)(**params)


@dataclass(frozen=True, slots=True)
class _Law:
    """A fitted law calling scipy's unfrozen methods: building a frozen scipy distribution
    costs ~4 ms, which dominates the bootstrap and subsampling loops."""

    name: str
    params: dict[str, float]

    def cdf(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(getattr(stats, self.name).cdf(x, **self.params))

    def pdf(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(getattr(stats, self.name).pdf(x, **self.params))

    def logpdf(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(getattr(stats, self.name).logpdf(x, **self.params))

    def rvs(self, size: int, random_state: np.random.Generator) -> np.ndarray:
        return np.asarray(
            getattr(stats, self.name).rvs(size=size, random_state=random_state, **self.params)
        )


def _fitted(name: str, x: np.ndarray) -> _Law:
    """MLE fit of canonical family ``name`` to clean positive ``x``."""
    return _Law(name, FAMILIES[name].fit(x))


def ks_exact(x: Any, cdf: Callable[[np.ndarray], np.ndarray]) -> tuple[float, float]:
    """Two-sided one-sample KS statistic and its exact p-value (``scipy.stats.kstwo``).

    Args:
        x: the sample.
        cdf: vectorised CDF of the hypothesised distribution.

    Returns:
        ``(D, p)`` with ``D = sup |F_n - F|`` and ``p = kstwo.sf(D, n)``.
    """
    arr = np.asarray(x, dtype=float)
    if len(arr) == 0:
        raise ConfigError("ks_exact needs a non-empty sample")
    d = _ks_distance(arr, cdf)
    return d, float(stats.kstwo.sf(d, len(arr)))


def _ks_distance(x: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray]) -> float:
    """KS statistic only (the bootstrap needs no p-value per replicate)."""
    xs = np.sort(x)
    n = len(xs)
    f = np.asarray(cdf(xs), dtype=float)
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - f), np.max(f - (i - 1) / n)))


def _fit_rows(x: np.ndarray, names: list[str]) -> list[dict[str, Any]]:
    n = len(x)
    rows = []
    for name in names:
        fam = FAMILIES[name]
        dist = _fitted(name, x)
        params = dist.params
        ll = float(np.sum(dist.logpdf(x)))
        d, p = ks_exact(x, dist.cdf)
        rows.append(
            {
                "dist": name,
                "n": n,
                "k": fam.k,
                "params": params,
                **params,
                "loglik": ll,
                "aic": 2 * fam.k - 2 * ll,
                "bic": fam.k * math.log(n) - 2 * ll,
                "ks_stat": d,
                "ks_pvalue": p,
            }
        )
    return rows


def fit_iat(
    x: Any,
    dists: str | Sequence[str] | None = None,
    *,
    zeros: ZerosPolicy = DEFAULT_ZEROS,
    eps: float = DEFAULT_EPS,
) -> pd.DataFrame:
    """Fit each family in ``dists`` to the IAT sample ``x`` by maximum likelihood.

    Args:
        x: IATs in seconds (array, Series or list); NaNs are dropped.
        dists: family names or aliases (default: all of :data:`FAMILIES`).
        zeros: treatment of values below ``eps`` (``"floor"``, ``"drop"``, ``"error"``).
        eps: resolution in seconds used by ``zeros``.

    Returns:
        One row per family, sorted by AIC: ``dist``, ``n``, ``k``, ``params`` (dict) and
        one column per parameter (``s``, ``c``, ``a``, ``scale``; NaN where not used),
        ``loglik``, ``aic``, ``bic``, ``delta_aic``, ``ks_stat``, ``ks_pvalue`` (exact,
        parameters treated as known), ``n_below_eps`` (values floored or dropped).
    """
    names = resolve_dists(dists)
    raw = as_sample(x)
    raw = raw[np.isfinite(raw)]
    arr = positive_values(raw, zeros=zeros, eps=eps)
    _check_spread(arr)
    out = pd.DataFrame(_fit_rows(arr, names))
    out["delta_aic"] = out["aic"] - out["aic"].min()
    out["n_below_eps"] = int((raw < eps).sum())
    return out.sort_values("aic", kind="mergesort").reset_index(drop=True)


def fits_df(
    iats: pd.DataFrame,
    by: By = "topology",
    *,
    value: str = "iat",
    dists: str | Sequence[str] | None = None,
    zeros: ZerosPolicy = DEFAULT_ZEROS,
    eps: float = DEFAULT_EPS,
) -> pd.DataFrame:
    """:func:`fit_iat` on the pooled IATs of each group; the ``by`` columns lead each row."""
    keys = as_by(by)
    require_columns(iats, [*keys, value], "iats")
    frames = []
    for key, sub in iter_groups(iats, keys):
        f = fit_iat(sub[value], dists, zeros=zeros, eps=eps)
        for i, (col, val) in enumerate(key.items()):
            f.insert(i, col, val)
        frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def fit_sample(
    x: Any,
    *,
    fence: bool = True,
    fence_k: float = 3.0,
    min_iat: float = 0.05,
    clip_pct: float = 99.0,
) -> tuple[np.ndarray, dict[str, Any]]:
    """The paper's Table-3 fit sample of pooled IATs, and how it was cut.

    In order (agentraffic ``summary.json`` ``iat.fit_scope``): keep IATs > 0; with
    ``fence``, drop values above the upper fence Q3 + ``fence_k`` * IQR (the paper fences
    Sequential and Star, not Full Mesh); keep IATs > ``min_iat`` (the reasoning-phase mode,
    50 ms); drop values above the ``clip_pct`` percentile of that sample.

    Returns:
        The sample, and ``n_positive``, ``fence_s`` (None without fence), ``n_after_fence``,
        ``n_reasoning``, ``clip_s``, ``n``, ``fraction_of_iats`` (of the positive IATs).
    """
    arr = as_sample(x)
    arr = arr[np.isfinite(arr) & (arr > 0)]
    info: dict[str, Any] = {"n_positive": len(arr), "fence_s": None}
    if fence and len(arr):
        q1, q3 = np.percentile(arr, [25, 75])
        info["fence_s"] = float(q3 + fence_k * (q3 - q1))
        arr = arr[arr <= info["fence_s"]]
    info["n_after_fence"] = len(arr)
    arr = arr[arr > min_iat]
    info["n_reasoning"] = len(arr)
    info["clip_s"] = float(np.percentile(arr, clip_pct)) if len(arr) else math.nan
    if len(arr):
        arr = arr[arr <= info["clip_s"]]
    info["n"] = len(arr)
    info["fraction_of_iats"] = len(arr) / info["n_positive"] if info["n_positive"] else math.nan
    return arr, info
