"""The figures of a run's HTML report (plotly), and the plotly.js they load: written once
next to the page (no CDN; one copy shared by every report in a folder) or inlined in a
self-contained page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.errors import MissingExtraError

if TYPE_CHECKING:
    from agentlab.store.run import Run

__all__ = [
    "PLOTLY_JS",
    "experiment_figures",
    "fig_html",
    "figures_html",
    "plotly_inline",
    "require_plotly",
    "run_figures",
    "span_durations",
    "write_plotly_js",
]

PLOTLY_JS = "plotly.min.js"


def figures_html(run: Run) -> list[dict[str, str]]:
    """The report's figures of ``run`` as ``{"title", "html"}`` (plotly.js not included)."""
    return fig_html(run_figures(run))


def require_plotly(what: str = "agentlab report --html") -> None:
    """Raise :class:`MissingExtraError` (with the install command) when plotly is missing."""
    try:
        import plotly  # noqa: F401
    except ModuleNotFoundError as exc:
        raise MissingExtraError(what, "viz", exc.name) from None


def run_figures(run: Run) -> list[tuple[str, Any]]:
    import plotly.express as px

    figs: list[tuple[str, Any]] = []
    calls, spans, timeline = run.llm_calls_df(), run.spans_df(), run.timeline_df()
    study = run.manifest.get("kind") == "topology_experiment" and "topology" in calls
    if study:
        calls = run.of_finished_runs(calls)  # as its traffic table
        figs += experiment_figures(calls)
    if len(timeline) and "llm_calls" in timeline:
        f = px.line(timeline, x="tick", y="llm_calls", markers=True)
        f.update_xaxes(title="tick", tickformat="d", dtick=max(1, len(timeline) // 12))
        f.update_yaxes(title="LLM calls", rangemode="tozero", tickformat=",d")
        if timeline["llm_calls"].max() <= 10:
            f.update_yaxes(dtick=1)  # counts: no 2.5-call gridlines
        figs.append(("LLM calls per tick", f))
    timed = len(calls) and {"start", "end"} <= set(calls.columns)
    if timed and study and "run_id" in calls:
        # on its runs' own time (on the log's clock they lie end to end); its latency is
        # drawn per stage and topology above
        figs.append(("LLM calls over a run, by topology", calls_over_a_run(calls)))
    elif timed:
        t0 = float(calls["start"].min())
        rel = calls.assign(t=calls["start"] - t0, latency_s=calls["end"] - calls["start"])
        f = px.histogram(rel, x="t", nbins=60)
        f.update_xaxes(title="seconds since the first LLM call")
        f.update_yaxes(title="LLM calls started")
        figs.append(("LLM calls over time", f))
        f = px.histogram(rel, x="latency_s", nbins=50)
        f.update_xaxes(title="latency (s)")
        f.update_yaxes(title="LLM calls")
        figs.append(("LLM call latency", f))
    if len(spans):
        figs.append(span_durations(spans))
    return figs


def experiment_figures(calls: Any) -> list[tuple[str, Any]]:
    """A topology study's own figures, the paper's: the discussion's inter-arrival times
    per topology (log bins, the burst threshold drawn) and the latency of each workflow
    stage per topology. Its report showed only the figures of any run (calls over time,
    latency pooled over topologies), none comparing the topologies it was run to compare."""
    import warnings

    from agentlab.analysis.figures import iat_histogram_figure, stage_latency_figure
    from agentlab.analysis.iat import iat_df

    figs: list[tuple[str, Any]] = []
    with warnings.catch_warnings():  # a workflow without a discussion stage: no IAT figure
        warnings.simplefilter("ignore")
        iats = iat_df(calls)
    iats = iats[iats["iat"] > 0]  # ties (a fan-out's simultaneous sends) have no log bin
    if iats["topology"].nunique() and len(iats) >= 2:
        f = iat_histogram_figure(iats, title="")
        figs.append(("Discussion inter-arrival times by topology", f))
    timed = calls[calls["end"] > calls["start"]] if {"start", "end"} <= set(calls) else calls[:0]
    if "stage" in timed and timed["stage"].notna().any():
        f = stage_latency_figure(timed, log_y=True, title="")
        figs.append(("LLM call latency by stage and topology", f))
    return figs


def calls_over_a_run(calls: Any) -> Any:
    """When a study's calls start within their run (seconds since the run's first call),
    per run of each topology: the shape of one workflow run (its stages, the discussion's
    bursts), which the log's clock, laying runs end to end, hides."""
    import plotly.express as px

    calls = calls.dropna(subset=["start", "run_id"])
    t = calls["start"] - calls.groupby("run_id")["start"].transform("min")
    runs = calls.groupby("topology")["run_id"].transform("nunique")
    rel = calls.assign(t=t, per_run=1.0 / runs)
    f = px.histogram(rel, x="t", y="per_run", color="topology", histfunc="sum", nbins=80,
                     barmode="overlay", opacity=0.6,  # colours in the order of the IAT figure's
                     category_orders={"topology": sorted(rel["topology"].unique())})  # fmt: skip
    f.update_xaxes(title="seconds since the run's first LLM call")
    f.update_yaxes(title="LLM calls started per run")
    return f


def span_durations(spans: Any) -> tuple[str, Any]:
    """Box plot of span durations per name on a log time axis. Spans that took no time on
    the run's clock (a virtual clock's tools and env steps) cannot sit on a log axis: they
    are named in the title with their counts instead of leaving an empty column."""
    import plotly.express as px

    from agentlab.analysis.figures import _log_time_axis

    timed = spans[spans["duration"] > 0]
    zero = spans.loc[~(spans["duration"] > 0), "name"].value_counts()
    f = px.box(timed, x="name", y="duration")
    _log_time_axis(f, "duration", axis="y")
    f.update_xaxes(title="span name")
    title = "Span duration by name"
    if len(zero):
        listed = ", ".join(f"{n} ({c:,})" for n, c in zero.items())
        title += f" (spans of 0 s on the run's clock, not drawn: {listed})"
    return title, f


def fig_html(figs: list[tuple[str, Any]]) -> list[dict[str, str]]:
    out = []
    for title, fig in figs:
        fig.update_layout(margin={"l": 60, "r": 20, "t": 20, "b": 50}, height=340)
        out.append({"title": title, "html": fig.to_html(full_html=False, include_plotlyjs=False)})
    return out


def write_plotly_js(folder: Path) -> str:
    path = folder / PLOTLY_JS
    if not path.is_file():
        from plotly.offline import get_plotlyjs

        path.write_text(get_plotlyjs())
    return PLOTLY_JS


def plotly_inline() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().replace("</script", "<\\/script")
