"""Charts of the browser's pages, as HTML fragments on one shared ``plotly.min.js``.

The IAT histogram is :func:`agentlab.analysis.figures.iat_histogram_figure`, the chart
the widgets and static snapshots draw (one chart code base); the rest are small here:
calls per tick, a sub-run's call graph (who called the LLM when, in which stage), and a
sweep's recorded metric against a parameter with replicate confidence intervals. Every
chart carries pre-aggregated data only (binned, one bar per call of one run, one point
per combination), so a page stays small whatever the run's size; widths follow the page
(``responsive``), readable from 400 to 1,600 px.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from agentlab.core.axes import integer_ticks

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "call_graph_chart",
    "calls_per_tick_chart",
    "iat_chart",
    "latency_per_tick_chart",
    "recorded_figure_chart",
    "sweep_metric_chart",
]

_CONFIG = {"responsive": True, "displaylogo": False}


def _html(fig: Any, height: int = 320) -> str:
    fig.update_layout(
        height=height,
        autosize=True,
        margin={"l": 56, "r": 12, "t": 36, "b": 48},
        legend={"orientation": "h", "y": -0.25},
        template="plotly_white",
    )
    return str(
        fig.to_html(full_html=False, include_plotlyjs=False, config=_CONFIG, default_width="100%")
    )


def _tick_axis(fig: Any, ticks: Any) -> None:
    # a few ticks are ticked at their values: automatic ticks put 3 bars' axis at 1, 1.5,
    # 2, ... which "d" printed as "1 1 2 2 3 3 4", off the bars
    values = integer_ticks(ticks)
    if values:
        fig.update_xaxes(title_text="tick", tickmode="array", tickvals=values)
    else:
        fig.update_xaxes(title_text="tick", tickformat="d")


def calls_per_tick_chart(timeline: pd.DataFrame | None) -> dict[str, str] | None:
    """LLM calls (and errors) per committed tick, from the ``timeline`` dataset."""
    if timeline is None or not len(timeline) or "llm_calls" not in timeline:
        return None
    import plotly.graph_objects as go

    t = timeline.sort_values("tick")
    fig = go.Figure(go.Bar(x=t["tick"], y=t["llm_calls"], name="LLM calls"))
    if "errors" in t and t["errors"].fillna(0).sum():
        fig.add_trace(
            go.Bar(x=t["tick"], y=t["errors"], name="step errors", marker_color="#cf222e")
        )
    _tick_axis(fig, t["tick"])
    fig.update_yaxes(title_text="per tick", rangemode="tozero")
    return {"title": "LLM calls per tick", "html": _html(fig)}


def latency_per_tick_chart(calls: pd.DataFrame | None) -> dict[str, str] | None:
    """Latency p50 / p95 and TTFT p50 of the calls started in each tick: how waits grow
    with the load a tick puts on the server (none for a run whose calls took no time)."""
    if calls is None or not len(calls) or "tick" not in calls:
        return None
    c = calls.dropna(subset=["tick", "start", "end"])
    c = c.assign(latency=c["end"] - c["start"], ttft=c["first_token"] - c["start"])
    if not len(c) or not (c["latency"] > 0).any():
        return None
    import plotly.graph_objects as go

    by = c.groupby("tick", sort=True)
    fig = go.Figure()
    for name, col, q, line in (("latency p50", "latency", 0.5, {"color": "#636efa"}),
                               ("latency p95", "latency", 0.95, {"color": "#636efa", "dash": "dot"}),
                               ("TTFT p50", "ttft", 0.5, {"color": "#00cc96"})):  # fmt: skip
        y = by[col].quantile(q)
        if y.notna().any():
            fig.add_trace(go.Scatter(x=y.index, y=y.values, name=name, mode="lines+markers",
                                     line=line))  # fmt: skip
    _tick_axis(fig, c["tick"])
    fig.update_yaxes(title_text="seconds", rangemode="tozero")
    return {"title": "LLM call latency per tick", "html": _html(fig)}


def iat_chart(calls: pd.DataFrame | None, by: str | None) -> dict[str, str] | None:
    """Inter-arrival times of the run's LLM calls (log-binned; for an experiment, of its
    discussion stage per topology), the shared
    :func:`~agentlab.analysis.figures.iat_histogram_figure`."""
    from agentlab.analysis.figures import iat_histogram_figure
    from agentlab.analysis.iat import DEFAULT_STAGE, iat_df

    if calls is None or len(calls) < 3 or "start" not in calls:
        return None
    groups = [c for c in ("topology", "run_id") if by == "topology" and c in calls]
    title = "LLM call inter-arrival times"
    # an experiment's: the discussion's, as its table's IAT median and burst fraction and
    # the paper's (all stages pooled, a chart beside that table drew other IATs)
    discussion = groups and "stage" in calls and (calls["stage"] == DEFAULT_STAGE).any()
    if discussion:
        title = f"{DEFAULT_STAGE.capitalize()} inter-arrival times by topology"
    iats = iat_df(calls, stage=DEFAULT_STAGE if discussion else None, by=groups or None)
    iats = iats[iats["iat"] > 0]
    if len(iats) < 2:
        return None
    fig = iat_histogram_figure(iats, by="topology" if groups else None, title="")
    return {"title": title, "html": _html(fig)}


def call_graph_chart(calls: pd.DataFrame | None) -> dict[str, str] | None:
    """One bar per LLM call of one run: agent (y) against time (x), coloured by stage."""
    if calls is None or not len(calls):
        return None
    import plotly.graph_objects as go

    c = calls.sort_values("start")
    t0 = float(c["start"].min())
    stage = c["stage"].fillna("–").astype(str) if "stage" in c else None
    fig = go.Figure()
    groups = stage.unique() if stage is not None else ["calls"]
    for g in groups:
        part = c[stage == g] if stage is not None else c
        fig.add_trace(
            go.Bar(
                y=part["agent_id"].fillna("?").astype(str),
                x=(part["end"] - part["start"]).round(4),
                base=(part["start"] - t0).round(4),
                orientation="h",
                name=str(g),
                customdata=part["request_id"],
                hovertemplate="%{y} · %{customdata}<br>%{base:.2f}s + %{x:.2f}s<extra>"
                + str(g)
                + "</extra>",
            )
        )
    fig.update_layout(barmode="overlay")
    fig.update_xaxes(title_text="seconds since the run's first call")
    fig.update_yaxes(title_text="", categoryorder="category descending")
    n = c["agent_id"].nunique()
    return {
        "title": "Call graph: who called the LLM when, by stage",
        "html": _html(fig, 160 + 28 * n),
    }


def _category(value: object) -> str:
    """A parameter value as an axis category: a list's items joined (a sweep over
    ``topologies=[["star"], ["sequential"]]`` read "['star']" on the axis)."""
    if isinstance(value, str) and value[:1] in "[(" and value[-1:] in "])":
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return str(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def sweep_metric_chart(agg: pd.DataFrame, param: str, metric: str) -> dict[str, str]:
    """``metric`` against ``param`` (rows of ``sweep.summary.aggregate_df``): the mean with
    its replicate confidence interval."""
    import plotly.graph_objects as go
    from pandas.api.types import is_numeric_dtype

    a = agg.sort_values(param)
    numeric = is_numeric_dtype(a[param])  # (pandas 3 keeps text as "str", not object)
    mean = a[f"{metric}_mean"]
    err = {
        "type": "data",
        "symmetric": False,
        "array": (a[f"{metric}_ci_high"] - mean).fillna(0),
        "arrayminus": (mean - a[f"{metric}_ci_low"]).fillna(0),
    }
    fig = go.Figure(
        go.Scatter(
            x=a[param] if numeric else a[param].map(_category),
            y=mean,
            error_y=err,
            mode="lines+markers",
            name=metric,
            customdata=a["n"],
            hovertemplate=f"{param}=%{{x}}<br>{metric}=%{{y:.4g}} (n=%{{customdata}})<extra></extra>",
        )
    )
    fig.update_xaxes(title_text=param)
    ticks = integer_ticks(a[param]) if numeric else None
    if ticks is not None:  # an integer parameter: no ticks at 1.2, 1.4, ...
        fig.update_xaxes(tickmode="array", tickvals=ticks)
    fig.update_yaxes(title_text=f"{metric} (mean, 95% CI)")
    return {"title": f"{metric} vs {param}", "html": _html(fig)}


def recorded_figure_chart(title: str, text: str) -> dict[str, str] | None:
    """A figure a notebook recorded (``record_figure``: plotly JSON), or None if the file
    is not a figure."""
    import plotly.io as pio

    try:
        fig = pio.from_json(text)
    except (ValueError, TypeError):
        return None
    # drawn as the notebook laid it out (its height, legend and margins; only its width
    # follows the page): squeezed into the browser's 320-px chart cells with their legend
    # moved under the plot, a paper's figures overlapped their own labels
    height = int(fig.layout.height or 450)
    fig.update_layout(width=None, autosize=True)
    html = fig.to_html(full_html=False, include_plotlyjs=False, config=_CONFIG,
                       default_width="100%", default_height=f"{height}px")  # fmt: skip
    return {"title": title, "html": str(html)}
