from __future__ import annotations

import numpy as np
import pytest

from agentlab.analysis import bootstrap_ks_df, subsample_ks_df, vuong_df, vuong_test


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
