"""Does a fitted profile give back the run it was fitted on? A workflow re-run on the
profile (:func:`~agentlab.analysis.calibrate.fit_calibration`), set beside the recorded
calls: medians per kind of reply (:func:`rerun_comparison_df`) and the latency and TTFT
distributions (:func:`rerun_figure`).

Compared per ``finish_reason`` by default: how many tool calls and text replies agents
make is their own dynamics, not the server's, and the two kinds differ in length by an
order of magnitude, so pooled medians move with the mix (a persona society's pooled reply
median went 32 -> 47 tokens between two runs of one profile while each kind's stayed
within 6 %).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["RERUN_METRICS", "rerun_comparison_df", "rerun_figure"]

#: the columns compared (those a call lacks are left out)
RERUN_METRICS = ("prompt_tokens", "cached_tokens", "completion_tokens", "latency", "ttft")


def _ok(calls: pd.DataFrame) -> pd.DataFrame:
    if "outcome" in calls.columns:
        calls = calls[calls["outcome"].fillna("ok") == "ok"]
    return calls


def rerun_comparison_df(
    recorded: pd.DataFrame,
    rerun: pd.DataFrame,
    by: str | None = "finish_reason",
    metrics: Sequence[str] = RERUN_METRICS,
) -> pd.DataFrame:
    """Medians of each metric, recorded against re-run, per ``by`` group (``None``: all
    calls together; a column either frame lacks: all calls together too).

    Returns:
        One row per group and metric: ``group``, ``metric``, ``calls_recorded``,
        ``calls_rerun``, ``recorded``, ``rerun``, ``diff`` (re-run / recorded - 1).
    """
    a, b = _ok(recorded), _ok(rerun)
    if by is not None and not (by in a.columns and by in b.columns):
        by = None
    groups = sorted(set(a[by].dropna()) | set(b[by].dropna())) if by else ["all calls"]
    rows = []
    for g in groups:
        ga, gb = (a[a[by] == g], b[b[by] == g]) if by else (a, b)
        for m in metrics:
            if m not in a.columns or m not in b.columns:
                continue
            ra, rb = ga[m].dropna(), gb[m].dropna()
            want = float(ra.median()) if len(ra) else np.nan
            got = float(rb.median()) if len(rb) else np.nan
            rows.append({"group": g, "metric": m, "calls_recorded": len(ga),
                         "calls_rerun": len(gb), "recorded": want, "rerun": got,
                         "diff": got / want - 1.0 if want else np.nan})  # fmt: skip
    return pd.DataFrame(rows)


def rerun_figure(
    recorded: pd.DataFrame,
    rerun: pd.DataFrame,
    *,
    title: str = "Recorded calls and a re-run on the fitted profile",
) -> Any:
    """Empirical CDFs of latency and TTFT (log time), recorded (solid) against re-run
    (dashed): where the fitted server is slower or faster, and in which tail."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from agentlab.analysis.figures import _log_time_axis

    metrics = [m for m in ("latency", "ttft") if m in recorded.columns and m in rerun.columns]
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=metrics)
    for col, m in enumerate(metrics, start=1):
        for name, frame, dash in (("recorded", recorded, "solid"), ("re-run", rerun, "dash")):
            x = np.sort(_ok(frame)[m].dropna().to_numpy(dtype=float))
            x = x[x > 0]
            if not len(x):
                continue
            fig.add_trace(go.Scatter(x=x, y=np.arange(1, len(x) + 1) / len(x), mode="lines",
                                     line={"shape": "hv", "dash": dash,
                                           "color": "#1f77b4" if name == "recorded" else "#d62728"},
                                     name=name, legendgroup=name, showlegend=col == 1),
                          row=1, col=col)  # fmt: skip
    _log_time_axis(fig, "seconds")
    fig.update_yaxes(title_text="share of calls", range=[0, 1.02], row=1, col=1)
    fig.update_layout(title_text=title, template="plotly_white", height=380)
    return fig
