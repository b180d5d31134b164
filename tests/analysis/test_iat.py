from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from agentlab.analysis import (
    burst_sizes_df,
    burst_summary_df,
    call_rate_df,
    iat_df,
    log_histogram_df,
    on_off_df,
)
from agentlab.errors import ConfigError


def _run(df: pd.DataFrame, topology: str, run_id: int) -> pd.DataFrame:
    return df[(df.topology == topology) & (df.run_id == run_id)]


def test_iat_per_run_sorted_and_stage_filtered(timeline_calls):
    iats = iat_df(timeline_calls)
    star1 = _run(iats, "star", 1)
    np.testing.assert_allclose(star1["iat"], [0.01, 0.01, 0.98, 0.03, 1.97], atol=1e-12)
    assert star1.request_id.tolist() == ["s1-2", "s1-3", "s1-4", "s1-5", "s1-6"]
    assert star1["index"].tolist() == [1, 2, 3, 4, 5]
    # the tie gives an IAT of exactly 0; runs are never chained (no 3.0 -> 10.0 gap)
    np.testing.assert_allclose(_run(iats, "star", 2)["iat"], [0.0, 2.0])
    assert len(iats) == 5 + 2 + 2


def test_iat_all_stages_and_missing_columns(timeline_calls):
    all_stages = iat_df(timeline_calls, stage=None)
    assert len(_run(all_stages, "star", 1)) == 6  # the execution call at 0.5 joins
    with pytest.raises(ConfigError, match="run_id"):
        iat_df(timeline_calls.drop(columns=["run_id"]))
    with pytest.raises(ConfigError, match="begin"):
        iat_df(timeline_calls, start="begin")


def test_a_stage_no_call_has_is_said_not_silently_empty(timeline_calls):
    # a society's calls carry no stage: the default (the workflow's "discussion") kept
    # none of them and every IAT statistic came out NaN with no word why
    society = timeline_calls.assign(stage=None)
    with pytest.warns(UserWarning, match=r"none of the \d+ calls has stage 'discussion' "
                      r"\(stages present: none\); stage=None keeps every call"):  # fmt: skip
        assert iat_df(society).empty
    with pytest.warns(UserWarning, match=r"stages present: \['discussion', 'execution'\]"):
        iat_df(timeline_calls, stage="discusion")
    assert len(iat_df(society, stage=None)) > 0


def test_burst_threshold_is_strict(timeline_calls):
    iats = iat_df(timeline_calls)
    mesh = _run(iats, "mesh", 1)
    assert burst_sizes_df(mesh, threshold=0.25).empty  # 0.25 < 0.25 is false
    sizes = burst_sizes_df(mesh, threshold=0.2500001)
    assert sizes["size"].tolist() == [3]


def test_burst_sizes_and_summary(timeline_calls):
    iats = iat_df(timeline_calls)
    sizes = burst_sizes_df(iats)
    assert _run(sizes, "star", 1)["size"].tolist() == [3, 2]
    assert _run(sizes, "star", 2)["size"].tolist() == [2]  # the tie is a burst of 2
    summary = burst_summary_df(iats).set_index("topology")
    # star: IATs 0.01 0.01 0.98 0.03 1.97 | 0 2 -> 4 of 7 below 50 ms
    assert summary.loc["star", "burst_fraction"] == pytest.approx(4 / 7)
    assert summary.loc["star", "bursts"] == 3
    assert summary.loc["star", "max_burst_size"] == 3
    assert summary.loc["mesh", "burst_fraction"] == 0.0
    assert summary.loc["mesh", "bursts"] == 0


def test_on_off_periods(timeline_calls):
    periods = on_off_df(_run(iat_df(timeline_calls), "star", 1))
    assert periods.period.tolist() == ["on", "off", "on", "off", "on"]
    assert periods.calls.tolist() == [3, 0, 2, 0, 1]
    np.testing.assert_allclose(periods.t0, [0.0, 0.02, 1.0, 1.03, 3.0])
    np.testing.assert_allclose(periods.duration, [0.02, 0.98, 0.03, 1.97, 0.0], atol=1e-12)
    # ON and OFF tile the run from first to last arrival
    assert periods.duration.sum() == pytest.approx(3.0)


def test_threshold_validated(timeline_calls):
    with pytest.raises(ConfigError, match="threshold"):
        burst_sizes_df(iat_df(timeline_calls), threshold=0)


def test_log_histogram_one_bin_per_decade():
    h = log_histogram_df([0.1, 0.1, 1.0, 10.0], bins_per_decade=1)
    np.testing.assert_allclose(h.left, [0.1, 1.0, 10.0])
    np.testing.assert_allclose(h.right, [1.0, 10.0, 100.0])
    assert h["count"].tolist() == [2, 1, 1]
    np.testing.assert_allclose(h.fraction, [0.5, 0.25, 0.25])


def test_log_histogram_eight_bins_per_decade_groups_share_edges():
    rng = np.random.default_rng(3)
    df = pd.DataFrame(
        {
            "topology": ["a"] * 300 + ["b"] * 200,
            "iat": np.concatenate([rng.lognormal(-3, 1, 300), rng.lognormal(0, 1, 200)]),
        }
    )
    h = log_histogram_df(df)
    for topo, n in (("a", 300), ("b", 200)):
        sub = h[h.topology == topo]
        assert sub["count"].sum() == n
        np.testing.assert_allclose(sub.right / sub.left, 10 ** (1 / 8))
        # every edge sits on the shared decade-aligned grid 10**(k/8)
        k = np.log10(sub.left) * 8
        np.testing.assert_allclose(k, np.round(k), atol=1e-9)
        assert (sub.density_per_decade * (1 / 8)).sum() == pytest.approx(1.0)
    x = df["iat"][df.topology == "a"].to_numpy()
    sub = h[h.topology == "a"]
    # each value counted in the bin [left, right) that contains it
    for _, row in sub.iterrows():
        assert row["count"] == ((x >= row.left * (1 - 1e-12)) & (x < row.right)).sum()


def test_log_histogram_zero_policies():
    vals = [0.0, 0.001, 0.01]
    floored = log_histogram_df(vals, bins_per_decade=1)
    assert floored["count"].sum() == 3
    assert floored.left.iloc[0] == pytest.approx(1e-6)
    dropped = log_histogram_df(vals, bins_per_decade=1, zeros="drop")
    assert dropped["count"].sum() == 2
    with pytest.raises(ConfigError, match="zeros"):
        log_histogram_df(vals, zeros="error")
    with pytest.raises(ConfigError, match="floor"):
        log_histogram_df(vals, zeros="bogus")  # type: ignore[arg-type]


def test_call_rate(timeline_calls):
    rate = call_rate_df(timeline_calls).set_index(["topology", "run_id"])
    # star/1: 7 calls from 0.0 to 4.0
    assert rate.loc[("star", 1), "calls"] == 7
    assert rate.loc[("star", 1), "call_rate"] == pytest.approx(7 / 4.0)
    disc = call_rate_df(timeline_calls, stage="discussion").set_index(["topology", "run_id"])
    assert disc.loc[("star", 1), "calls"] == 6


def _naive_clusters(times: list[float], threshold: float) -> list[list[float]]:
    clusters = [[times[0]]]
    for prev, t in itertools.pairwise(times):
        if t - prev < threshold:
            clusters[-1].append(t)
        else:
            clusters.append([t])
    return clusters


def test_vectorised_bursts_and_on_off_match_a_per_run_loop():
    rng = np.random.default_rng(9)
    rows = []
    for run in range(40):
        n = int(rng.integers(1, 12))
        gaps = np.where(rng.random(n) < 0.5, rng.uniform(0, 0.04, n), rng.uniform(0.05, 3, n))
        for k, t in enumerate(np.cumsum(gaps)):
            rows.append(
                {
                    "topology": "ab"[run % 2],
                    "run_id": run,
                    "start": t,
                    "end": t + 1,
                    "stage": "discussion",
                    "request_id": f"{run}-{k}",
                }
            )
    calls = pd.DataFrame(rows).sample(frac=1, random_state=1)  # shuffled input
    iats = iat_df(calls)
    sizes = burst_sizes_df(iats)
    periods = on_off_df(iats)
    for (topo, run), sub in calls.groupby(["topology", "run_id"]):
        times = sorted(sub.start)
        if len(times) < 2:
            assert run not in set(periods.run_id)
            continue
        clusters = _naive_clusters(times, 0.05)
        got = sizes[(sizes.topology == topo) & (sizes.run_id == run)]
        assert got["size"].tolist() == [len(c) for c in clusters if len(c) >= 2]
        assert got.burst.tolist() == list(range(len(got)))
        p = periods[(periods.topology == topo) & (periods.run_id == run)]
        expected = []
        for i, c in enumerate(clusters):
            expected.append(("on", c[0], c[-1], len(c)))
            if i + 1 < len(clusters):
                expected.append(("off", c[-1], clusters[i + 1][0], 0))
        assert list(zip(p.period, p.t0, p.t1, p["calls"], strict=True)) == expected
