from __future__ import annotations

import math

import numpy as np
import pytest

from agentlab.analysis import bootstrap_ks_df, subsample_ks_df, vuong_df, vuong_test
from agentlab.errors import ConfigError


def _lognormal(n=400, seed=11):
    return np.random.default_rng(seed).lognormal(-1.0, 1.4, n)


def _exponential(n=400, seed=12):
    return np.random.default_rng(seed).exponential(0.8, n)


def test_vuong_prefers_true_lognormal_over_exponential():
    r = vuong_test(_lognormal(), "lognorm", "expon")
    assert r["preferred"] == "lognorm"
    assert r["statistic"] > 0
    assert r["significant"] and r["p_value"] < 0.05
    swapped = vuong_test(_lognormal(), "expon", "lognorm")
    assert swapped["statistic"] == pytest.approx(-r["statistic"])
    assert swapped["p_value"] == pytest.approx(r["p_value"])
    assert swapped["preferred"] == "lognorm"


def test_vuong_statistic_definition():
    from scipy import stats

    x = _lognormal(n=150)
    r = vuong_test(x, "lognorm", "weibull_min")
    la = stats.lognorm.logpdf(x, *stats.lognorm.fit(x, floc=0))
    lb = stats.weibull_min.logpdf(x, *stats.weibull_min.fit(x, floc=0))
    lr = la - lb
    z = lr.sum() / (np.sqrt(len(x)) * lr.std())
    assert r["statistic"] == pytest.approx(z, rel=1e-3)
    assert r["p_value"] == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-2, abs=1e-12)


def test_vuong_same_family_is_a_tie():
    r = vuong_test(_lognormal(), "lognorm", "lognormal")
    assert r["statistic"] == 0 and r["p_value"] == 1 and r["preferred"] is None


def test_vuong_df_pairs_and_nested_wilks():
    table = vuong_df(_exponential())
    assert len(table) == 6
    nested = table[table.test == "wilks"]
    assert set(map(frozenset, zip(nested.model_a, nested.model_b, strict=True))) == {
        frozenset({"expon", "weibull_min"}),
        frozenset({"expon", "gamma"}),
    }
    # exponential data: the extra shape parameter is not needed
    assert (nested.preferred == "expon").all()
    assert (nested.p_value > 0.05).all()
    lognorm_rows = vuong_df(_lognormal())
    row = lognorm_rows[(lognorm_rows.model_a == "lognorm") & (lognorm_rows.model_b == "expon")]
    assert row.preferred.item() == "lognorm"


def test_bootstrap_small_for_wrong_family_not_tiny_for_right_one():
    x = _lognormal(n=300)
    out = bootstrap_ks_df(x, ["lognorm", "expon"], B=99, seed=1).set_index("dist")
    assert out.loc["expon", "ks_pvalue_boot"] <= 0.02  # 1/100 is the floor with B=99
    assert out.loc["lognorm", "ks_pvalue_boot"] > 0.05
    # estimating parameters shrinks KS distances, so the bootstrap reference is tighter
    assert out.loc["lognorm", "boot_stat_p95"] < __import__("scipy").stats.kstwo.ppf(0.95, 300)


def test_bootstrap_is_seeded_and_order_independent():
    x = _exponential(n=120)
    a = bootstrap_ks_df(x, ["expon", "gamma"], B=40, seed=5).set_index("dist")
    b = bootstrap_ks_df(x, ["gamma", "expon"], B=40, seed=5).set_index("dist")
    assert a.loc["expon", "ks_pvalue_boot"] == b.loc["expon", "ks_pvalue_boot"]
    assert a.loc["gamma", "boot_stat_p95"] == b.loc["gamma", "boot_stat_p95"]
    assert a.loc["expon", "ks_pvalue_boot"] > 0.05


def test_subsample_rejection_rates():
    x = _lognormal(n=1500, seed=3)
    out = subsample_ks_df(x, ["lognorm", "expon"], repeats=40, seed=2)
    rates = out.set_index(["dist", "size"]).rejection_rate
    assert list(out["size"].unique()) == [50, 100, 200]
    # the true family is rarely rejected; the wrong one more often as n grows
    assert (rates["lognorm"] <= 0.1).all()
    assert rates[("expon", 200)] > rates[("expon", 50)]
    assert rates[("expon", 200)] > 0.8
    again = subsample_ks_df(x, ["lognorm", "expon"], repeats=40, seed=2)
    assert again.equals(out)


def test_subsample_skips_sizes_larger_than_sample():
    with pytest.warns(UserWarning, match="exceeds"):
        out = subsample_ks_df(_exponential(n=80), "expon", sizes=(50, 100), repeats=10)
    assert out["size"].tolist() == [50]


@pytest.mark.parametrize(
    ("dist", "crit"),
    [
        # Stephens (1974) modified-statistic 5 % points with estimated parameters, at
        # n = 200 by hand:
        # exponential (rate estimated): (D - 0.2/n)(sqrt(n) + 0.26 + 0.5/sqrt(n)) = 1.094
        #   -> D = 1.094 / (14.1421 + 0.26 + 0.0354) + 0.001 = 0.07677
        ("expon", 1.094 / (math.sqrt(200) + 0.26 + 0.5 / math.sqrt(200)) + 0.2 / 200),
        # normal on log x (mu, sigma estimated): D (sqrt(n) - 0.01 + 0.85/sqrt(n)) = 0.895
        #   -> D = 0.895 / (14.1421 - 0.01 + 0.0601) = 0.06306
        ("lognorm", 0.895 / (math.sqrt(200) - 0.01 + 0.85 / math.sqrt(200))),
    ],
)
def test_lilliefors_null_matches_stephens_critical_values(dist, crit):
    from agentlab.analysis.gof import _fitted, _null_ks

    x = _exponential(n=500, seed=4) if dist == "expon" else _lognormal(n=500, seed=4)
    null = _null_ks(dist, _fitted(dist, x), 200, 4000, seed=1)
    # the table KS 5 % point (fully specified law) is 0.0952: re-fitting shrinks D
    assert np.percentile(null, 95) == pytest.approx(crit, rel=0.05)
    assert np.percentile(null, 95) < 0.09


def test_subsample_lilliefors_rejects_at_alpha_on_the_null():
    # exponential data, re-fitted exponential: a calibrated test rejects ~alpha of the
    # subsamples; the KS table's p-value (parameters treated as known) almost never does
    x = _exponential(n=20_000, seed=7)
    lil = subsample_ks_df(x, "expon", sizes=(200,), repeats=600, seed=3, pvalue="lilliefors")
    ex = subsample_ks_df(x, "expon", sizes=(200,), repeats=600, seed=3)
    assert 0.02 <= lil["rejection_rate"].iloc[0] <= 0.08
    assert ex["rejection_rate"].iloc[0] < 0.015
    assert lil["pvalue"].iloc[0] == "lilliefors" and ex["pvalue"].iloc[0] == "exact"
    # same subsamples, same D: only the p-value differs
    assert lil["mean_ks_stat"].iloc[0] == ex["mean_ks_stat"].iloc[0]


def test_subsample_lilliefors_more_powerful_on_the_wrong_family():
    x = _lognormal(n=3000, seed=5)
    kw = {"sizes": (50,), "repeats": 200, "seed": 0}
    lil = subsample_ks_df(x, "expon", pvalue="lilliefors", **kw)["rejection_rate"].iloc[0]
    ex = subsample_ks_df(x, "expon", **kw)["rejection_rate"].iloc[0]
    assert lil > ex


def test_subsample_pvalue_and_null_draws_validated():
    x = _exponential(n=300)
    with pytest.raises(ConfigError, match="pvalue"):
        subsample_ks_df(x, "expon", sizes=(50,), pvalue="bootstrap")
    with pytest.raises(ConfigError, match="null_draws"):
        subsample_ks_df(x, "expon", sizes=(50,), pvalue="lilliefors", null_draws=0)
