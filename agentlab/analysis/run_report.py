"""Reports on run directories: a summary, a templated HTML page, a table of many runs.

- :func:`summarize_run`: the headline numbers of one run (JSON-serialisable).
- :func:`write_html_report`: that summary plus figures as an HTML page rendered from a
  jinja2 template; figures plot with ``plotly.min.js`` written once next to the page (no
  CDN, one copy shared by every report in the folder).
- :func:`runs_df` / :func:`write_table_report`: one row per run (or sweep point) with
  key figures, as a DataFrame and as an HTML table.

Times are relative to the run's first LLM call, ticks are integers, numbers are
rounded for reading (:func:`fmt_num`).
"""

from __future__ import annotations

import math
import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.analysis.report_figures import (
    fig_html,
    plotly_inline,
    require_plotly,
    run_figures,
    write_plotly_js,
)
from agentlab.core.text_table import format_seconds
from agentlab.errors import ConfigError
from agentlab.store import open_run
from agentlab.store.packed_store import PACKED_FILE, PackedStore
from agentlab.store.run import Run
from agentlab.store.summary import REPLY_KINDS, ErrorCounts, RunSummary
from agentlab.store.summary import find_runs as _find_runs
from agentlab.store.summary import summarize_run as summarize_dir

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "find_runs",
    "fmt_num",
    "print_summary",
    "runs_df",
    "study_traffic",
    "summarize",
    "summarize_run",
    "summary_row",
    "template_env",
    "write_html_report",
    "write_table_report",
]


def fmt_num(value: Any, digits: int = 3) -> str:
    """A readable number: integers with thousands separators, floats to ``digits``
    significant figures, ``–`` for missing; other values as text."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            import numpy as np

            if isinstance(value, np.generic):
                return fmt_num(value.item(), digits)
        except ImportError:  # pragma: no cover - numpy comes with pandas
            pass
        return str(value)
    f = float(value)
    if math.isnan(f) or math.isinf(f):
        return "–"
    if f.is_integer() and abs(f) < 1e15:
        return f"{int(f):,}"
    if abs(f) >= 10**digits:  # "3,931", never "3.93e+03"
        return f"{f:,.0f}"
    return f"{f:.{digits}g}"


def _seconds(value: Any) -> str:
    return format_seconds(value, missing="–")


def _bytes(value: Any) -> str:
    v = float(value or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if v < 1024 or unit == "GB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return str(value)  # pragma: no cover


@cache
def _env() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("agentlab.analysis", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.ChainableUndefined,
    )
    env.filters.update(num=fmt_num, seconds=_seconds, bytes=_bytes, replies=replies_line)
    return env


def template_env() -> Any:
    """The jinja2 environment of the report templates (``num``, ``seconds``, ``bytes``
    filters; autoescaped)."""
    return _env()


# --- one run -------------------------------------------------------------------------


def summarize_run(
    path: str | os.PathLike[str], *, top: int = 10, traffic: bool = True
) -> dict[str, Any]:
    """Headline numbers of a run (JSON-serialisable).

    Args:
        path: the run directory.
        top: how many of the slowest spans to list.
        traffic: compute a study's per-topology table (``summary["traffic"]``); a paper's
            or sweep's row of a child run needs only its latencies.
    """
    run = open_run(path)
    try:
        return _summarize(run, top, traffic=traffic)
    finally:
        run.close()


def summarize(run: Run, top: int = 10) -> dict[str, Any]:
    """:func:`summarize_run` of an open :class:`~agentlab.store.run.Run`."""
    return _summarize(run, top)


def _count(frame: Any, col: str) -> int:
    return int(frame[col].nunique()) if col in frame and len(frame) else 0


def _agents(run: Run, calls: pd.DataFrame) -> int:
    """Agents of a run: those stored, or those that called if more."""
    agents_dir = run.path / "agents"
    n_agents = sum(1 for p in agents_dir.iterdir() if p.is_dir()) if agents_dir.is_dir() else 0
    if (run.path / PACKED_FILE).exists():  # a packed run keeps its agents in one file
        n_agents = len(PackedStore(run.path / PACKED_FILE).agents())
    return max(n_agents, _count(calls, "agent_id"))


def _agents_note(manifest: dict[str, Any]) -> str | None:
    """Who a topology experiment's agents are: N experts per run (``agents=N``) and the
    orchestrator that recruits and scores them; its "agents 5" read as five experts."""
    if manifest.get("kind") != "topology_experiment":
        return None
    experts = ((manifest.get("config") or {}).get("workflow") or {}).get("agents")
    return f"{experts} experts per run and the orchestrator" if experts else None


def _tokens(calls: pd.DataFrame) -> dict[str, int]:
    return {
        k: int(calls[k].fillna(0).sum()) if k in calls and len(calls) else 0
        for k in ("prompt_tokens", "completion_tokens")
    }


def _latency(calls: pd.DataFrame) -> pd.Series:
    """Each answered call's latency in seconds."""
    import pandas as pd

    if "latency" in calls:
        return calls["latency"].dropna()
    if {"start", "end"} <= set(calls.columns):
        return (calls["end"] - calls["start"]).dropna()
    return pd.Series(dtype=float)


def _call_figures(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A run's agents, tokens and latency p50 (as :func:`summarize_run` gives them), from its
    calls alone: the folder table's detail, half the cost of a whole summary (which also
    reads the spans and the timeline)."""
    with open_run(path) as run:
        calls = run.llm_calls_df()
        latency = _latency(calls)
        return {
            "agents": _agents(run, calls),
            "tokens": sum(_tokens(calls).values()),
            "latency_p50_s": float(latency.quantile(0.5)) if len(latency) else None,
        }


def _summarize(run: Run, top: int, *, traffic: bool = True) -> dict[str, Any]:
    import pandas as pd

    calls, spans, timeline = run.llm_calls_df(), run.spans_df(), run.timeline_df()
    life = summarize_dir(run.path)  # status and the one error vocabulary
    # distinct ticks seen (society ticks are numbered from 1); None for a run that has none
    # (a werewolf game: days; its report read "ticks 0" over the game's calls)
    ticks: int | None = 0 if life.kind == "society" else None
    # an experiment has runs, not ticks (its calls' "tick" is a workflow round): the count
    # the run browser shows too, its summary's steps
    runs = life.steps if life.kind == "experiment" else 0
    if len(timeline):
        ticks = int(timeline["tick"].nunique())
    elif not runs and "tick" in calls and len(calls) and calls["tick"].notna().any():
        ticks = int(calls["tick"].nunique())
    tok = _tokens(calls)
    call_errors = int((calls["outcome"].fillna("ok") != "ok").sum()) if "outcome" in calls else 0
    # how the answered calls ended (runs recorded before finish_reason was kept: {})
    ended = calls["finish_reason"].value_counts() if "finish_reason" in calls else {}
    replies = {str(k): int(v) for k, v in ended.items()}
    failed = spans[spans["status"] == "error"] if len(spans) else spans
    # which spans failed: e.g. env.tool errors are tools refusing bad arguments, not crashes
    by_name = failed["name"].value_counts().to_dict() if len(failed) else {}
    slow = []
    if len(spans):
        for _, r in spans.nlargest(top, "duration").iterrows():
            slow.append({"name": r["name"], "duration": float(r["duration"]),
                         "status": r["status"], "where": span_where(r["attributes"])})  # fmt: skip
    latency = _latency(calls)
    # time to first token of the calls that streamed one (a provider's plain call: none)
    ttft = calls["ttft"].dropna() if "ttft" in calls else pd.Series(dtype=float)
    duration = None
    if {"start", "end"} <= set(calls.columns) and len(calls):
        duration = float(calls["end"].max() - calls["start"].min())
    m = run.manifest
    children = [_child_row(run.path, c) for c in life.children]
    if life.ticks is not None:
        ticks = life.ticks
    return {
        "run": str(run.path),
        "name": run.path.name,
        "kind": m.get("kind"),
        "created": m.get("created"),
        "ended": life.ended,
        "status": life.status,
        "error": life.error,
        "go_on": continue_hint(run.path, m, life.status),
        # status as readers show it (a dead writer's "running" reads "interrupted")
        "manifest": {**{k: m.get(k) for k in ("kind", "seed", "model")}, "status": life.status},
        "ticks": ticks,
        "runs": runs,
        "steps": life.steps,
        # a paper (or sweep) holds runs of its own; its errors are theirs, summed
        "children": children,
        # a paper or sweep makes no calls itself: the calls of its runs (None for a run
        # that made its own); a "ticks 0, agents 0, llm calls 0" over 1,063 calls in its
        # runs read as an empty run
        "calls_in_runs": (
            sum(int(c.get("llm_calls") or 0) for c in children)
            if children and not len(calls)
            else None
        ),
        "agents": _agents(run, calls),
        "agents_note": _agents_note(m),
        "llm_calls": len(calls),
        "replies": replies,
        "tokens": {**tok, "total": tok["prompt_tokens"] + tok["completion_tokens"]},
        # step_errors / tool_errors / llm_failures / total: the vocabulary every view
        # shows (agentlab.store.summary); the rest is detail of the same run
        "errors": {
            **life.errors.to_dict(),
            "llm_calls": call_errors,
            "spans": len(failed),
            "spans_by_name": {str(k): int(v) for k, v in by_name.items()},
        },
        "latency_s": {
            "p50": float(latency.quantile(0.5)) if len(latency) else None,
            "p95": float(latency.quantile(0.95)) if len(latency) else None,
        },
        "ttft_s": {
            "p50": float(ttft.quantile(0.5)) if len(ttft) else None,
            "p95": float(ttft.quantile(0.95)) if len(ttft) else None,
        },
        "duration_s": duration,
        "spans": len(spans),
        "slowest_spans": slow,
        "traffic": study_traffic(run, calls) if traffic else None,
        "datasets": {r["name"]: int(r["bytes"]) for _, r in run.datasets.iterrows()},
        "problems": list(run.problems),
    }


#: span attributes that say where a span ran, in the order named: ten "experiment.run"
#: rows of a study's slowest spans said nothing of which runs they were
_WHERE = (("agentlab.run_id", "{}"), ("agentlab.stage", "{}"), ("agentlab.iteration", "round {}"),
          ("gen_ai.agent.id", "agent {}"), ("gen_ai.tool.name", "tool {}"),
          ("agentlab.tick", "tick {}"))  # fmt: skip


def span_where(attributes: Any) -> str:
    """Where a span ran, from its attributes: run, stage and round, agent, tool, tick
    (e.g. ``"star-0012"``, ``"agent a7 · tick 3"``); ``""`` when none is named."""
    if not isinstance(attributes, dict):
        return ""
    named = [(fmt, attributes.get(key)) for key, fmt in _WHERE]
    return " · ".join(fmt.format(v) for fmt, v in named if v is not None and v != "")


def study_traffic(run: Run, calls: pd.DataFrame) -> dict[str, Any] | None:
    """For a topology experiment: the per-topology traffic table (the paper's) over its
    finished runs' ``calls`` (:meth:`~agentlab.store.run.Run.of_finished_runs`: a run a
    stop cut short is not one of its runs), as ``{"columns", "rows"}``; ``None`` for
    other runs."""
    if run.manifest.get("kind") != "topology_experiment":
        return None
    from agentlab.analysis.summary import STUDY_TRAFFIC, traffic_summary_df

    calls = run.of_finished_runs(calls)
    if not len(calls) or "topology" not in calls:
        return None
    table = traffic_summary_df(calls)
    keep = [c for c in ("topology", "runs", *STUDY_TRAFFIC) if c in table]
    return {"columns": keep, "rows": table[keep].to_dict("records")}


def continue_hint(path: Path, manifest: dict[str, Any], status: str) -> str | None:
    """How to continue an unfinished run of a kind that can be (``None``: nothing to say):
    the report's status line and the run browser's run page."""
    if status not in ("stopped", "interrupted", "failed"):
        return None
    if manifest.get("kind") == "topology_experiment":
        return f"Experiment.open({str(path)!r}).run() runs the rest"
    if manifest.get("kind") == "society":
        return f"Society.open({str(path)!r}) resumes it from its last committed tick"
    return None


def _child_row(parent: Path, child: RunSummary) -> dict[str, Any]:
    """A run inside a paper or sweep: its :func:`summary_row`, its path below the parent
    and its latency and TTFT (a paper's page had only "–" tiles for them: a paper makes
    no calls itself, and pooling its runs' calls would mix runs of different kinds)."""
    row: dict[str, Any] = {**summary_row(child), "run": str(child.path.relative_to(parent))}
    try:
        s = summarize_run(child.path, top=0, traffic=False)  # (its latencies only)
    except Exception:  # an unreadable log: the row keeps its counts
        s = {}
    for key in ("latency_s", "ttft_s"):
        row[key] = s.get(key) or {"p50": None, "p95": None}
    return row


def write_html_report(
    run: Run,
    summary: dict[str, Any],
    path: str | os.PathLike[str],
    *,
    self_contained: bool = False,
) -> Path:
    """Render the run report to ``path``; a topology experiment also gets its per-topology
    traffic table (``summary["traffic"]``) and figures.

    Args:
        run: the open run.
        summary: :func:`summarize_run` of it.
        path: the HTML file to write.
        self_contained: put plotly.js inside the page (~4.7 MB; the page works copied
            alone) instead of writing ``plotly.min.js`` once next to it (pages stay small;
            a page copied without it says so where each chart would be).

    Raises:
        MissingExtraError: plotly (the ``viz`` extra) is not installed.
    """
    require_plotly()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    figures = fig_html(run_figures(run))
    inline = plotly_inline() if figures and self_contained else None
    js = write_plotly_js(out.parent) if figures and not self_contained else None
    page = (
        _env()
        .get_template("run_report.html.j2")
        .render(
            s=summary,
            figures=figures,
            plotly_js=js,
            plotly_inline=inline,
        )
    )
    out.write_text(page, encoding="utf-8")
    return out


def study_table_text(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A study's traffic table as text with the line saying what it is computed over: what
    ``agentlab report`` of a study and ``agentlab experiment`` at its end print."""
    import pandas as pd

    from agentlab.core.text_table import format_table

    table = pd.DataFrame(rows, columns=columns).round(4)
    return ("traffic per topology (calls over every stage; IATs and bursts over the "
            "discussion stage; seconds):\n" + format_table(table))  # fmt: skip


def print_summary(summary: dict[str, Any]) -> None:
    """The summary as aligned lines on stdout."""
    m = summary["manifest"]
    lat = summary["latency_s"]
    e = summary["errors"]
    by_name = ", ".join(f"{k} {v}" for k, v in e.get("spans_by_name", {}).items())
    t = summary["tokens"]
    children = summary.get("children", [])
    model = f"  model={m.get('model')}" if m.get("model") else ""
    lines = [
        ("run", summary["run"]),
        ("kind", f"{m.get('kind')}  seed={m.get('seed')}{model}"),
        ("status", (summary.get("status") or m.get("status") or "–")
                   + (f"  ({summary['error']})" if summary.get("error") else "")
                   + (f"; {summary['go_on']}" if summary.get("go_on") else "")),
    ]  # fmt: skip
    if summary.get("calls_in_runs") is not None:  # a paper or sweep
        calls = summary["calls_in_runs"]
        lines.append(("llm calls", f"{fmt_num(calls)} in {len(children)} runs (below)"))
    else:
        lines += [
            ("runs", fmt_num(summary["runs"])) if summary.get("runs")
            else ("ticks", fmt_num(summary["ticks"])),
            ("agents", fmt_num(summary["agents"])
                       + (f" ({summary['agents_note']})" if summary.get("agents_note") else "")),
            ("llm calls", f"{fmt_num(summary['llm_calls'])}  tokens {fmt_num(t['total'])} "
                          f"({fmt_num(t['prompt_tokens'])} prompt)"),
        ]  # fmt: skip
    lines.append(("errors", _errors_line(e)))
    if summary.get("replies"):  # (under the calls it splits)
        lines.insert(len(lines) - 1, ("replies", replies_line(summary["replies"])))
    if by_name:
        lines.append(("error spans", by_name))
    if lat["p50"] is not None:
        lines.append(("latency", f"p50 {_seconds(lat['p50'])}  p95 {_seconds(lat['p95'])}"))
    first = summary.get("ttft_s") or {}
    if first.get("p50") is not None:
        lines.append(("TTFT", f"p50 {_seconds(first['p50'])}  p95 {_seconds(first['p95'])}"))
    for k, v in lines:
        print(f"{k:<10} {v}")
    for c in children:
        p50 = (c.get("latency_s") or {}).get("p50")
        latency = f"  latency p50 {_seconds(p50)}" if p50 is not None else ""
        print(f"  run      {c['run']}  {c['kind']}  {c['status']}  {fmt_num(c['steps'])} steps  "
              f"{fmt_num(c['llm_calls'])} llm calls  {fmt_num(c['errors'])} errors{latency}")  # fmt: skip
    traffic = summary.get("traffic")
    if traffic:
        print(study_table_text(traffic["rows"], traffic["columns"]))
    if summary["slowest_spans"]:
        print("slowest spans:")
        for s in summary["slowest_spans"]:
            where = f"  {s['where']}" if s.get("where") else ""
            print(f"  {_seconds(s['duration']):>10}  {s['name']}  [{s['status']}]{where}")
    for p in summary["problems"]:
        print(f"problem    {p}")


def replies_line(replies: dict[str, int]) -> str:
    """``767 text, 734 tool calls`` from a summary's ``replies`` (finish_reason counts),
    the most first."""
    most = sorted(replies.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{fmt_num(n)} {REPLY_KINDS.get(k, k)}" for k, n in most)


def _errors_line(e: dict[str, Any]) -> str:
    """``0 step errors, 34 tool errors, 2 LLM failures (timeout 2)`` from a summary's
    ``errors`` (the vocabulary of :class:`~agentlab.store.summary.ErrorCounts`)."""
    return ErrorCounts(
        int(e.get("step_errors", 0)), int(e.get("tool_errors", 0)), dict(e.get("llm_failures", {}))
    ).describe()


# --- many runs -----------------------------------------------------------------------


def find_runs(folder: str | os.PathLike[str], *, depth: int = 3) -> list[Path]:
    """Run directories (with a ``run.json``) under ``folder``, not descending into them."""
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"{str(root)!r} is not a directory")
    return _find_runs(root, depth=depth)


#: the columns of :func:`runs_df` that come from :func:`agentlab.store.summarize_run`
SUMMARY_COLUMNS = ("kind", "status", "ticks", "steps", "llm_calls", "step_errors",
                   "tool_errors", "llm_failures", "errors")  # fmt: skip


def summary_row(s: RunSummary) -> dict[str, Any]:
    """The :data:`SUMMARY_COLUMNS` of one run (``errors`` is the total;
    ``llm_failures`` the count over every kind)."""
    return {
        "kind": s.kind,
        "status": s.status,
        "ticks": s.ticks,
        "steps": s.steps,
        "llm_calls": s.llm_calls,
        "step_errors": s.errors.step_errors,
        "tool_errors": s.errors.tool_errors,
        "llm_failures": sum(s.errors.llm_failures.values()),
        "errors": s.errors.total,
    }


def runs_df(
    folder: str | os.PathLike[str], *, detail: bool = True, progress: bool = False
) -> pd.DataFrame:
    """One row per run under ``folder``: kind, status, ticks, steps, LLM calls, the error
    counts (step / tool / LLM failures / total, as :func:`agentlab.store.summarize_run`
    gives them) and size on disk; with ``detail`` also agents, tokens and latency p50
    (those read each run's calls with DuckDB: ~20 ms a small run)."""
    import pandas as pd

    from agentlab.core.progress_bar import progress_bar

    rows = []
    found = find_runs(folder)
    bar = progress_bar(len(found), "runs", "run", enabled=progress and detail)
    for d in found:
        bar.update(1)
        row: dict[str, Any] = {"run": str(d.relative_to(folder)) if d != Path(folder) else d.name}
        try:
            life = summarize_dir(d)
        except Exception as e:  # one unreadable run must not hide the others
            row["status"] = f"unreadable: {type(e).__name__}"
            rows.append(row)
            continue
        row.update(summary_row(life))
        if detail and life.kind not in ("sweep", "paper"):
            try:
                row.update(_call_figures(d))
            except Exception as e:
                row["problem"] = f"unreadable log: {type(e).__name__}"
        row["size_bytes"] = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
        rows.append(row)
    bar.close()
    return pd.DataFrame(rows)


def write_table_report(
    df: pd.DataFrame,
    path: str | os.PathLike[str],
    *,
    title: str,
    subtitle: str = "",
    figures: list[tuple[str, Any]] | None = None,
) -> Path:
    """An HTML page with ``df`` as a readable table and optional figures."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    figs = fig_html(figures or [])
    numeric = {c for c in df.columns if str(df[c].dtype) not in ("object", "str", "string")}
    page = (
        _env()
        .get_template("table_report.html.j2")
        .render(
            title=title,
            subtitle=subtitle,
            columns=[str(c) for c in df.columns],
            numeric=numeric,
            rows=df.to_dict("records"),
            figures=figs,
            plotly_js=write_plotly_js(out.parent) if figs else None,
        )
    )
    out.write_text(page, encoding="utf-8")
    return out
