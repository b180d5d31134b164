"""The one tick rule of log time axes (agentlab.core.axes), as the plotly figures use it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from agentlab.analysis.figures import decade_label, log_time_ticks


def test_decades_get_short_labels() -> None:
    labels = [decade_label(10.0**d) for d in range(-6, 4)]
    assert labels == ["1 µs", "10 µs", "100 µs", "1 ms", "10 ms", "100 ms", "1 s", "10 s",
                      "100 s", "1000 s"]  # fmt: skip


def test_ticks_cover_the_range_at_decades_only() -> None:
    assert log_time_ticks(0.002, 20) == [(0.01, "10 ms"), (0.1, "100 ms"), (1.0, "1 s"),
                                         (10.0, "10 s")]  # fmt: skip
    assert log_time_ticks(0.3, 0.4) == [(0.1, "100 ms"), (1.0, "1 s")]  # none inside
    assert log_time_ticks(0, 1) == [] and log_time_ticks(2, 1) == []


def test_a_short_range_gets_its_2x_and_5x_steps() -> None:
    """A study's latencies per stage span 1.5-80 s: one decade inside, and the axis read
    "10 s" alone. Under two decades, the 2x and 5x steps inside are ticked too."""
    assert [lab for _, lab in log_time_ticks(1.5, 80)] == ["2 s", "5 s", "10 s", "20 s", "50 s"]
    assert log_time_ticks(0.02, 0.05) == [(0.02, "20 ms"), (0.05, "50 ms")]  # no decade inside
    assert [lab for _, lab in log_time_ticks(4e-4, 3e-3)] == ["500 µs", "1 ms", "2 ms"]
    assert [lab for _, lab in log_time_ticks(2e-7, 5e-7)] == ["2e-07 s", "5e-07 s"]
    for d in range(-7, 5):  # a decade's label is the one it had
        assert decade_label(10.0**d) == log_time_ticks(10.0**d * 0.99, 10.0**d * 1.01)[0][1]


def test_plotly_iat_figure_uses_the_same_ticks() -> None:
    from agentlab.analysis import iat_histogram_figure

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"topology": "star", "iat": 10 ** rng.uniform(-3, 1, 300)})
    fig = iat_histogram_figure(df)
    ax = fig.layout.xaxis
    assert ax.type == "log" and "1 ms" in ax.ticktext and "1 s" in ax.ticktext
    assert set(ax.ticktext) <= {lab for _, lab in log_time_ticks(1e-6, 1e3)}


def test_static_snapshot_thins_labels_to_fit() -> None:
    from agentlab.viz._static import step_chart_svg

    edges = list(np.geomspace(1e-4, 1e3, 57))
    narrow = step_chart_svg(edges, {"a": [1.0] * 56}, x_label="gap", y_label="n", width=260)
    wide = step_chart_svg(edges, {"a": [1.0] * 56}, x_label="gap", y_label="n", width=900)
    assert "100 µs" in wide and "1000 s" in wide and "1 ms" in wide
    assert narrow.count(" ms<") + narrow.count(" s<") < wide.count(" ms<") + wide.count(" s<")


def test_static_snapshot_keeps_the_last_label_inside_the_chart() -> None:
    """The IAT snapshot's last decade sits at the chart's right edge: centred there, its
    label was cut ("1000 s" showed as "1000"); it ends at the edge instead."""
    import re

    from agentlab.viz._static import step_chart_svg

    edges = [1e-4 * 10 ** (i / 8) for i in range(57)]  # 100 µs .. 1000 s, as the snapshot bins
    svg = step_chart_svg(edges, {"a": [1.0] * 56}, x_label="gap", y_label="n", width=560)
    labels = re.findall(r'<text x="([\d.]+)" y="\d+" text-anchor="(\w+)" fill="#444">([^<]*)<', svg)
    last = labels[-1]
    assert last[2] == "1000 s" and last[1] == "end" and float(last[0]) <= 560
    assert all(a == "middle" for _, a, _ in labels[:-1])


def test_an_integer_parameter_is_ticked_at_its_values() -> None:
    """Sweep charts over an integer parameter (agents = 1, 2) ticked at 1 and 2, not at
    plotly's 1.2, 1.4, ... (the run browser's sweep page and the notebook's figure)."""
    from agentlab.analysis.report import sweep_summary_figure
    from agentlab.core.axes import integer_ticks
    from agentlab.view.charts import sweep_metric_chart

    assert integer_ticks(np.array([4, 2, 2, 8])) == [2, 4, 8]
    assert integer_ticks(pd.Series([1.0, 2.0])) == [1, 2]  # whole floats count
    assert integer_ticks([0.5, 1.0]) is None and integer_ticks(["a", "b"]) is None
    assert integer_ticks(range(13)) is None  # more values than ticks: the library's axis
    assert integer_ticks([1.0, float("nan")]) is None

    df = pd.DataFrame({"agents": [1, 2, 1, 2], "status": "ok", "calls": [3.0, 5.0, 4.0, 6.0]})
    fig = sweep_summary_figure(df, x="agents", y="calls")
    assert fig.layout.xaxis.tickmode == "array" and list(fig.layout.xaxis.tickvals) == [1, 2]
    fractional = sweep_summary_figure(df.assign(agents=[0.5, 1.5, 0.5, 1.5]), x="agents", y="calls")
    assert fractional.layout.xaxis.tickvals is None

    agg = pd.DataFrame({"agents": [1, 2], "calls_mean": [3.5, 5.5], "calls_ci_low": [3.0, 5.0],
                        "calls_ci_high": [4.0, 6.0], "n": [2, 2]})  # fmt: skip
    html = sweep_metric_chart(agg, "agents", "calls")["html"]
    assert '"tickvals":[1,2]' in html.replace(" ", "")


def test_the_run_browsers_calls_per_tick_bars_are_ticked_at_their_ticks() -> None:
    """A 3-tick run's bars sat between labels "1 1 2 2 3 3 4" (automatic half steps
    printed as whole numbers); a few ticks are labelled at their own values."""
    import json
    import re

    from agentlab.view.charts import calls_per_tick_chart

    few = calls_per_tick_chart(pd.DataFrame({"tick": [1, 2, 3], "llm_calls": [34, 37, 31]}))
    assert few is not None
    xaxis = re.search(r'"xaxis":(\{"title":\{"text":"tick"\}.*?\})', few["html"])
    assert xaxis is not None and json.loads(xaxis.group(1))["tickvals"] == [1, 2, 3]
    many = calls_per_tick_chart(pd.DataFrame({"tick": range(40), "llm_calls": 5}))
    assert many is not None and '"tickvals"' not in many["html"]


def test_a_list_valued_parameter_reads_as_its_items_on_the_sweep_page() -> None:
    """A sweep over ``topologies=[["sequential"], ["star"]]`` showed "['sequential']"."""
    from agentlab.view.charts import sweep_metric_chart

    agg = pd.DataFrame({"topologies": ["['sequential']", "['star', 'full_mesh']"], "n": 3,
                        "calls_mean": [16.0, 19.0], "calls_ci_low": [15.0, 18.0],
                        "calls_ci_high": [17.0, 20.0]})  # fmt: skip
    html = sweep_metric_chart(agg, "topologies", "calls")["html"]
    assert '"x":["sequential","star, full_mesh"]' in html and "['" not in html
