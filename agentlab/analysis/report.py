"""Paper helpers: conclusions written from the result tables, and the sweep summary figure.

Notebooks that read as papers must not carry hand-typed numbers: every number quoted in a
sentence is formatted here from the DataFrames the notebook just computed, so re-running
the notebook with other parameters rewrites its conclusions too.

```python
summary = traffic_summary_df(calls)
fits = fits_df(iat_df(calls))
best_fits_df(fits)                   # one row per topology: best family, runner-up, ΔAIC, KS
conclusions_markdown(topology_conclusions(summary, fits))
sweep_summary_figure(Sweep(out).df(), x="agents", y="burst_fraction", color="topology")
```
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from agentlab.analysis._frame import iter_groups, require_columns
from agentlab.analysis.iat import DEFAULT_THRESHOLD
from agentlab.core.axes import integer_ticks
from agentlab.core.text_table import format_seconds
from agentlab.errors import ConfigError

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = [
    "best_fits_df",
    "conclusions_markdown",
    "format_seconds",
    "readable",
    "readable_number",
    "replicates_figure",
    "sweep_summary_figure",
    "topology_conclusions",
]


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def readable_number(x: Any, digits: int = 4) -> str:
    """A table cell as a reader takes it in: a number to ``digits`` significant digits
    (``0.00045`` stays ``0.00045``, where ``round(3)`` shows ``0.000``), thousands grouped
    from 1,000 up (``51,931``, never ``5.193e+04``), NaN empty; anything else as ``str``."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "" if x is None else str(x)
    if not math.isfinite(x):
        return "" if x != x else str(x)
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def readable(df: pd.DataFrame, digits: int = 4) -> Any:
    """``df`` for display, every number by :func:`readable_number` (a pandas ``Styler``:
    HTML in JupyterLab, in a saved notebook and in its export; the data stay ``df``'s). A
    default row index (0, 1, 2, ...) is not shown: it says nothing."""
    styler = df.style.format(lambda x: readable_number(x, digits))
    if isinstance(df.index, pd.RangeIndex) and df.index.start == 0 and df.index.step == 1:
        styler = styler.hide(axis="index")
    return styler


def _pct(x: Any) -> str:
    return f"{float(x):.0%}" if _finite(x) else "n/a"


def best_fits_df(fits: pd.DataFrame, by: str = "topology", *, alpha: float = 0.05) -> pd.DataFrame:
    """One row per group of a :func:`~agentlab.analysis.fits.fits_df` table: the best family.

    Args:
        fits: the fit table (columns ``dist``, ``n``, ``aic``, ``ks_pvalue`` and ``by``).
        by: the grouping column (``None``-free; one row per value).
        alpha: significance level for ``ks_rejects``.

    Returns:
        ``by``, ``best``, ``n``, ``runner_up`` (missing with a single family), ``delta_aic``
        (runner-up AIC minus best AIC), ``ks_pvalue`` of the best family and ``ks_rejects``.
    """
    require_columns(fits, [by, "dist", "n", "aic", "ks_pvalue"], "fits")
    rows = []
    for key, sub in iter_groups(fits, [by]):
        ranked = sub.sort_values(["aic", "dist"], kind="mergesort")
        best = ranked.iloc[0]
        second = ranked.iloc[1] if len(ranked) > 1 else None
        rows.append({
            **key,
            "best": best["dist"],
            "n": int(best["n"]),
            "runner_up": None if second is None else second["dist"],
            "delta_aic": math.nan if second is None else float(second["aic"] - best["aic"]),
            "ks_pvalue": float(best["ks_pvalue"]),
            "ks_rejects": bool(float(best["ks_pvalue"]) < alpha),
        })  # fmt: skip
    cols = [by, "best", "n", "runner_up", "delta_aic", "ks_pvalue", "ks_rejects"]
    return pd.DataFrame(rows, columns=cols)


def _ranked(summary: pd.DataFrame, col: str, by: str) -> pd.DataFrame:
    """Rows with a finite ``col``, largest first; ties broken by group name (stable text)."""
    ok = summary[[_finite(v) for v in summary[col]]]
    return ok.assign(_name=ok[by].astype(str)).sort_values(
        [col, "_name"], ascending=[False, True], kind="mergesort"
    )


def _extremes_sentence(
    summary: pd.DataFrame, col: str, by: str, fmt: Any, most: str, single: str
) -> str | None:
    r = _ranked(summary, col, by)
    if r.empty:
        return None
    hi, lo = r.iloc[0], r.iloc[-1]
    if len(r) == 1:
        return single.format(g=hi[by], v=fmt(hi[col]))
    if hi[col] == lo[col]:
        return f"All groups have the same {col.replace('_', ' ')} ({fmt(hi[col])})."
    ratio = f", a ratio of {float(hi[col]) / float(lo[col]):.1f}" if float(lo[col]) > 0 else ""
    return most.format(g=hi[by], v=fmt(hi[col]), lo=lo[by], lv=fmt(lo[col]), ratio=ratio)


def topology_conclusions(
    summary: pd.DataFrame,
    fits: pd.DataFrame | None = None,
    *,
    by: str = "topology",
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = 0.05,
    stage: str = "discussion",
) -> list[str]:
    """Sentences stating what the tables show, every number formatted from them.

    Args:
        summary: :func:`~agentlab.analysis.summary.traffic_summary_df` output.
        fits: optional :func:`~agentlab.analysis.fits.fits_df` output (adds one sentence
            per group about the best-fitting family and its KS test).
        by: the grouping column of both tables.
        threshold: the burst threshold ``summary`` was computed with (seconds).
        alpha: significance level quoted for the KS test.
        stage: the stage the IATs were computed over (wording only).

    Returns:
        Plain-text sentences (use :func:`conclusions_markdown` to display them).
    """
    require_columns(summary, [by, "runs", "calls_per_run", "burst_fraction", "iat_median"],
                    "summary")  # fmt: skip
    out: list[str] = []
    runs = summary["runs"].astype(int)
    n_runs = f"{runs.min()}" if runs.min() == runs.max() else f"{runs.min()}–{runs.max()}"
    groups = ", ".join(str(g) for g in summary[by])
    one_run = runs.max() == 1  # (it read "1 runs per topology were analysed")
    out.append(f"{n_runs} run{'' if one_run else 's'} per {by} "
               f"{'was' if one_run else 'were'} analysed ({groups}).")  # fmt: skip
    one = lambda v: f"{float(v):.1f}"  # noqa: E731 - tiny formatter
    out.append(_extremes_sentence(
        summary, "calls_per_run", by, one,
        "{g} makes the most LLM calls per run ({v}), {lo} the fewest ({lv}){ratio}.",
        "{g} makes {v} LLM calls per run.",
    ) or "")  # fmt: skip
    out.append(_extremes_sentence(
        summary, "burst_fraction", by, _pct,
        f"{stage.capitalize()}-stage arrivals are burstiest under {{g}}: {{v}} of inter-arrival "
        f"times are shorter than {format_seconds(threshold)}, against {{lv}} under {{lo}}.",
        f"{{v}} of {stage}-stage inter-arrival times are shorter than "
        f"{format_seconds(threshold)} under {{g}}.",
    ) or "")  # fmt: skip
    med = _ranked(summary, "iat_median", by).iloc[::-1]
    if len(med):
        order = ", ".join(f"{r[by]} ({format_seconds(r['iat_median'])})" for _, r in med.iterrows())
        out.append(f"Median {stage} inter-arrival time, shortest first: {order}.")
    if {"mean_in_flight", "peak_in_flight"} <= set(summary.columns):
        r = _ranked(summary, "mean_in_flight", by)
        if len(r):
            top = r.iloc[0]
            out.append(
                f"Concurrency is highest under {top[by]}: {float(top['mean_in_flight']):.2f} "
                f"calls in flight on average, peaking at {float(top['peak_in_flight']):.1f} "
                "per run."
            )
    if "tokens_per_run" in summary.columns:
        out.append(_extremes_sentence(
            summary, "tokens_per_run", by, lambda v: f"{float(v):,.0f}",
            "{g} spends the most tokens per run ({v}), {lo} the fewest ({lv}){ratio}.",
            "{g} spends {v} tokens per run.",
        ) or "")  # fmt: skip
    if fits is not None and len(fits):
        for _, b in best_fits_df(fits, by, alpha=alpha).iterrows():
            verdict = "rejects" if b["ks_rejects"] else "does not reject"
            nxt = (
                f"; next {b['runner_up']}, ΔAIC = {b['delta_aic']:.1f}"
                if pd.notna(b["runner_up"])
                else ""
            )
            out.append(
                f"{b[by]}: {b['best']} fits the {stage} IATs best by AIC (n = {b['n']}{nxt}); "
                f"the exact KS test {verdict} it at α = {alpha:g} (p = {b['ks_pvalue']:.2g})."
            )
    return [s for s in out if s]


def conclusions_markdown(sentences: list[str]) -> str:
    """Sentences as a Markdown bullet list (``IPython.display.Markdown(...)`` renders it)."""
    return "\n".join(f"- {s}" for s in sentences)


def sweep_summary_figure(
    df: pd.DataFrame,
    x: str,
    y: str,
    color: str | None = None,
    *,
    status: str = "status",
    title: str | None = None,
) -> go.Figure:
    """One line per ``color`` value of ``y`` against ``x`` over the finished sweep points.

    Points whose ``status`` is not ``"ok"`` are left out; several points at one
    ``(color, x)`` (e.g. different seeds) are averaged.

    Args:
        df: ``Sweep.df()`` (or any table with the columns).
        x, y: column names (numeric ``x`` gives a numeric axis).
        color: optional grouping column, one trace per value.
        status: the status column (ignored when absent).
        title: figure title (default ``"<y> by <x>"``).

    Returns:
        A ``plotly.graph_objects.Figure``.
    """
    import plotly.graph_objects as go

    require_columns(df, [x, *([color] if color else [])], "sweep table")
    if y not in df.columns:
        raise ConfigError(
            f"sweep table has no column {y!r} (did every point fail before recording it?); "
            f"columns: {sorted(map(str, df.columns))}"
        )
    ok = df[df[status] == "ok"] if status in df.columns else df
    keys = [color] if color else []
    fig = go.Figure()
    for key, sub in iter_groups(ok, keys):
        agg = sub.groupby(x, sort=True)[y].mean(numeric_only=False).reset_index()
        fig.add_trace(
            go.Scatter(
                x=agg[x].tolist(),
                y=agg[y].tolist(),
                mode="lines+markers",
                name=str(key[color]) if color else y,
            )
        )
    fig.update_layout(
        title_text=title or f"{y} by {x}",
        xaxis_title=x,
        yaxis_title=y,
        legend_title_text=color or "",
        template="plotly_white",
    )
    ticks = integer_ticks(ok[x]) if ok[x].dtype != object else None
    if ticks is not None:  # an integer parameter: no ticks at 1.2, 1.4, ...
        fig.update_xaxes(tickmode="array", tickvals=ticks)
    return fig


def replicates_figure(
    agg: pd.DataFrame,
    x: str,
    metric: str,
    color: str | None = None,
    *,
    ci: float = 0.95,
    title: str | None = None,
) -> go.Figure:
    """Means with confidence-interval error bars over replicates, on a categorical ``x``.

    Args:
        agg: the output of ``Sweep.aggregate`` / ``agentlab.sweep.summary.aggregate_df``
            (columns ``<metric>_mean``, ``<metric>_ci_low``, ``<metric>_ci_high``, ``n``).
        x: the parameter on the x axis (shown as categories: agent counts are levels, not
            a continuum).
        metric: the aggregated metric.
        color: optional parameter with one trace per value.
        ci: the confidence level the intervals were computed with (for the axis title).
        title: figure title (default ``"<metric> by <x>"``).

    Returns:
        A ``plotly.graph_objects.Figure``.
    """
    import plotly.graph_objects as go

    cols = [f"{metric}_mean", f"{metric}_ci_low", f"{metric}_ci_high", "n", x]
    require_columns(agg, cols + ([color] if color else []), "aggregate table")
    fig = go.Figure()
    groups = agg.groupby(color, sort=True) if color else [(None, agg)]
    for key, g in groups:
        g = g.sort_values(x)
        mean = g[f"{metric}_mean"]
        fig.add_trace(
            go.Scatter(
                x=g[x].astype(str),
                y=mean,
                mode="markers+lines",
                name=str(key[0] if isinstance(key, tuple) else key) if color else metric,
                error_y={
                    "type": "data",
                    "array": (g[f"{metric}_ci_high"] - mean).tolist(),
                    "arrayminus": (mean - g[f"{metric}_ci_low"]).tolist(),
                    "visible": True,
                },
                customdata=g["n"],
                hovertemplate=f"{x}=%{{x}}<br>{metric}=%{{y:.4g}}<br>n=%{{customdata}}",
            )
        )
    n = sorted({int(v) for v in agg["n"]})
    # what the bars are goes under the title: as the y-axis title it ran longer than a
    # 450-px plot is high (cut off, and over the title's first letters)
    bars = f"mean and {ci:.0%} CI over n = {'/'.join(map(str, n))} replicates"
    fig.update_layout(
        title={"text": f"{title or f'{metric} by {x}'}<br><sup>{bars}</sup>"},
        xaxis={"title": x, "type": "category"},
        yaxis_title=metric,
        legend_title_text=color or "",
        template="plotly_white",
    )
    return fig
