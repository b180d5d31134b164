from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agentlab.analysis import (
    iat_cdf_figure,
    iat_df,
    iat_histogram_figure,
    inflight_figure,
    stage_latency_figure,
)
from agentlab.errors import ConfigError

pytest.importorskip("plotly")


@pytest.fixture()
def iats() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "topology": ["star"] * 200 + ["mesh"] * 150,
            "run_id": 1,
            "iat": np.concatenate([rng.lognormal(-2, 1.5, 200), rng.exponential(1, 150)]),
        }
    )


def test_histogram_traces_log_axis_and_threshold(iats):
    fig = iat_histogram_figure(iats)
    assert fig.layout.xaxis.type == "log"
    names = [t.name for t in fig.data]
    assert names == ["mesh", "star", "threshold 50 ms"]
    assert list(fig.data[-1].x) == [0.05, 0.05]
    fitted = iat_histogram_figure(iats, dists=["lognorm", "expon"], threshold=None)
    assert len(fitted.data) == 2 * (1 + 2) + 2  # + a legend key per family
    assert "star lognorm" in [t.name for t in fitted.data]
    # the legend: a group's histogram and a family's key, not every (group, family) curve
    shown = [t.name for t in fitted.data if t.showlegend is not False]
    assert shown == ["mesh", "star", "fit: lognorm", "fit: expon"]


def test_a_topology_has_one_colour_in_every_figure(iats):
    # by its name, not its place in a figure's order: star alone, or after full_mesh
    def colour(fig, name):
        return next(t.line.color for t in fig.data if t.name == name)

    both = iats.assign(topology=iats["topology"].replace({"mesh": "full_mesh"}))
    alone = both[both["topology"] == "star"]
    assert colour(iat_histogram_figure(both), "star") == colour(iat_histogram_figure(alone), "star")
    assert colour(iat_cdf_figure(both), "star empirical") == colour(
        iat_cdf_figure(alone), "star empirical"
    )
    assert colour(iat_histogram_figure(both), "full_mesh") != colour(
        iat_histogram_figure(both), "star"
    )


def test_cdf_traces(iats):
    fig = iat_cdf_figure(iats, max_points=50)
    assert len(fig.data) == 2 * (1 + 4) + 4  # + a legend key per family
    assert fig.layout.xaxis.type == "log"
    ecdf = fig.data[0]
    assert len(ecdf.x) <= 50
    assert ecdf.y[-1] == pytest.approx(1.0)
    assert np.all(np.diff(ecdf.y) > 0)


def test_inflight_and_stage_latency(timeline_calls):
    fig = inflight_figure(timeline_calls, max_runs=1)
    assert len(fig.data) == 2  # one run per topology
    assert max(fig.data[0].y) >= 1
    box = stage_latency_figure(timeline_calls)
    assert len(box.data) == 2
    assert list(box.layout.xaxis.categoryarray) == ["discussion", "execution"]
    violin = stage_latency_figure(timeline_calls, kind="violin", log_y=True)
    assert violin.data[0].type == "violin"
    assert violin.layout.yaxis.type == "log"
    # the decade labels of every log time axis, not plotly's minor "2 5" labels
    assert all(t.endswith("s") for t in violin.layout.yaxis.ticktext), violin.layout.yaxis
    with pytest.raises(ConfigError, match="violin"):
        stage_latency_figure(timeline_calls, kind="bar")


def test_histogram_from_iat_df_end_to_end(timeline_calls):
    fig = iat_histogram_figure(iat_df(timeline_calls))
    assert len(fig.data) == 3


def test_replicates_figure_says_what_its_bars_are_under_the_title() -> None:
    """Notebook 04's sweep charts: the y-axis title "calls_per_run (mean, 95% CI over n=3
    replicates)" ran longer than the plot is high (cut off at the bottom, over the title's
    first letters in the exported notebook); the axis names the metric and the line under
    the title what the points and bars are."""
    from agentlab.analysis.report import replicates_figure

    agg = pd.DataFrame({"agents": [3, 4, 3, 4], "topology": ["seq", "seq", "star", "star"],
                        "n": 3, "calls_per_run_mean": [16.0, 20.0, 19.7, 19.0],
                        "calls_per_run_ci_low": [16.0, 20.0, 0.0, 19.0],
                        "calls_per_run_ci_high": [16.0, 20.0, 39.6, 19.0]})  # fmt: skip
    fig = replicates_figure(agg, x="agents", metric="calls_per_run", color="topology")
    assert fig.layout.yaxis.title.text == "calls_per_run"
    title = fig.layout.title.text
    assert title.startswith("calls_per_run by agents") and "95% CI over n = 3 replicates" in title
    assert [t.name for t in fig.data] == ["seq", "star"]
    assert list(fig.data[1].error_y.array) == pytest.approx([19.9, 0.0])
