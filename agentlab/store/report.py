"""``agentlab report RUN [--html PATH]``: a summary of one run directory.

``summarize_run`` returns plain numbers (ticks, agents, LLM calls, tokens, errors, slowest
spans); ``main`` prints them and, with ``--html``, writes a self-contained HTML page with
plotly figures (plotly.js inlined, so it opens offline).
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from agentlab.store.run import Run, open_run

__all__ = ["main", "summarize_run", "write_html_report"]


def _count(frame: Any, col: str) -> int:
    return int(frame[col].nunique()) if col in frame and len(frame) else 0


def summarize_run(path: str | os.PathLike[str], *, top: int = 10) -> dict[str, Any]:
    """Headline numbers of a run (JSON-serialisable).

    Args:
        path: the run directory.
        top: how many of the slowest spans to list.
    """
    run = open_run(path)
    try:
        return _summarize(run, top)
    finally:
        run.close()


def _summarize(run: Run, top: int) -> dict[str, Any]:
    import pandas as pd

    calls, spans, timeline = run.llm_calls_df(), run.spans_df(), run.timeline_df()
    agents_dir = run.path / "agents"
    n_agents = sum(1 for p in agents_dir.iterdir() if p.is_dir()) if agents_dir.is_dir() else 0
    ticks = 0  # distinct ticks seen (society ticks are numbered from 1)
    if len(timeline):
        ticks = int(timeline["tick"].nunique())
    elif "tick" in calls and len(calls) and calls["tick"].notna().any():
        ticks = int(calls["tick"].nunique())
    tok = {
        k: int(calls[k].fillna(0).sum()) if k in calls and len(calls) else 0
        for k in ("prompt_tokens", "completion_tokens")
    }
    call_errors = int((calls["outcome"].fillna("ok") != "ok").sum()) if "outcome" in calls else 0
    failed = spans[spans["status"] == "error"] if len(spans) else spans
    span_errors = len(failed)
    # which spans failed: e.g. env.tool errors are tools refusing bad arguments, not crashes
    span_errors_by_name = failed["name"].value_counts().to_dict() if len(failed) else {}
    slow = []
    if len(spans):
        for _, r in spans.nlargest(top, "duration").iterrows():
            slow.append(
                {"name": r["name"], "duration": float(r["duration"]), "status": r["status"]}
            )
    latency = calls["latency"].dropna() if "latency" in calls else pd.Series(dtype=float)
    datasets = run.datasets
    return {
        "run": str(run.path),
        "manifest": {k: run.manifest.get(k) for k in ("kind", "seed", "model", "status")},
        "ticks": ticks,
        "agents": max(n_agents, _count(calls, "agent_id")),
        "llm_calls": len(calls),
        "tokens": {**tok, "total": tok["prompt_tokens"] + tok["completion_tokens"]},
        "errors": {
            "llm_calls": call_errors,
            "spans": span_errors,
            "spans_by_name": {str(k): int(v) for k, v in span_errors_by_name.items()},
        },
        "latency_s": {
            "p50": float(latency.quantile(0.5)) if len(latency) else None,
            "p95": float(latency.quantile(0.95)) if len(latency) else None,
        },
        "spans": len(spans),
        "slowest_spans": slow,
        "datasets": {r["name"]: int(r["bytes"]) for _, r in datasets.iterrows()},
        "problems": list(run.problems),
    }


def _figures(run: Run) -> list[Any]:
    import plotly.express as px

    figs = []
    calls, spans, timeline = run.llm_calls_df(), run.spans_df(), run.timeline_df()
    if len(timeline) and "llm_calls" in timeline:
        figs.append(px.line(timeline, x="tick", y="llm_calls", title="LLM calls per tick"))
    if "latency" in calls and calls["latency"].notna().any():
        figs.append(px.histogram(calls, x="latency", nbins=50, title="LLM call latency (s)"))
    if len(calls) and "start" in calls:
        figs.append(px.histogram(calls, x="start", nbins=60, title="LLM calls over time"))
    if len(spans):
        figs.append(px.box(spans, x="name", y="duration", title="Span duration by name (s)"))
    return figs


def write_html_report(run: Run, summary: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """A self-contained HTML page: the summary table plus plotly figures (inline plotly.js)."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>agentlab report: {html.escape(str(run.path))}</title></head><body>",
        f"<h1>Run {html.escape(str(run.path))}</h1><table border='1' cellpadding='4'>",
    ]
    for k in ("ticks", "agents", "llm_calls", "tokens", "errors", "latency_s", "spans"):
        parts.append(f"<tr><th>{k}</th><td>{html.escape(str(summary[k]))}</td></tr>")
    parts.append("</table><h2>Slowest spans</h2><ol>")
    for s in summary["slowest_spans"]:
        parts.append(
            f"<li>{html.escape(str(s['name']))}: {s['duration']:.4f} s ({s['status']})</li>"
        )
    parts.append("</ol>")
    for i, fig in enumerate(_figures(run)):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=i == 0))
    parts.append("</body></html>")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts), encoding="utf-8")
    return out


def _print(summary: dict[str, Any]) -> None:
    print(f"run        {summary['run']}")
    m = summary["manifest"]
    print(f"kind       {m.get('kind')}  seed={m.get('seed')}  model={m.get('model')}")
    print(f"ticks      {summary['ticks']}")
    print(f"agents     {summary['agents']}")
    t = summary["tokens"]
    print(f"llm calls  {summary['llm_calls']}  tokens {t['total']} ({t['prompt_tokens']} prompt)")
    e = summary["errors"]
    by_name = ", ".join(f"{k} {v}" for k, v in e.get("spans_by_name", {}).items())
    print(
        f"errors     {e['llm_calls']} llm calls, {e['spans']} spans"
        + (f" ({by_name})" if by_name else "")
    )
    lat = summary["latency_s"]
    if lat["p50"] is not None:
        print(f"latency    p50 {lat['p50']:.3f} s  p95 {lat['p95']:.3f} s")
    if summary["slowest_spans"]:
        print("slowest spans:")
        for s in summary["slowest_spans"]:
            print(f"  {s['duration']:10.4f} s  {s['name']}  [{s['status']}]")
    for p in summary["problems"]:
        print(f"problem    {p}")


def main(args: Any) -> int:
    """CLI entry: ``args.run`` (directory) and ``args.html`` (optional output path)."""
    run = open_run(args.run)
    try:
        summary = _summarize(run, 10)
        _print(summary)
        if getattr(args, "html", None):
            out = write_html_report(run, summary, args.html)
            print(f"html       {out}")
    finally:
        run.close()
    return 0
