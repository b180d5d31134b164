"""The pages of a topology experiment: its topologies, one topology's runs, one run's call
graph with its prompts and replies (``topology-<t>-<n>.html``, ``xrun-<run id>.html``).
"""

from __future__ import annotations

from typing import Any

from agentlab.view import charts, data
from agentlab.view.files import Entry
from agentlab.view.page_parts import (
    CALL_NUMERIC,
    TOPO_RUNS_PER_PAGE,
    XRUN_MAX_CALLS,
    _agent_links,
    _calls_columns,
    _calls_rows,
    _crumbs,
    _io_note,
    _message_rows,
    _na,
    _pager,
    _render,
    counted,
    tick_headings,
)
from agentlab.view.site_state import SiteState as Site
from agentlab.view.site_state import href, quote

# --- experiments: topology -> run -> call graph ---------------------------------------------


def _exp_runs(run: Any) -> Any:
    import pandas as pd

    have = set(run.dataset_names())
    if "experiment_runs" not in have:
        return pd.DataFrame(columns=["run_id", "topology", "task_id", "status", "score"])
    runs = run.df("experiment_runs")
    if "llm_calls" in have:
        per = run.sql("select run_id, count(*) calls, sum(total_tokens) tokens, "
                      "count(*) filter (where outcome <> 'ok') failures from llm_calls group by 1")  # fmt: skip
        runs = runs.merge(per, on="run_id", how="left")
    return runs.sort_values("run_id")


def _traffic(run: Any, calls: Any) -> dict[str, dict[str, Any]]:
    """Per topology, the study's traffic as ``agentlab report`` shows it
    (``run_report.study_traffic``: its finished runs, the ``STUDY_TRAFFIC`` columns),
    readable; ``{}`` without calls to read."""
    from agentlab.analysis.report import format_seconds
    from agentlab.analysis.run_report import study_traffic
    from agentlab.analysis.summary import STUDY_TRAFFIC, STUDY_TRAFFIC_SECONDS

    traffic = study_traffic(run, calls) if calls is not None and len(calls) else None
    out: dict[str, dict[str, Any]] = {}
    for r in traffic["rows"] if traffic else []:
        out[str(r["topology"])] = {
            _heading(col): format_seconds(r.get(col))
            if col in STUDY_TRAFFIC_SECONDS
            else _round(r.get(col))
            for col in STUDY_TRAFFIC
        }
    return out


def _heading(col: str) -> str:
    """``"ttft_p50"`` → ``"TTFT p50"``, ``"calls_per_run"`` → ``"calls per run"``."""
    return " ".join(w.upper() if w in ("iat", "ttft") else w for w in col.split("_"))


def _round(x: Any) -> Any:
    """A mean to read: whole above 100 (tokens per run), else three decimals."""
    v = _na(x)
    if v is None or v != v:
        return None
    return round(float(v)) if abs(float(v)) >= 100 else round(float(v), 3)


def _topologies_block(
    site: Site, e: Entry, run: Any, path: str, calls: Any = None
) -> dict[str, Any]:
    """The topologies of an experiment: runs, runs ok, calls and mean score, and the
    study's traffic per topology (the table ``agentlab report`` prints: burst fraction,
    IAT median, latency and TTFT p50, mean in flight; the page showed none of it)."""
    runs = _exp_runs(run)
    traffic = _traffic(run, calls)
    heads = list(next(iter(traffic.values()))) if traffic else []
    base = site.base(path)
    rows = []
    for topo, g in runs.groupby("topology", sort=True):
        ok = int((g["status"] == "ok").sum()) if "status" in g else 0
        score = g["score"].mean() if "score" in g else None
        t = traffic.get(str(topo)) or dict.fromkeys(heads)  # (a topology without calls)
        rows.append({"cells": [
            {"text": topo, "href": href(base, e.rel, f"topology-{topo}-1.html")},
            len(g), ok, _na(g["calls"].sum()) if "calls" in g else None,
            None if score is None or score != score else round(float(score), 2),
            *t.values(),
        ]})  # fmt: skip
    return {"type": "table", "id": "topologies", "heading": "Topologies",
            "columns": ["topology", "runs", "ok", "LLM calls", "mean score", *heads],
            "numeric": {"runs", "ok", "LLM calls", "mean score", *heads}, "rows": rows,
            "sortable": True,
            "note": "traffic as agentlab report computes it: IATs and bursts over the "
                    "discussion stage, latency and TTFT over every call" if traffic else None}  # fmt: skip


def _topology_page(site: Site, e: Entry, run: Any, path: str, topo: str, page: int) -> str | None:
    runs = _exp_runs(run)
    runs = runs[runs["topology"] == topo]
    if not len(runs):
        return None
    part, pages = data._page(runs, page, TOPO_RUNS_PER_PAGE)
    if page > pages:
        return None
    base = site.base(path)
    cols = ["run", "task", "status", "score", "iterations", "LLM calls", "tokens", "failures"]
    rows = []
    for r in part.to_dict("records"):
        rows.append({"cells": [
            {"text": r["run_id"], "href": href(base, e.rel, f"xrun-{r['run_id']}.html")},
            _na(r.get("task_id")), {"text": _na(r.get("status")) or "?",
                                    "cls": "ok" if r.get("status") == "ok" else "bad"},
            _na(r.get("score")), _na(r.get("iterations")), _na(r.get("calls")),
            _na(r.get("tokens")), _na(r.get("failures")),
        ]})  # fmt: skip
    blocks = [{"type": "table", "id": "xruns", "columns": cols, "rows": rows,
               "numeric": {"score", "iterations", "LLM calls", "tokens", "failures"},
               "note": counted(len(runs), "run"), "sortable": True,
               "pager": _pager(site, e, f"topology-{topo}", page, pages, path) if pages > 1 else None}]  # fmt: skip
    return _render(site, path, e.rel, title=f"{topo}: runs",
                   crumbs=_crumbs(site, path, e, (topo, None)), blocks=blocks)  # fmt: skip


def _xrun_page(site: Site, e: Entry, run: Any, path: str, sub: str) -> str | None:
    runs = _exp_runs(run)
    hit = runs[runs["run_id"] == sub]
    have = set(run.dataset_names())
    if not len(hit) and "llm_calls" in have:
        if not len(run.sql("select 1 from llm_calls where run_id = ? limit 1", [sub])):
            return None
    elif not len(hit):
        return None
    info = hit.iloc[0].to_dict() if len(hit) else {}
    topo = _na(info.get("topology")) or "?"
    calls = run.sql("select * from llm_calls where run_id = ? order by start, request_id "
                    f"limit {XRUN_MAX_CALLS}", [sub]) if "llm_calls" in have else None  # fmt: skip
    if calls is not None and "llm_io" in have and len(calls):
        io = run.sql("select request_id, messages, reply, tool_calls, error io_error from llm_io "
                     "where run_id = ?", [sub]).drop_duplicates("request_id")  # fmt: skip
        calls = calls.merge(io, on="request_id", how="left")
    base = site.base(path)
    fig = charts.call_graph_chart(calls)
    blocks: list[dict[str, Any]] = [{"type": "tiles", "id": "tiles", "tiles": [
        {"key": k, "label": k, "value": _na(info.get(k))}
        for k in ("task_id", "status", "score", "iterations", "discussion_rounds") if k in info
    ] + [{"key": "llm_calls", "label": "LLM calls", "value": 0 if calls is None else len(calls)}]}]  # fmt: skip
    if fig:
        blocks.append({"type": "charts", "charts": [fig]})
    if calls is not None:
        blocks.append({"type": "table", "id": "calls", "heading": "LLM calls",
                       "columns": _calls_columns(True), "note": _io_note(run),
                       "numeric": CALL_NUMERIC,
                       "rows": _calls_rows(site, e, path, calls, True,
                                          _agent_links(site, e, run, path))})  # fmt: skip
    if "messages" in have:
        msgs = run.sql("select tick, ts, hub, sender, receivers, content, run_id "
                       "from internal.messages where run_id = ? order by _seq limit 200",
                       [sub])  # fmt: skip
        idx = data.calls_index(run)
        idx = idx[idx["run_id"] == sub]

        def link_of(rid: Any) -> str | None:
            return "#" + quote(f"c-{rid}")

        blocks.append({"type": "table", "id": "messages", "heading": "Messages",
                       "columns": [*tick_headings(True), "run", "hub", "sender", "to",
                                   "content", "LLM call"],
                       "numeric": CALL_NUMERIC,
                       "rows": _message_rows(site, e, path, msgs, idx, link_of, True,
                                            _agent_links(site, e, run, path))})  # fmt: skip
    error = _na(info.get("error"))
    if error:
        blocks.insert(1, {"type": "pre", "heading": "Error", "bad": True, "text": str(error)})
    return _render(site, path, e.rel, title=f"{sub}", subtitle=f"{topo} run of {e.path.name}",
                   crumbs=_crumbs(site, path, e, (topo, href(base, e.rel, f"topology-{topo}-1.html")),
                                  (sub, None)), blocks=blocks, plotly_js=bool(fig))  # fmt: skip
