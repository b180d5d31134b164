from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from agentlab.analysis import fit_iat, fit_log_mixture, mixture_df


def _two_modes(seed=0, n_fast=400, n_slow=600):
    rng = np.random.default_rng(seed)
    fast = rng.lognormal(math.log(0.004), 0.5, n_fast)  # fan-out: ~4 ms apart
    slow = rng.lognormal(math.log(2.5), 0.4, n_slow)  # reasoning: ~2.5 s apart
    return np.concatenate([fast, slow])


def test_mixture_recovers_two_separated_modes():
    m = fit_log_mixture(_two_modes())
    assert m.converged
    assert m.weights[0] == pytest.approx(0.4, abs=0.04)
    assert m.medians[0] == pytest.approx(0.004, rel=0.1)
    assert m.medians[1] == pytest.approx(2.5, rel=0.1)
    assert m.sigma[0] == pytest.approx(0.5, rel=0.15)
    assert m.sigma[1] == pytest.approx(0.4, rel=0.15)
    assert m.medians[0] < m.threshold < m.medians[1]
    post = m.posterior_fast([m.threshold])
    assert post[0] == pytest.approx(0.5, abs=1e-6)


def test_mixture_beats_single_lognormal_and_is_seeded():
    x = _two_modes(seed=1)
    m = fit_log_mixture(x, seed=3)
    single = fit_iat(x, "lognorm").iloc[0]
    # same x-space likelihood scale: the mixture nests the single log-normal
    assert m.loglik > single.loglik
    assert m.aic < single.aic
    assert fit_log_mixture(x, seed=3) == m


def test_mixture_df_compares_with_fixed_threshold():
    df = pd.DataFrame(
        {
            "topology": ["a"] * 1000 + ["b"] * 1000,
            "iat": np.concatenate([_two_modes(2), _two_modes(4)]),
        }
    )
    out = mixture_df(df, threshold=0.05).set_index("topology")
    for topo in ("a", "b"):
        row = out.loc[topo]
        # the gap between ~4 ms and ~2.5 s holds both thresholds: they classify alike
        assert row.agreement > 0.99
        assert row.fast_fraction_mixture == pytest.approx(row.burst_fraction_fixed, abs=0.01)
        assert row.threshold_fixed_s == 0.05
        assert row.median_fast_s < row.threshold_mixture_s < row.median_slow_s


def test_point_mass_of_zeros_does_not_collapse():
    x = np.concatenate([np.zeros(300), _two_modes(5)[400:]])
    m = fit_log_mixture(x, min_sigma=0.05)
    assert m.sigma[0] == pytest.approx(0.05)
    assert m.medians[0] == pytest.approx(1e-6, rel=0.01)
    assert m.weights[0] == pytest.approx(300 / 900, abs=0.01)
    assert np.isfinite(m.loglik)
