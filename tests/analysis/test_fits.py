from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from agentlab.analysis import fit_iat, fit_params, fits_df, frozen_dist, ks_exact
from agentlab.errors import ConfigError, UnknownNameError

SAMPLES = {
    "lognorm": stats.lognorm(s=1.3, scale=0.2),
    "expon": stats.expon(scale=0.7),
    "weibull_min": stats.weibull_min(c=0.6, scale=1.5),
    "gamma": stats.gamma(a=0.4, scale=2.0),
}
PARAM_NAMES = {"lognorm": ["s"], "expon": [], "weibull_min": ["c"], "gamma": ["a"]}


def _sample(name: str, n: int = 400, seed: int = 7) -> np.ndarray:
    return SAMPLES[name].rvs(size=n, random_state=np.random.default_rng(seed))


@pytest.mark.parametrize("truth", list(SAMPLES))
@pytest.mark.parametrize("family", list(SAMPLES))
def test_mle_matches_scipy_fit(truth, family):
    x = _sample(truth)
    ours = fit_params(x, family)
    dist = getattr(stats, family)
    ref = dist.fit(x, floc=0)
    ref_params = dict(zip([*PARAM_NAMES[family], "loc", "scale"], ref, strict=True))
    for p in [*PARAM_NAMES[family], "scale"]:
        assert ours[p] == pytest.approx(ref_params[p], rel=2e-4), p
    ll_ours = frozen_dist(family, ours).logpdf(x).sum()
    ll_ref = dist.logpdf(x, *ref).sum()
    # ours solves the score equation exactly: never worse than scipy's optimiser
    assert ll_ours >= ll_ref - 1e-7


def test_fit_table_columns_aic_bic_and_ks():
    x = _sample("lognorm", n=300)
    table = fit_iat(x, ["lognormal", "exponential", "weibull", "gamma"])
    assert table.dist.tolist()[0] == "lognorm"  # sorted by AIC; the true family wins
    assert list(table.aic) == sorted(table.aic)
    assert table.delta_aic.iloc[0] == 0
    n = len(x)
    for _, row in table.iterrows():
        dist = frozen_dist(row.dist, row.params)
        assert row.loglik == pytest.approx(dist.logpdf(x).sum())
        assert row.aic == pytest.approx(2 * row.k - 2 * row.loglik)
        assert row.bic == pytest.approx(row.k * math.log(n) - 2 * row.loglik)
        assert row.ks_pvalue == pytest.approx(stats.kstwo.sf(row.ks_stat, n))
    assert table.set_index("dist").loc["expon", "k"] == 1


@pytest.mark.parametrize("n", [5, 40, 300])
def test_ks_exact_matches_scipy(n):
    rng = np.random.default_rng(n)
    x = rng.lognormal(0.1, 1.0, n)
    dist = stats.lognorm(s=0.9, scale=1.0)
    d, p = ks_exact(x, dist.cdf)
    ref = stats.kstest(x, dist.cdf, method="exact")
    assert d == pytest.approx(ref.statistic, abs=1e-14)
    assert p == pytest.approx(ref.pvalue, rel=1e-10)
    assert p == pytest.approx(stats.kstwo.sf(d, n), rel=1e-12)


def test_ks_statistic_by_hand():
    # uniform CDF on [0, 1]; sample {0.5}: D = max(1 - 0.5, 0.5 - 0) = 0.5
    d, p = ks_exact([0.5], lambda v: np.clip(v, 0, 1))
    assert d == 0.5
    assert p == pytest.approx(1.0)


def test_zero_policies_in_fit():
    x = np.concatenate([np.zeros(10), _sample("expon", n=90)])
    floored = fit_iat(x, "expon")
    assert floored.n.iloc[0] == 100
    assert floored.n_below_eps.iloc[0] == 10
    dropped = fit_iat(x, "expon", zeros="drop")
    assert dropped.n.iloc[0] == 90
    assert dropped.scale.iloc[0] == pytest.approx(x[x > 0].mean())
    with pytest.raises(ConfigError, match="zeros"):
        fit_iat(x, zeros="error")
    with pytest.raises(ConfigError, match=">= 0"):
        fit_iat([-1.0, 1.0, 2.0])


def test_bad_inputs():
    with pytest.raises(UnknownNameError, match="pareto") as err:
        fit_iat([1.0, 2.0], "pareto")
    assert "lognorm" in str(err.value)
    with pytest.raises(ConfigError, match="distinct"):
        fit_iat([1.0, 1.0, 1.0])


def test_a_table_passed_for_a_sample_says_what_to_pass() -> None:
    # fit_iat(calls) failed in numpy on the first request id ("could not convert string
    # to float: 'v0-1'"): the README's calls table is the natural first thing to hand it
    import pandas as pd

    from agentlab.analysis import iat_df, subsample_ks_df

    calls = pd.DataFrame({"request_id": ["v0-1", "v0-2", "v0-3"], "run_id": "r",
                          "stage": "discussion", "start": [0.0, 0.4, 1.5]})  # fmt: skip
    with pytest.raises(ConfigError, match=r"calls table.*fit_iat\(iat_df\(calls\)\['iat'\]\)"):
        fit_iat(calls)
    iats = iat_df(calls, by="run_id")
    with pytest.raises(ConfigError, match=r"df\['iat'\].*fits_df\(df\)"):
        fit_iat(iats)
    assert fit_iat(iats["iat"], "expon")["n"].iloc[0] == 2  # what the message says works
    with pytest.raises(ConfigError, match="IATs as numbers in seconds, got list"):
        fit_iat(["v0-1", "v0-2"])
    with pytest.raises(ConfigError, match="calls table"):  # the same check for every sample
        subsample_ks_df(calls, "expon")
    calls["end"] = calls["start"] + 1.0
    with pytest.raises(ConfigError, match=r"looks like a calls table.*iat_df\(calls\)"):
        fits_df(calls)  # (the per-group fits take an IAT table)


def test_a_run_passed_for_its_calls_says_which_method_gives_them(tmp_path) -> None:
    from agentlab.analysis import traffic_summary_df
    from agentlab.runtime import Society
    from agentlab.store import open_run

    Society.create(tmp_path / "s", agents=2, llm="sim/instant", seed=0,
                   progress=False).close()  # fmt: skip
    with pytest.raises(ConfigError, match=r"got Run \(its calls: \.llm_calls_df\(\)\)"):
        traffic_summary_df(open_run(tmp_path / "s"))


def test_fits_df_per_group():
    import pandas as pd

    df = pd.DataFrame(
        {
            "topology": ["a"] * 200 + ["b"] * 200,
            "iat": np.concatenate([_sample("expon", 200, 1), _sample("lognorm", 200, 2)]),
        }
    )
    out = fits_df(df, dists=["expon", "lognorm"])
    assert out.columns[0] == "topology"
    assert len(out) == 4
    best = out.sort_values("aic").groupby("topology").dist.first()
    assert best["b"] == "lognorm"
