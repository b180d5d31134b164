"""Two-component Gaussian mixture on log IATs: the fan-out mode and the reasoning mode.

Calls fanned out together arrive microseconds to milliseconds apart; calls that wait on
another call's reply arrive seconds apart. In log space these are two bumps, so a
two-component normal mixture on ``ln x`` (a log-normal mixture on ``x``) separates them
without choosing a threshold by hand. Its decision boundary — where both posteriors are
0.5 — is the data-driven counterpart of the fixed 50 ms burst threshold, and
:func:`mixture_df` reports both side by side.

EM is deterministic for a given ``seed``: restart 0 starts from the quartiles, the others
from seeded random data points; the best log-likelihood wins. Each component's standard
deviation is floored at ``min_sigma`` (log units) so a point mass — e.g. zero IATs floored
at the timing resolution — cannot collapse a component to an infinite likelihood.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize

from agentlab.analysis._frame import (
    DEFAULT_EPS,
    DEFAULT_ZEROS,
    By,
    ZerosPolicy,
    as_by,
    iter_groups,
    positive_values,
    require_columns,
)
from agentlab.analysis.iat import DEFAULT_THRESHOLD, _check_threshold
from agentlab.errors import ConfigError

__all__ = ["LogMixture", "fit_log_mixture", "mixture_df"]


@dataclass(frozen=True)
class LogMixture:
    """A fitted two-component normal mixture on ``ln x``; component 0 is the faster mode.

    Attributes:
        weights: mixing weights (sum to 1).
        mu: means of ``ln x`` (``exp(mu)`` is each mode's median IAT in seconds).
        sigma: standard deviations of ``ln x``.
        loglik: log-likelihood of the data in x space (comparable with ``fit_iat``).
        n: sample size.
        n_iter: EM iterations of the winning restart.
        converged: whether the winning restart met the tolerance.
    """

    weights: tuple[float, float]
    mu: tuple[float, float]
    sigma: tuple[float, float]
    loglik: float
    n: int
    n_iter: int
    converged: bool

    #: free parameters: two means, two sigmas, one weight
    k: int = 5

    @property
    def medians(self) -> tuple[float, float]:
        """Median IAT of each mode in seconds."""
        return (math.exp(self.mu[0]), math.exp(self.mu[1]))

    def _log_joint(self, y: np.ndarray) -> np.ndarray:
        w, m, s = (np.asarray(v) for v in (self.weights, self.mu, self.sigma))
        return np.log(w) + _norm_logpdf(y[:, None], m, s)

    def posterior_fast(self, x: Any) -> np.ndarray:
        """Posterior probability that each value of ``x`` (> 0) belongs to the fast mode."""
        y = np.log(np.asarray(x, dtype=float).ravel())
        lj = self._log_joint(y)
        return np.asarray(np.exp(lj[:, 0] - _lse2(lj)))

    @property
    def threshold(self) -> float:
        """IAT in seconds between the two medians where the posteriors are equal (NaN if none)."""

        def f(y: float) -> float:
            lj = self._log_joint(np.array([y]))[0]
            return float(lj[0] - lj[1])

        lo, hi = self.mu
        if not (f(lo) > 0 > f(hi)):
            return math.nan  # one component dominates everywhere between the modes
        return math.exp(optimize.brentq(f, lo, hi, xtol=1e-12))

    @property
    def aic(self) -> float:
        """Akaike information criterion (k = 5)."""
        return 2 * self.k - 2 * self.loglik

    @property
    def bic(self) -> float:
        """Bayesian information criterion (k = 5)."""
        return self.k * math.log(self.n) - 2 * self.loglik

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form, with the derived threshold."""
        d = asdict(self)
        d["threshold"] = self.threshold
        return d


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _norm_logpdf(y: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    # inline formula: scipy.stats.norm.logpdf's argument checks dominate an EM iteration
    return np.asarray(-0.5 * ((y - mu) / sigma) ** 2 - np.log(sigma) - _LOG_SQRT_2PI)


def _lse2(lj: np.ndarray) -> np.ndarray:
    """log(exp(a) + exp(b)) per row of an (n, 2) array; scipy's logsumexp is ~5x slower here."""
    hi = lj.max(axis=1)
    return np.asarray(hi + np.log1p(np.exp(lj.min(axis=1) - hi)))


def _em(
    y: np.ndarray,
    mu: np.ndarray,
    sigma: np.ndarray,
    w: np.ndarray,
    max_iter: int,
    tol: float,
    min_sigma: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, int, bool]:
    prev = -math.inf
    ll = -math.inf
    for it in range(1, max_iter + 1):
        lj = np.log(np.maximum(w, 1e-300)) + _norm_logpdf(y[:, None], mu, sigma)
        lse = _lse2(lj)
        ll = float(lse.sum())
        r = np.exp(lj - lse[:, None])
        nk = np.maximum(r.sum(axis=0), 1e-12)
        w = nk / len(y)
        mu = (r * y[:, None]).sum(axis=0) / nk
        var = (r * (y[:, None] - mu) ** 2).sum(axis=0) / nk
        sigma = np.sqrt(np.maximum(var, min_sigma**2))
        if abs(ll - prev) <= tol * max(1.0, abs(ll)):
            return mu, sigma, w, ll, it, True
        prev = ll
    return mu, sigma, w, ll, max_iter, False


def fit_log_mixture(
    x: Any,
    *,
    seed: int = 0,
    n_init: int = 3,
    max_iter: int = 300,
    tol: float = 1e-8,
    min_sigma: float = 1e-2,
    zeros: ZerosPolicy = DEFAULT_ZEROS,
    eps: float = DEFAULT_EPS,
) -> LogMixture:
    """Fit a two-component normal mixture to ``ln x`` by EM.

    Args:
        x: IATs in seconds.
        seed: seed of the random restarts.
        n_init: number of EM restarts (the first starts from the quartiles).
        max_iter: EM iterations per restart.
        tol: relative log-likelihood change that counts as converged.
        min_sigma: floor of each component's standard deviation in ``ln`` units.
        zeros, eps: zero/tie policy (see ``positive_values``).

    Returns:
        The best :class:`LogMixture`, components ordered fast then slow.
    """
    if n_init < 1 or max_iter < 1 or not min_sigma > 0:
        raise ConfigError(
            f"need n_init >= 1, max_iter >= 1, min_sigma > 0; got {n_init}, {max_iter}, {min_sigma}"
        )
    arr = positive_values(x, zeros=zeros, eps=eps)
    if len(arr) < 4 or np.ptp(arr) == 0:
        raise ConfigError(
            f"a two-component mixture needs >= 4 distinct-ish values, got n={len(arr)}"
        )
    y = np.log(arr)
    spread = max(float(y.std()), min_sigma)
    rng = np.random.default_rng(seed)
    best: tuple[Any, ...] | None = None
    for i in range(n_init):
        if i == 0:
            mu0 = np.percentile(y, [25, 75])
        else:
            mu0 = np.sort(rng.choice(y, size=2, replace=False))
        sig0 = np.full(2, spread / 2 if i == 0 else spread)
        res = _em(y, mu0.astype(float), sig0, np.full(2, 0.5), max_iter, tol, min_sigma)
        if best is None or res[3] > best[3]:
            best = res
    assert best is not None
    mu, sigma, w, ll, n_iter, conv = best
    order = np.argsort(mu)
    return LogMixture(
        weights=(float(w[order[0]]), float(w[order[1]])),
        mu=(float(mu[order[0]]), float(mu[order[1]])),
        sigma=(float(sigma[order[0]]), float(sigma[order[1]])),
        loglik=ll - float(y.sum()),  # Jacobian of y = ln x: f_x(x) = f_y(ln x) / x
        n=len(y),
        n_iter=n_iter,
        converged=conv,
    )


def mixture_df(
    iats: pd.DataFrame | Sequence[float] | np.ndarray,
    by: By = "topology",
    *,
    value: str = "iat",
    threshold: float = DEFAULT_THRESHOLD,
    seed: int = 0,
    zeros: ZerosPolicy = DEFAULT_ZEROS,
    eps: float = DEFAULT_EPS,
    **fit_kwargs: Any,
) -> pd.DataFrame:
    """Mixture fit per group and its comparison with the fixed burst threshold.

    Returns:
        One row per group: ``n``, ``w_fast``, ``median_fast_s``, ``sigma_fast``,
        ``w_slow``, ``median_slow_s``, ``sigma_slow``, ``threshold_mixture_s``,
        ``threshold_fixed_s``, ``fast_fraction_mixture`` (posterior > 0.5),
        ``burst_fraction_fixed`` (x < threshold), ``agreement`` (share of IATs both rules
        classify the same way), ``loglik``, ``aic``, ``bic``, ``converged``.
    """
    _check_threshold(threshold)
    if isinstance(iats, pd.DataFrame):
        keys = as_by(by)
        require_columns(iats, [*keys, value], "iats")
        groups = list(iter_groups(iats, keys))
    else:
        groups = [({}, pd.DataFrame({value: np.asarray(iats, dtype=float)}))]
    rows = []
    for key, sub in groups:
        arr = positive_values(sub[value], zeros=zeros, eps=eps)
        m = fit_log_mixture(arr, seed=seed, zeros=zeros, eps=eps, **fit_kwargs)
        fast_mix = m.posterior_fast(arr) > 0.5
        fast_fixed = arr < threshold
        rows.append(
            {
                **key,
                "n": m.n,
                "w_fast": m.weights[0],
                "median_fast_s": m.medians[0],
                "sigma_fast": m.sigma[0],
                "w_slow": m.weights[1],
                "median_slow_s": m.medians[1],
                "sigma_slow": m.sigma[1],
                "threshold_mixture_s": m.threshold,
                "threshold_fixed_s": threshold,
                "fast_fraction_mixture": float(fast_mix.mean()),
                "burst_fraction_fixed": float(fast_fixed.mean()),
                "agreement": float((fast_mix == fast_fixed).mean()),
                "loglik": m.loglik,
                "aic": m.aic,
                "bic": m.bic,
                "converged": m.converged,
            }
        )
    return pd.DataFrame(rows)
