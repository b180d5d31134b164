"""Plotly figures over the analysis DataFrames. plotly is imported inside each function,
so importing :mod:`agentlab.analysis` stays free of it.

Each figure draws one colour per group (topology by default); fitted curves reuse their
group's colour with a dashed line. Histograms are drawn as step lines rather than bars
because bar widths on a log axis are awkward; the y quantity is "density per decade"
so a fitted density ``pdf(x) * x * ln 10`` overlays it directly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from agentlab.analysis._frame import (
    DEFAULT_EPS,
    DEFAULT_ZEROS,
    By,
    ZerosPolicy,
    as_by,
    iter_groups,
    positive_values,
    require_columns,
)
from agentlab.analysis.fits import _fitted, resolve_dists
from agentlab.analysis.iat import DEFAULT_BY, DEFAULT_THRESHOLD, log_histogram_df
from agentlab.analysis.inflight import inflight_timeline_df
from agentlab.analysis.paper_iat import paper_iat_histogram_df
from agentlab.analysis.paper_lengths import CAP_TOKENS, paper_lengths_df
from agentlab.core.axes import decade_label, log_time_ticks

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = [
    "STAGES",
    "decade_label",
    "iat_cdf_figure",
    "iat_histogram_figure",
    "inflight_figure",
    "log_time_ticks",
    "paper_iat_figure",
    "stage_latency_figure",
]

#: Stage order of the topology workflow (unknown stages are appended alphabetically).
STAGES: tuple[str, ...] = (
    "recruitment",
    "discussion",
    "synthesis",
    "execution",
    "evaluation",
    "final",
)
_DASHES = ("dash", "dot", "dashdot", "longdash", "longdashdot")


# log-scale time axes: the one tick rule (agentlab.core.axes) of the plotly figures here,
# the static SVG snapshots and the live widgets (contract 2)


def _log_time_axis(fig: Any, title: str, axis: str = "x") -> None:
    """A log ``axis`` (x or y) with the decade ticks of :func:`log_time_ticks` over the
    traces' values on it."""
    vs = [v for tr in fig.data for v in (() if tr[axis] is None else tr[axis])]
    pos = [float(v) for v in vs if v is not None and math.isfinite(v) and v > 0]
    ticks = log_time_ticks(min(pos), max(pos)) if len(pos) >= 2 else []
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    update(
        type="log",
        title_text=title,
        tickvals=[v for v, _ in ticks] or None,
        ticktext=[t for _, t in ticks] or None,
    )


def _label(key: dict[str, Any]) -> str:
    return " / ".join(str(v) for v in key.values()) or "all"


def _colors() -> list[str]:
    import plotly.colors

    return list(plotly.colors.qualitative.Plotly)


#: each topology's colour in every figure: a group's colour follows its name, not its place
#: in one figure's order (Sequential was red in the IAT histogram and blue in the paper's)
_TOPOLOGY_COLOR = {"full_mesh": 0, "sequential": 1, "star": 2}


def _color(colors: list[str], head: Any, i: int) -> str:
    """The colour of a group whose first key value is ``head``, ``i``-th in its figure."""
    k = _TOPOLOGY_COLOR.get(head) if isinstance(head, str) else None
    return colors[(i if k is None else k) % len(colors)]


def _family_keys(fig: go.Figure, families: Sequence[str]) -> None:
    """One legend entry per fitted family (its dash, in grey): the fitted curves take their
    group's colour and the family's dash without an entry each, so a legend of 3 groups
    and 3 families holds 6 entries, not 12 that scroll out of a notebook-sized figure."""
    import plotly.graph_objects as go

    for j, dname in enumerate(families):
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="lines",
                line={"color": "#555555", "dash": _DASHES[j % len(_DASHES)], "width": 1},
                name=f"fit: {dname}",
            )
        )


def _fit_curves(x: np.ndarray, dists: Sequence[str]) -> dict[str, Any]:
    """Frozen fitted laws for ``x`` (families that cannot be fitted are skipped)."""
    if not dists or len(x) < 2 or np.ptp(x) == 0:
        return {}
    return {name: _fitted(name, x) for name in resolve_dists(dists)}


def iat_histogram_figure(
    iats: pd.DataFrame,
    by: By = "topology",
    *,
    value: str = "iat",
    threshold: float | None = DEFAULT_THRESHOLD,
    bins_per_decade: int = 8,
    dists: Sequence[str] | None = None,
    zeros: ZerosPolicy = DEFAULT_ZEROS,
    eps: float = DEFAULT_EPS,
    title: str = "IAT distribution",
) -> go.Figure:
    """Log-binned IAT histogram per group on a log x axis.

    Args:
        iats: output of :func:`~agentlab.analysis.iat.iat_df`.
        by: grouping columns (one step-line trace each).
        value: IAT column.
        threshold: burst threshold drawn as a vertical dotted line (``None`` to omit).
        bins_per_decade: log bins per factor of ten.
        dists: families whose fitted densities are overlaid per group (``None``: none).
        zeros, eps: zero/tie policy, as for the fits.
        title: figure title.

    Returns:
        A ``plotly.graph_objects.Figure`` with one histogram trace per group, one
        trace per (group, family) (not in the legend), one legend key per family and one
        threshold trace.
    """
    import plotly.graph_objects as go

    keys = as_by(by)
    require_columns(iats, [*keys, value], "iats")
    hist = log_histogram_df(
        iats, keys, value=value, bins_per_decade=bins_per_decade, zeros=zeros, eps=eps
    )
    colors = _colors()
    fig = go.Figure()
    ymax = 0.0
    for i, (key, sub) in enumerate(iter_groups(iats, keys)):
        h = hist
        for col, val in key.items():
            h = h[h[col] == val]
        if h.empty:
            continue
        color, name = _color(colors, next(iter(key.values()), None), i), _label(key)
        y = h["density_per_decade"].to_numpy()
        fig.add_trace(
            go.Scatter(
                x=np.append(h["left"].to_numpy(), h["right"].iloc[-1]),
                y=np.append(y, y[-1]),
                mode="lines",
                line={"shape": "hv", "color": color},
                name=name,
                legendgroup=name,
            )
        )
        ymax = max(ymax, float(y.max()))
        if dists:
            x = positive_values(sub[value], zeros=zeros, eps=eps)
            grid = np.geomspace(h["left"].iloc[0], h["right"].iloc[-1], 200)
            for j, (dname, dist) in enumerate(_fit_curves(x, dists).items()):
                fig.add_trace(
                    go.Scatter(
                        x=grid,
                        y=dist.pdf(grid) * grid * math.log(10),
                        mode="lines",
                        line={"color": color, "dash": _DASHES[j % len(_DASHES)], "width": 1},
                        name=f"{name} {dname}",
                        legendgroup=name,
                        showlegend=False,
                    )
                )
    if dists:
        _family_keys(fig, resolve_dists(dists))
    if threshold is not None:
        fig.add_trace(
            go.Scatter(
                x=[threshold, threshold],
                y=[0, ymax * 1.05 or 1.0],
                mode="lines",
                line={"color": "black", "dash": "dot"},
                name=f"threshold {threshold * 1000:g} ms",
            )
        )
    _log_time_axis(fig, "inter-arrival time")
    fig.update_yaxes(title_text="density per decade")
    fig.update_layout(title_text=title, template="plotly_white")
    return fig


def paper_iat_figure(
    calls: pd.DataFrame,
    *,
    threshold: float | None = DEFAULT_THRESHOLD,
    title: str = "Discussion IATs against the paper",
    **kwargs: Any,
) -> go.Figure:
    """One panel per topology: the simulated discussion-window IATs (Table 2's) against the
    paper's published histogram, density per decade on the published bins
    (:func:`~agentlab.analysis.paper_iat.paper_iat_histogram_df`; ``kwargs`` go to it).

    Returns:
        A figure with two step-line traces per topology (simulated in the topology's
        colour, published in grey) and the burst ``threshold`` in every panel.

    Raises:
        ConfigError: no call of ``calls`` gives such an IAT (another workflow's run, or
            one call a run).
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from agentlab.errors import ConfigError

    hist = paper_iat_histogram_df(calls, **kwargs)
    topologies = list(dict.fromkeys(hist["topology"]))
    if not topologies:
        raise ConfigError(
            "paper_iat_figure: no discussion-window IATs of a topology the paper published"
            " (sequential, star, full_mesh) in these calls"
        )
    fig = make_subplots(rows=1, cols=len(topologies), shared_xaxes="all", shared_yaxes=True,
                        subplot_titles=topologies, horizontal_spacing=0.04)  # fmt: skip
    colors = _colors()
    for i, topology in enumerate(topologies):
        h = hist[hist["topology"] == topology]
        nz = h[(h["simulated_count"] > 0) | (h["published_count"] > 0)]
        h = h.loc[nz.index.min() : nz.index.max()]  # first to last bin holding an IAT
        x = np.append(h["left"].to_numpy(), h["right"].iloc[-1])
        for col, name, style in (
            ("published_density", "published", {"color": "#7f7f7f", "dash": "dot"}),
            ("simulated_density", "simulated", {"color": _color(colors, topology, i)}),
        ):
            y = h[col].to_numpy()
            trace = go.Scatter(x=x, y=np.append(y, y[-1]), mode="lines",
                               line={"shape": "hv", **style}, name=f"{topology} {name}",
                               legendgroup=topology)  # fmt: skip
            fig.add_trace(trace, row=1, col=i + 1)
        if threshold is not None:
            top = float(max(h["published_density"].max(), h["simulated_density"].max()))
            line = go.Scatter(x=[threshold, threshold], y=[0, top * 1.05 or 1.0], mode="lines",
                              line={"color": "black", "dash": "dash", "width": 1},
                              name=f"threshold {threshold * 1000:g} ms",
                              showlegend=i == 0)  # fmt: skip
            fig.add_trace(line, row=1, col=i + 1)
    _log_time_axis(fig, "inter-arrival time")
    fig.update_yaxes(title_text="density per decade", row=1, col=1)
    fig.update_layout(title_text=title, template="plotly_white")
    return fig


#: short names of the paper's discussion call labels, for axis ticks
_CALL_SHORT = {"horizontal_discussion": "turn", "vertical_solver": "solver",
               "vertical_reviewer": "reviewer", "full_mesh_message": "message"}  # fmt: skip


def paper_lengths_figure(
    calls: pd.DataFrame,
    *,
    title: str = "Discussion prompt and reply tokens against the paper",
    **kwargs: Any,
) -> go.Figure:
    """Mean prompt (top) and reply (bottom) tokens by the paper's call label and round:
    simulated as bars in the topology's colour, published as grey diamonds
    (:func:`~agentlab.analysis.paper_lengths.paper_lengths_df`; ``kwargs`` go to it); the
    hover text holds both quartiles and, for replies, the share at the output cap.

    Raises:
        ConfigError: no call of ``calls`` carries a call label and round the paper published.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from agentlab.errors import ConfigError

    df = paper_lengths_df(calls, **kwargs)
    if df.empty:
        raise ConfigError(
            "paper_lengths_figure: no calls with a discussion call label and round the paper"
            " published (labels['call'] of horizontal_discussion, vertical_solver,"
            " vertical_reviewer, full_mesh_message)"
        )
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("prompt tokens (mean)", "reply tokens (mean)"))  # fmt: skip
    colors = _colors()
    order = {t: i for i, t in enumerate(dict.fromkeys(df["topology"]))}
    for row, kind in enumerate(("prompt", "completion"), start=1):
        d = df[df["kind"] == kind]
        x = [f"{t} {_CALL_SHORT.get(c, c)} r{r}" for t, c, r in
             zip(d["topology"], d["call"], d["round"], strict=True)]  # fmt: skip
        hover = [
            f"simulated mean {m:,.0f}, quartiles {a:,.0f} / {b:,.0f} / {c:,.0f}"
            f"<br>published mean {pm:,.0f}, quartiles {pa:g} / {pb:g} / {pc:g}"
            + ("" if np.isnan(cap) else f"<br>at the {CAP_TOKENS:,}-token cap {cap:.1%}")
            for m, a, b, c, pm, pa, pb, pc, cap in zip(
                d["mean"], d["p25"], d["median"], d["p75"], d["published_mean"],
                d["published_p25"], d["published_median"], d["published_p75"], d["at_cap"],
                strict=True,
            )
        ]  # fmt: skip
        bar_colors = [_color(colors, t, order[t]) for t in d["topology"]]
        fig.add_trace(go.Bar(x=x, y=d["mean"], marker_color=bar_colors, name="simulated",
                             hovertext=hover, hoverinfo="text", showlegend=row == 1),
                      row=row, col=1)  # fmt: skip
        fig.add_trace(go.Scatter(x=x, y=d["published_mean"], mode="markers", name="published",
                                 marker={"symbol": "diamond", "size": 10, "color": "#7f7f7f"},
                                 hovertext=hover, hoverinfo="text", showlegend=row == 1),
                      row=row, col=1)  # fmt: skip
        fig.update_yaxes(title_text="tokens", row=row, col=1)
    fig.update_layout(title_text=title, template="plotly_white", bargap=0.3, height=620)
    return fig


def iat_cdf_figure(
    iats: pd.DataFrame,
    by: By = "topology",
    *,
    value: str = "iat",
    dists: Sequence[str] | None = ("lognorm", "expon", "weibull_min", "gamma"),
    max_points: int = 2000,
    zeros: ZerosPolicy = DEFAULT_ZEROS,
    eps: float = DEFAULT_EPS,
    title: str = "IAT empirical CDF and fits",
) -> go.Figure:
    """Empirical CDF per group (log x) with the fitted CDFs of ``dists`` overlaid.

    The ECDF is thinned to at most ``max_points`` evenly spaced order statistics so that
    large pooled samples stay light in a notebook.

    Returns:
        A figure with ``groups * (1 + len(dists))`` traces (the fitted ones not in the
        legend) and one legend key per family.
    """
    import plotly.graph_objects as go

    keys = as_by(by)
    require_columns(iats, [*keys, value], "iats")
    colors = _colors()
    fig = go.Figure()
    for i, (key, sub) in enumerate(iter_groups(iats, keys)):
        x = np.sort(positive_values(sub[value], zeros=zeros, eps=eps))
        if not len(x):
            continue
        color, name = _color(colors, next(iter(key.values()), None), i), _label(key)
        n = len(x)
        idx = np.unique(np.linspace(0, n - 1, min(n, max_points)).round().astype(int))
        fig.add_trace(
            go.Scatter(
                x=x[idx],
                y=(idx + 1) / n,
                mode="lines",
                line={"shape": "hv", "color": color},
                name=f"{name} empirical",
                legendgroup=name,
            )
        )
        grid = np.geomspace(x[0], x[-1], 200)
        for j, (dname, dist) in enumerate(_fit_curves(x, dists or ()).items()):
            fig.add_trace(
                go.Scatter(
                    x=grid,
                    y=dist.cdf(grid),
                    mode="lines",
                    line={"color": color, "dash": _DASHES[j % len(_DASHES)], "width": 1},
                    name=f"{name} {dname}",
                    legendgroup=name,
                    showlegend=False,
                )
            )
    if dists:
        _family_keys(fig, resolve_dists(dists))
    _log_time_axis(fig, "inter-arrival time")
    fig.update_yaxes(title_text="P(IAT <= x)", range=[0, 1.02])
    fig.update_layout(title_text=title, template="plotly_white")
    return fig


def inflight_figure(
    calls: pd.DataFrame,
    by: By = DEFAULT_BY,
    *,
    max_runs: int = 3,
    start: str = "start",
    end: str = "end",
    title: str = "In-flight LLM requests",
) -> go.Figure:
    """In-flight requests over time (seconds since each run's first call), step lines.

    The first ``by`` column (topology) picks the colour; at most ``max_runs`` runs per
    colour are drawn, in sorted order, so the figure stays readable.

    Returns:
        A figure with one trace per drawn run.
    """
    import plotly.graph_objects as go

    keys = as_by(by)
    tl = inflight_timeline_df(calls, keys, start=start, end=end)
    colors = _colors()
    fig = go.Figure()
    shown: dict[Any, int] = {}
    palette: dict[Any, str] = {}
    for key, sub in iter_groups(tl, keys):
        head = next(iter(key.values()), None)
        if shown.get(head, 0) >= max_runs:
            continue
        shown[head] = shown.get(head, 0) + 1
        color = palette.setdefault(head, _color(colors, head, len(palette)))
        fig.add_trace(
            go.Scatter(
                x=sub["t_rel"],
                y=sub["in_flight"],
                mode="lines",
                line={"shape": "hv", "color": color},
                name=_label(key),
                legendgroup=str(head),
            )
        )
    fig.update_xaxes(title_text="time since run start (s)")
    fig.update_yaxes(title_text="requests in flight", rangemode="tozero")
    fig.update_layout(title_text=title, template="plotly_white")
    return fig


def stage_latency_figure(
    calls: pd.DataFrame,
    by: By = "topology",
    *,
    kind: str = "box",
    stage_col: str = "stage",
    start: str = "start",
    end: str = "end",
    log_y: bool = False,
    title: str = "Latency per stage",
) -> go.Figure:
    """Latency (end - start) per workflow stage, one box/violin trace per group.

    Args:
        calls: the ``llm_calls`` DataFrame.
        by: grouping columns (one trace each, grouped side by side per stage).
        kind: ``"box"`` or ``"violin"``.
        stage_col, start, end: column names.
        log_y: log latency axis.
        title: figure title.

    Returns:
        A figure with one trace per group, stages in workflow order.
    """
    import plotly.graph_objects as go

    from agentlab.errors import ConfigError

    if kind not in ("box", "violin"):
        raise ConfigError(f"kind={kind!r} is not valid; choose 'box' or 'violin'")
    keys = as_by(by)
    require_columns(calls, [*keys, stage_col, start, end], "calls")
    present = [str(s) for s in calls[stage_col].dropna().unique()]
    order = [s for s in STAGES if s in present] + sorted(set(present) - set(STAGES))
    colors = _colors()
    fig = go.Figure()
    trace = go.Box if kind == "box" else go.Violin
    for i, (key, sub) in enumerate(iter_groups(calls, keys)):
        fig.add_trace(
            trace(
                x=sub[stage_col].astype(str),
                y=sub[end] - sub[start],
                name=_label(key),
                marker_color=colors[i % len(colors)],
            )
        )
    fig.update_xaxes(title_text="stage", categoryorder="array", categoryarray=order)
    if log_y:  # decade ticks as every log time axis here ("1 s", "10 s"; no minor labels)
        _log_time_axis(fig, "latency", axis="y")
    else:
        fig.update_yaxes(title_text="latency (s)")
    layout: dict[str, Any] = {"title_text": title, "template": "plotly_white"}
    layout["boxmode" if kind == "box" else "violinmode"] = "group"
    fig.update_layout(**layout)
    return fig
