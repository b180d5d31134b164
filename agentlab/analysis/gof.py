"""Goodness of fit beyond the KS table: Vuong tests, parametric bootstrap, subsampling.

- :func:`vuong_df`: likelihood-ratio tests between every pair of fitted families. For
  non-nested pairs (e.g. log-normal vs Weibull) Vuong's (1989) normal test; for nested
  pairs (exponential inside Weibull and gamma, at shape 1) Vuong's statistic is degenerate
  when the small model is true, so by default Wilks' chi-square test is used instead.
- :func:`bootstrap_ks_df`: Lilliefors-style p-values. The KS p-value of
  :func:`~agentlab.analysis.fits.fit_iat` treats the fitted parameters as known, which makes
  it too large; here each bootstrap sample is drawn from the fitted law and *re-fitted*
  before its KS distance is taken, so the reference distribution includes the estimation.
- :func:`subsample_ks_df`: how often the KS test rejects each family on random
  subsamples of n = 50/100/200 — large pooled samples reject every family, the question
  is whether a family also fails at the sample sizes one run-set would give. Each
  subsample is re-fitted; ``pvalue="exact"`` reads the KS table for a fully specified law
  (conservative after a re-fit), ``pvalue="lilliefors"`` a null distribution of the
  re-fitted statistic at that size (Lilliefors' test).

All randomness is seeded; each family draws from its own stream (seed, family), so adding
or reordering families does not change another family's result.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from itertools import combinations
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats

from agentlab.analysis._frame import DEFAULT_EPS, DEFAULT_ZEROS, ZerosPolicy, positive_values
from agentlab.analysis.fits import (
    FAMILIES,
    _check_spread,
    _fitted,
    _ks_distance,
    ks_exact,
    resolve_dists,
)
from agentlab.errors import ConfigError

__all__ = ["bootstrap_ks_df", "subsample_ks_df", "vuong_df", "vuong_test"]

#: (small, large) pairs where the small family is the large one at a boundary-free value.
_NESTED = {("expon", "weibull_min"), ("expon", "gamma")}


def _family_rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, list(FAMILIES).index(name)])


def vuong_test(
    x: Any,
    a: str,
    b: str,
    *,
    correction: Literal["none", "aic", "bic"] = "none",
    alpha: float = 0.05,
) -> dict[str, Any]:
    """Vuong's non-nested likelihood-ratio test of family ``a`` against family ``b``.

    Both families are fitted to ``x`` (already positive) by MLE. With pointwise
    log-likelihood ratios ``l_i``, the statistic is ``Z = sum(l) / (sqrt(n) * sd(l))``,
    asymptotically standard normal when both models are equally close to the truth.

    Args:
        x: positive sample.
        a, b: family names.
        correction: penalise the log-likelihood ratio for extra parameters
            (``"aic"``: k_a - k_b; ``"bic"``: (k_a - k_b) * ln(n) / 2).
        alpha: significance level for ``significant``.

    Returns:
        ``model_a``, ``model_b``, ``test`` (``"vuong"``), ``n``, ``loglik_ratio``,
        ``statistic`` (Z; > 0 favours a), ``p_value`` (two-sided), ``preferred`` (the
        family the sign favours; ``None`` on an exact tie) and ``significant``.
    """
    if correction not in ("none", "aic", "bic"):
        raise ConfigError(f"correction={correction!r} is not valid; choose none, aic or bic")
    arr = np.asarray(x, dtype=float)
    _check_spread(arr)
    na, nb = resolve_dists(a)[0], resolve_dists(b)[0]
    la = _fitted(na, arr).logpdf(arr)
    lb = _fitted(nb, arr).logpdf(arr)
    lr_i = la - lb
    n = len(arr)
    lr = float(lr_i.sum())
    dk = FAMILIES[na].k - FAMILIES[nb].k
    if correction == "aic":
        lr -= dk
    elif correction == "bic":
        lr -= dk * math.log(n) / 2
    sd = float(lr_i.std())
    if sd == 0.0:
        z, p = 0.0, 1.0  # identical fitted laws: nothing to tell apart
    else:
        z = lr / (math.sqrt(n) * sd)
        p = float(2 * stats.norm.sf(abs(z)))
    preferred = na if z > 0 else nb if z < 0 else None
    return {
        "model_a": na,
        "model_b": nb,
        "test": "vuong",
        "n": n,
        "loglik_ratio": lr,
        "statistic": z,
        "p_value": p,
        "preferred": preferred,
        "significant": p < alpha,
    }


def _wilks(arr: np.ndarray, small: str, large: str, alpha: float, first: str) -> dict[str, Any]:
    """Nested LR test: 2 (LL_large - LL_small) ~ chi2(k_large - k_small) under the small model."""
    ll = {name: float(_fitted(name, arr).logpdf(arr).sum()) for name in (small, large)}
    df = FAMILIES[large].k - FAMILIES[small].k
    stat = max(0.0, 2 * (ll[large] - ll[small]))  # >= 0 up to optimiser rounding
    p = float(stats.chi2.sf(stat, df))
    a, b = (small, large) if first == small else (large, small)
    return {
        "model_a": a,
        "model_b": b,
        "test": "wilks",
        "n": len(arr),
        "loglik_ratio": ll[a] - ll[b],
        "statistic": stat,
        "p_value": p,
        # parsimony: keep the small model unless the extra parameter is significant
        "preferred": large if p < alpha else small,
        "significant": p < alpha,
    }


def vuong_df(
    x: Any,
    dists: str | Sequence[str] | None = None,
    *,
    nested: Literal["wilks", "vuong"] = "wilks",
    correction: Literal["none", "aic", "bic"] = "none",
    alpha: float = 0.05,
    zeros: ZerosPolicy = DEFAULT_ZEROS,
    eps: float = DEFAULT_EPS,
) -> pd.DataFrame:
    """Likelihood-ratio tests between every pair of ``dists`` (see :func:`vuong_test`).

    Args:
        x: IAT sample (zeros handled by ``zeros``/``eps`` as in ``fit_iat``).
        dists: families to compare (default: all).
        nested: test for nested pairs (exponential vs Weibull/gamma): ``"wilks"``
            (chi-square LR test; ``preferred`` is the small model unless rejected) or
            ``"vuong"`` (treat them like the other pairs).
        correction: parameter-count correction for the Vuong statistic.
        alpha: significance level.
        zeros, eps: zero/tie policy.

    Returns:
        One row per unordered pair, columns as returned by :func:`vuong_test`.
    """
    if nested not in ("wilks", "vuong"):
        raise ConfigError(f"nested={nested!r} is not valid; choose 'wilks' or 'vuong'")
    names = resolve_dists(dists)
    arr = positive_values(x, zeros=zeros, eps=eps)
    _check_spread(arr)
    rows = []
    for a, b in combinations(names, 2):
        pair = (a, b) if (a, b) in _NESTED else (b, a) if (b, a) in _NESTED else None
        if pair is not None and nested == "wilks":
            rows.append(_wilks(arr, pair[0], pair[1], alpha, first=a))
        else:
            rows.append(vuong_test(arr, a, b, correction=correction, alpha=alpha))
    return pd.DataFrame(rows)


def bootstrap_ks_df(
    x: Any,
    dists: str | Sequence[str] | None = None,
    *,
    B: int = 200,
    seed: int = 0,
    zeros: ZerosPolicy = DEFAULT_ZEROS,
    eps: float = DEFAULT_EPS,
) -> pd.DataFrame:
    """Parametric-bootstrap KS p-values that account for the estimated parameters.

    For each family: fit by MLE, take the KS distance ``D``; then ``B`` times draw n values
    from the fitted law, re-fit, and take that sample's KS distance to its own fit. The
    p-value is ``(1 + #{D_b >= D}) / (B + 1)`` (never exactly 0; resolution 1 / (B + 1)).

    Returns:
        One row per family: ``dist``, ``n``, ``ks_stat``, ``ks_pvalue_exact`` (parameters
        treated as known), ``ks_pvalue_boot``, ``B``, ``boot_stat_p95``.
    """
    if not (isinstance(B, int) and B >= 1):
        raise ConfigError(f"B must be a positive int, got {B!r}")
    names = resolve_dists(dists)
    arr = positive_values(x, zeros=zeros, eps=eps)
    _check_spread(arr)
    n = len(arr)
    rows = []
    for name in names:
        dist = _fitted(name, arr)
        d_obs, p_exact = ks_exact(arr, dist.cdf)
        d_boot = _null_ks(name, dist, n, B, seed)
        rows.append(
            {
                "dist": name,
                "n": n,
                "ks_stat": d_obs,
                "ks_pvalue_exact": p_exact,
                "ks_pvalue_boot": float((1 + np.sum(d_boot >= d_obs)) / (B + 1)),
                "B": B,
                "boot_stat_p95": float(np.percentile(d_boot, 95)),
            }
        )
    return pd.DataFrame(rows)


def subsample_ks_df(
    x: Any,
    dists: str | Sequence[str] | None = None,
    *,
    sizes: Sequence[int] = (50, 100, 200),
    repeats: int = 200,
    alpha: float = 0.05,
    seed: int = 0,
    zeros: ZerosPolicy = DEFAULT_ZEROS,
    eps: float = DEFAULT_EPS,
    pvalue: Literal["exact", "lilliefors"] = "exact",
    null_draws: int = 2000,
) -> pd.DataFrame:
    """KS rejection rate of each family on random subsamples (without replacement).

    For each size, ``repeats`` subsamples are drawn once and shared by all families (a
    paired comparison); each is re-fitted, and its KS distance ``D`` to its own fit tested.
    Sizes larger than the sample are skipped with a warning.

    ``pvalue`` says how ``D`` becomes a p-value:

    - ``"exact"``: the KS table of a *fully specified* law (``scipy.stats.kstwo``), as if
      the re-fitted parameters were known. The fit pulls the law towards the subsample, so
      this test is conservative: on exponential data it rejects the re-fitted exponential
      far less often than ``alpha``.
    - ``"lilliefors"``: Lilliefors' test. ``null_draws`` samples of the same size are drawn
      from the family fitted to the whole sample, each re-fitted, and their ``D`` form the
      null distribution; ``p = (1 + #{D_null >= D}) / (null_draws + 1)``. For ``expon``,
      ``lognorm`` and ``weibull_min`` (scale or location-scale families after a log) that
      distribution does not depend on the parameters, so the test is exact up to Monte
      Carlo error (at n = 200 the 5 % point is ~0.076 for the exponential against 0.095
      from the KS table; Stephens' 1974 formula gives 0.0768); for ``gamma`` it depends on
      the shape and is an approximation at the pooled fit.

    Returns:
        One row per (family, size): ``dist``, ``size``, ``repeats``, ``rejection_rate``
        (share of p-values < ``alpha``), ``median_pvalue``, ``mean_ks_stat``, ``pvalue``.
    """
    if not (isinstance(repeats, int) and repeats >= 1):
        raise ConfigError(f"repeats must be a positive int, got {repeats!r}")
    if pvalue not in ("exact", "lilliefors"):
        raise ConfigError(f"pvalue={pvalue!r} is not valid; choose exact or lilliefors")
    if not (isinstance(null_draws, int) and null_draws >= 1):
        raise ConfigError(f"null_draws must be a positive int, got {null_draws!r}")
    names = resolve_dists(dists)
    arr = positive_values(x, zeros=zeros, eps=eps)
    rng = np.random.default_rng(seed)
    # Lilliefors' null is drawn from each family fitted to the whole sample: fitted once
    fits = {name: _fitted(name, arr) for name in names} if pvalue == "lilliefors" else {}
    rows = []
    for size in sizes:
        if size > len(arr):
            warnings.warn(
                f"subsample size {size} exceeds the sample ({len(arr)} values); skipped",
                stacklevel=2,
            )
            continue
        if size < 2:
            raise ConfigError(f"subsample sizes must be >= 2, got {size!r}")
        draws = [rng.choice(arr, size=size, replace=False) for _ in range(repeats)]
        for name in names:
            null = _null_ks(name, fits[name], size, null_draws, seed) if fits else None
            ps, ds = [], []
            for sample in draws:
                if np.ptp(sample) == 0:
                    continue  # all ties (e.g. all floored zeros): no fit possible
                d, p = ks_exact(sample, _fitted(name, sample).cdf)
                if null is not None:
                    p = float((1 + np.sum(null >= d)) / (len(null) + 1))
                ps.append(p)
                ds.append(d)
            p_arr = np.asarray(ps)
            rows.append(
                {
                    "dist": name,
                    "size": size,
                    "repeats": len(p_arr),
                    "rejection_rate": float(np.mean(p_arr < alpha)) if len(p_arr) else math.nan,
                    "median_pvalue": float(np.median(p_arr)) if len(p_arr) else math.nan,
                    "mean_ks_stat": float(np.mean(ds)) if ds else math.nan,
                    "pvalue": pvalue,
                }
            )
    cols = ["dist", "size", "repeats", "rejection_rate", "median_pvalue", "mean_ks_stat", "pvalue"]
    return pd.DataFrame(rows, columns=cols)


def _null_ks(name: str, dist: Any, size: int, draws: int, seed: int) -> np.ndarray:
    """Lilliefors' null distribution: KS distances of ``draws`` samples of ``size`` drawn
    from ``dist`` (family ``name`` fitted to the whole sample), each re-fitted before its
    distance is taken."""
    rng = _family_rng(seed, name)
    tiny = np.finfo(float).tiny
    out = np.empty(draws)
    for i in range(draws):
        # a draw can underflow to 0 for small gamma shapes; the fits need x > 0
        sample = np.maximum(dist.rvs(size=size, random_state=rng), tiny)
        out[i] = _ks_distance(sample, _fitted(name, sample).cdf)
    return out
