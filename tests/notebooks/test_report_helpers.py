"""``agentlab.analysis.report``: the helpers that keep the paper notebooks free of typed numbers."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from agentlab.analysis.report import (
    best_fits_df,
    conclusions_markdown,
    format_seconds,
    sweep_summary_figure,
    topology_conclusions,
)
from agentlab.errors import ConfigError


def _summary(**overrides: list[float]) -> pd.DataFrame:
    cols: dict[str, list] = {
        "topology": ["full_mesh", "sequential", "star"],
        "runs": [4, 4, 4],
        "calls_per_run": [40.0, 10.0, 20.0],
        "burst_fraction": [0.7, 0.0, 0.3],
        "iat_median": [0.0, 0.3, 0.45],
        "mean_in_flight": [1.8, 1.2, 1.4],
        "peak_in_flight": [5.0, 3.0, 3.0],
        "tokens_per_run": [30000.0, 6000.0, 20000.0],
    }
    cols.update(overrides)
    return pd.DataFrame(cols)


def _fits() -> pd.DataFrame:
    return pd.DataFrame({
        "topology": ["star", "star", "star", "sequential"],
        "dist": ["expon", "lognorm", "gamma", "lognorm"],
        "n": [40, 40, 40, 12],
        "aic": [10.0, -5.0, -2.5, 3.0],
        "ks_pvalue": [0.001, 0.2, 0.01, 0.001],
    })  # fmt: skip


@pytest.mark.parametrize(
    ("x", "text"),
    [(0.0123, "12.3 ms"), (2.5, "2.5 s"), (4e-6, "4 µs"), (0, "0 s"), (math.nan, "n/a"),
     (None, "n/a")],
)  # fmt: skip
def test_format_seconds(x: float | None, text: str) -> None:
    assert format_seconds(x) == text


def test_best_fits_picks_lowest_aic_per_group() -> None:
    best = best_fits_df(_fits(), alpha=0.05).set_index("topology")
    assert best.loc["star", "best"] == "lognorm"
    assert best.loc["star", "runner_up"] == "gamma"
    assert best.loc["star", "delta_aic"] == pytest.approx(2.5)
    assert not best.loc["star", "ks_rejects"]  # p = 0.2
    # a single family: no runner-up, NaN delta; p = 0.001 is rejected at 5 %
    assert pd.isna(best.loc["sequential", "runner_up"])
    assert math.isnan(best.loc["sequential", "delta_aic"])
    assert best.loc["sequential", "ks_rejects"]


def test_conclusions_quote_the_tables() -> None:
    sentences = topology_conclusions(_summary(), _fits(), threshold=0.05)
    text = " ".join(sentences)
    assert sentences[0] == "4 runs per topology were analysed (full_mesh, sequential, star)."
    one_run = topology_conclusions(_summary(runs=[1, 1, 1]))[0]  # (it read "1 runs ... were")
    assert one_run == "1 run per topology was analysed (full_mesh, sequential, star)."
    assert topology_conclusions(_summary(runs=[1, 2, 2]))[0].startswith("1–2 runs per")
    assert "full_mesh makes the most LLM calls per run (40.0), sequential the fewest (10.0)" in text
    assert "a ratio of 4.0" in text
    assert "burstiest under full_mesh: 70% of inter-arrival times are shorter than 50 ms" in text
    assert "shortest first: full_mesh (0 s), sequential (300 ms), star (450 ms)" in text
    assert "star: lognorm fits the discussion IATs best by AIC (n = 40; next gamma" in text
    assert "does not reject it at α = 0.05 (p = 0.2)" in text
    seq = next(s for s in sentences if s.startswith("sequential: "))
    assert "(n = 12)" in seq and "next" not in seq  # one family fitted: no runner-up


def test_conclusions_follow_the_data() -> None:
    # Swap who is burstiest: the sentence must change with the numbers, not be canned.
    text = " ".join(topology_conclusions(_summary(burst_fraction=[0.1, 0.9, 0.2])))
    assert "burstiest under sequential: 90%" in text and "against 10% under full_mesh" in text


def test_conclusions_for_one_topology_and_missing_columns() -> None:
    one = _summary().iloc[[2]]
    sentences = topology_conclusions(one)
    assert "star makes 20.0 LLM calls per run." in sentences
    assert all("fewest" not in s for s in sentences)
    with pytest.raises(ConfigError, match="burst_fraction"):
        topology_conclusions(one.drop(columns=["burst_fraction"]))
    assert conclusions_markdown(["a.", "b."]) == "- a.\n- b."


def test_sweep_summary_figure_skips_failed_points_and_averages() -> None:
    df = pd.DataFrame({
        "agents": [3, 3, 4, 3, 4],
        "topology": ["star", "star", "star", "sequential", "sequential"],
        "status": ["ok", "ok", "ok", "ok", "failed"],
        "burst_fraction": [0.2, 0.4, 0.5, 0.0, 99.0],
    })  # fmt: skip
    fig = sweep_summary_figure(df, x="agents", y="burst_fraction", color="topology")
    traces = {t.name: (list(t.x), list(t.y)) for t in fig.data}
    assert traces["star"] == ([3, 4], [pytest.approx(0.3), 0.5])
    assert traces["sequential"] == ([3], [0.0])  # the failed point is left out
    with pytest.raises(ConfigError, match="no column 'calls_per_run'"):
        sweep_summary_figure(df, x="agents", y="calls_per_run")


def test_readable_numbers_keep_small_values_and_group_large_ones() -> None:
    from agentlab.analysis.report import readable, readable_number

    assert readable_number(0.00045043) == "0.0004504"  # round(3) would show 0.000
    assert readable_number(51930.75) == "51,931" and readable_number(-8795.0) == "-8,795"
    assert readable_number(3.6771) == "3.677" and readable_number(4) == "4"
    assert readable_number(float("nan")) == "" and readable_number(None) == ""
    assert readable_number(True) == "True" and readable_number("star") == "star"
    df = pd.DataFrame({"topology": ["star", "sequential"], "iat_median": [0.00045043, 3.6771]})
    html = readable(df).to_html()
    assert "0.0004504" in html and "3.677" in html and "star" in html
    assert ">0<" not in html and ">1<" not in html  # a default 0, 1, ... index is hidden
    kept = readable(df.set_index("topology")).to_html()
    assert "sequential" in kept and readable(df).data is df  # the data stay the frame's
