"""The pages: the runs list and one run's parts, as blocks for ``view_page.html.j2``.

A block is a dict (``type``: ``tiles`` / ``table`` / ``links`` / ``charts`` / ``pre`` /
``filters``); a table cell is a value or ``{"text", "href"}`` / ``{"text", "pre": True}``
/ ``{"text", "details": [(title, body), ...]}``. The template escapes every text: a
prompt, a message or a folder name holding ``<script>`` shows as text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentlab.analysis.run_report import continue_hint
from agentlab.core.text_table import format_seconds
from agentlab.view import charts, data
from agentlab.view.files import Entry
from agentlab.view.page_parts import (
    CALL_NUMERIC,
    _agent_links,
    _calls_columns,
    _calls_rows,
    _crumbs,
    _cut,
    _io_note,
    _message_rows,
    _na,
    _pager,
    _params_text,
    _render,
    counted,
    tick_headings,
)
from agentlab.view.pages_experiment import _topologies_block, _topology_page, _xrun_page
from agentlab.view.pages_sweep import _paper_page, _sweep_part
from agentlab.view.site_state import SiteState as Site
from agentlab.view.site_state import href, quote

__all__ = ["index_page", "run_part"]

# --- the runs list --------------------------------------------------------------------------


def index_page(site: Site) -> str:
    """Every run, sweep and paper under the root: search, sort, filter (kind, status,
    parameters, dates)."""
    rows = data.runs_rows(site.root)
    cols = ["run", "kind", "status", "created", "ticks", "steps", "llm_calls",
            "step_errors", "tool_errors", "llm_failures", "errors", "parameters"]  # fmt: skip
    numeric = {"ticks", "steps", "llm_calls", "step_errors", "tool_errors", "llm_failures",
               "errors"}  # fmt: skip
    table = []
    for r in rows:
        created = str(r.get("created") or "")
        table.append({
            "attrs": {"kind": r["kind"], "status": r["status"], "created": created,
                      "params": json.dumps(r["params"], default=str, sort_keys=True),
                      "parent": r.get("parent") or ""},
            "cells": [
                {"text": r["run"], "href": href("", r["rel"])},
                r["kind"],
                {"text": r["status"], "cls": "bad" if r["status"] in ("failed", "interrupted")
                 or str(r["status"]).startswith("unreadable") else ""},
                {"text": created[:19].replace("T", " "), "cls": "nowrap"},
                r["ticks"],
                # an experiment's steps are its workflow runs, its step errors the failed
                # runs (its page says "runs", "failed runs"): the cells say so on hover
                _experiment_cell(r, "steps", "workflow runs"),
                r["llm_calls"],
                _experiment_cell(r, "step_errors", "failed workflow runs"),
                r["tool_errors"], r["llm_failures"],
                {"text": r["errors"], "cls": "bad" if r["errors"] else ""},
                {"text": _params_text(r["params"]), "cls": "params",
                 "title": _cut(json.dumps(r["params"], default=str), 2000)},
            ],
        })  # fmt: skip
    kinds = sorted({r["kind"] for r in rows})
    statuses = sorted({str(r["status"]) for r in rows})
    by_kind = ", ".join(counted(sum(r["kind"] == k for r in rows), k) for k in kinds)
    blocks = [
        {"type": "filters", "kinds": kinds, "statuses": statuses,
         "nested": sum(bool(r.get("parent")) for r in rows)},
        {"type": "table", "id": "runs", "columns": cols, "numeric": numeric, "rows": table,
         "sortable": True},
    ]  # fmt: skip
    return _render(
        site, "index.html", None, title=f"Runs in {site.title}",
        subtitle=f"{counted(len(rows), 'run')} ({by_kind})" if rows else "no runs here yet",
        crumbs=[{"text": site.title, "href": None}], blocks=blocks,
    )  # fmt: skip


def _experiment_cell(r: dict[str, Any], key: str, title: str) -> Any:
    return {"text": f"{r[key]:,}", "title": title} if r["kind"] == "experiment" else r[key]


# --- one run ------------------------------------------------------------------------------


def run_part(site: Site, e: Entry, name: str) -> str | None:
    """Page ``name`` of run ``e`` (None when the run has no such page)."""
    path = f"r/{e.rel}/{name}" if e.rel else f"r/{name}"
    if e.kind == "sweep":
        return _sweep_part(site, e, name, path)
    if e.kind == "paper":
        return _paper_page(site, e, path) if name == "index.html" else None
    with site.open(e) as run:
        if name == "index.html":
            return _overview(site, e, run, path)
        m = re.match(r"^(errors|calls|messages|agents|spans)-(\d+)\.html$", name)
        if m:
            fn = {"errors": _errors_page, "calls": _calls_page, "messages": _messages_page,
                  "agents": _agents_page, "spans": _spans_page}[m.group(1)]  # fmt: skip
            return fn(site, e, run, path, int(m.group(2)))
        m = re.match(r"^agent-(.+)\.html$", name)
        if m:
            return _agent_page(site, e, run, path, m.group(1))
        m = re.match(r"^topology-(.+)-(\d+)\.html$", name)
        if m and e.kind == "experiment":
            return _topology_page(site, e, run, path, m.group(1), int(m.group(2)))
        m = re.match(r"^xrun-(.+)\.html$", name)
        if m and e.kind == "experiment":
            return _xrun_page(site, e, run, path, m.group(1))
        return None


def _tiles(s: dict[str, Any]) -> dict[str, Any]:
    err = s["errors"]
    failures = err.get("llm_failures") or {}
    # an experiment's "steps" are its workflow runs and its step errors the runs that
    # failed (store/summary.py): say so, and it has no ticks ("– ticks, 20 steps")
    experiment = s.get("kind") == "experiment"
    tiles = [
        {"key": "ticks", "label": "ticks", "value": s.get("ticks", 0)},
        {"key": "steps", "label": "runs" if experiment else "steps", "value": s.get("steps", 0)},
        {"key": "llm_calls", "label": "LLM calls", "value": s.get("llm_calls", 0)},
        {"key": "step_errors", "label": "failed runs" if experiment else "step errors",
         "value": err.get("step_errors", 0), "bad": bool(err.get("step_errors"))},
        {"key": "tool_errors", "label": "tool errors", "value": err.get("tool_errors", 0),
         "bad": bool(err.get("tool_errors"))},
        {"key": "llm_failures", "label": "LLM failures", "value": sum(failures.values()),
         "bad": bool(failures)},
    ]  # fmt: skip
    tiles += [{"key": f"llm_failures.{k}", "label": f"LLM {k}", "value": v, "bad": True}
              for k, v in sorted(failures.items())]  # fmt: skip
    if experiment:
        tiles = tiles[1:]
    return {"type": "tiles", "tiles": tiles, "id": "tiles"}


def _call_tiles(calls: Any) -> list[dict[str, Any]]:
    """Tokens, latency p50 / p95 and (of streamed calls) TTFT p50 / p95 of a run's calls:
    the figures its report leads with."""
    tokens = calls["prompt_tokens"].fillna(0).sum() + calls["completion_tokens"].fillna(0).sum()
    tiles: list[dict[str, Any]] = [{"key": "tokens", "label": "tokens", "value": int(tokens)}]
    for key, label, values in (
        ("latency", "latency", calls["end"] - calls["start"]),
        ("ttft", "TTFT", calls["first_token"] - calls["start"]),
    ):
        values = values.dropna()
        if len(values):
            tiles += [{"key": f"{key}_p{q}", "label": f"{label} p{q}",
                       "value": format_seconds(values.quantile(q / 100))} for q in (50, 95)]  # fmt: skip
    return tiles


def _overview(site: Site, e: Entry, run: Any, path: str) -> str:
    s = data.run_summary(e)
    base = site.base(path)
    m = e.manifest
    have = set(run.dataset_names())
    errors = s["errors"].get("total", 0)
    links = [
        {"text": f"Errors ({errors:,})", "href": href(base, e.rel, "errors-1.html")},
        {"text": f"LLM calls ({s.get('llm_calls', 0):,})", "href": href(base, e.rel, "calls-1.html")},
        {"text": "Messages", "href": href(base, e.rel, "messages-1.html")},
        {"text": "Agents", "href": href(base, e.rel, "agents-1.html")},
        {"text": "Spans (slowest first)", "href": href(base, e.rel, "spans-1.html")},
    ]  # fmt: skip
    blocks: list[dict[str, Any]] = [_tiles(s), {"type": "links", "links": links, "id": "parts"}]
    hint = continue_hint(e.path, m, str(s.get("status")))
    if hint:  # a stopped or killed experiment / society: how to go on
        blocks.insert(1, {"type": "pre", "heading": "Unfinished", "text": hint, "id": "go-on"})
    figs = []
    if "timeline" in have:
        figs.append(charts.calls_per_tick_chart(run.df("timeline")))
    calls = None
    if "llm_calls" in have:
        extra = ", stage, topology, run_id" if e.kind == "experiment" else ", tick"
        calls = run.sql('select start, "end", first_token, prompt_tokens, completion_tokens'
                        f"{extra} from llm_calls where start is not null")  # fmt: skip
        if e.kind == "experiment":  # its finished runs', as its traffic table (a stop's cut
            calls = run.of_finished_runs(calls)  # run stays in the log until continued)
        figs.append(charts.iat_chart(calls, "topology" if e.kind == "experiment" else None))
        if e.kind != "experiment":  # (an experiment's are per topology, in its table)
            blocks[0]["tiles"] += _call_tiles(calls)
            figs.append(charts.latency_per_tick_chart(calls))
    figs = [f for f in figs if f]
    if e.kind == "experiment":
        blocks.append(_topologies_block(site, e, run, path, calls))
    if figs:
        blocks.append({"type": "charts", "heading": "Charts", "charts": figs})
    params = s.get("params") or {}
    if params:
        blocks.append({"type": "table", "id": "params", "heading": "Parameters",
                       "columns": ["parameter", "value"], "numeric": set(),
                       "rows": [{"cells": [k, _cut(json.dumps(v, default=str) if not
                                isinstance(v, str) else v, 400)]} for k, v in params.items()]})  # fmt: skip
    when = f"created {str(s.get('created') or '–')[:19].replace('T', ' ')}"
    if s.get("ended"):
        when += f" · ended {str(s['ended'])[:19].replace('T', ' ')}"
    model = m.get("model") or (m.get("config") or {}).get("model") or ""
    sub = f"{e.kind} · {s.get('status')} · {when}" + (f" · {model}" if model else "")
    return _render(site, path, e.rel, title=e.rel or e.path.name, subtitle=sub,
                   crumbs=_crumbs(site, path, e), blocks=blocks,
                   plotly_js=bool(figs))  # fmt: skip


def _call_links(site: Site, e: Entry, run: Any, path: str) -> Any:
    """``request_id -> href`` of the calls pages (a call's prompt and reply)."""
    base = site.base(path)
    idx = data.calls_index(run)
    pos = {rid: i for i, rid in enumerate(idx["request_id"])}

    def link_of(rid: Any) -> str | None:
        i = pos.get(rid)
        if i is None:
            return None
        page = i // data.CALLS_PER_PAGE + 1
        return href(base, e.rel, f"calls-{page}.html") + "#" + quote(f"c-{rid}")

    return idx, link_of


def _errors_page(site: Site, e: Entry, run: Any, path: str, page: int) -> str | None:
    errs = data.errors_df(run)
    part, pages = data._page(errs, page, data.ROWS_PER_PAGE)
    if page > pages:
        return None
    _, call_link = _call_links(site, e, run, path)
    agent_cell = _agent_links(site, e, run, path)
    base = site.base(path)
    rows = []
    for r in part.itertuples(index=False):
        agent = _na(r.agent)
        rid = _na(r.request_id)
        sub = _na(r.run_id)
        link = call_link(rid) if rid else None
        tb = _na(r.traceback)
        rows.append({"cells": [
            r.kind,
            agent_cell(agent),
            _na(r.tick),
            {"text": _cut(r.message, 600), "pre": True},
            {"text": "traceback", "details": [("traceback", tb)]} if tb else "–",
            {"text": "prompt & reply", "href": link} if link else (
                {"text": f"run {sub}", "href": href(base, e.rel, f"xrun-{sub}.html")} if sub else "–"),
        ]})  # fmt: skip
    counts = errs["kind"].value_counts().to_dict() if len(errs) else {}
    note = ", ".join(counted(v, k) for k, v in counts.items()) or "no errors"
    if data.run_summary(e)["errors"].get("llm_in_steps"):  # (the header's LLM failures)
        note += "; an LLM failure that made a step fail is listed once, as that step error"
    blocks = [{"type": "table", "id": "errors", "columns": ["kind", "agent", "tick", "message",
               "traceback", "LLM call"], "numeric": {"tick"}, "rows": rows, "note": note,
               "pager": _pager(site, e, "errors", page, pages, path) if pages > 1 else None}]  # fmt: skip
    return _render(site, path, e.rel, title=f"Errors of {e.path.name}",
                   crumbs=_crumbs(site, path, e, ("errors", None)), blocks=blocks)  # fmt: skip


def _calls_page(site: Site, e: Entry, run: Any, path: str, page: int) -> str | None:
    calls, pages = data.calls_df(run, page)
    if page > pages:
        return None
    exp = e.kind == "experiment"
    blocks = [{"type": "table", "id": "calls", "columns": _calls_columns(exp),
               "numeric": CALL_NUMERIC,
               "rows": _calls_rows(site, e, path, calls, exp, _agent_links(site, e, run, path)),
               "note": _io_note(run),
               "pager": _pager(site, e, "calls", page, pages, path) if pages > 1 else None}]  # fmt: skip
    return _render(site, path, e.rel, title=f"LLM calls of {e.path.name}",
                   crumbs=_crumbs(site, path, e, ("LLM calls", None)), blocks=blocks)  # fmt: skip


def _messages_page(site: Site, e: Entry, run: Any, path: str, page: int) -> str | None:
    msgs, pages = data.messages_df(run, page)
    if page > pages:
        return None
    exp = e.kind == "experiment"
    idx, link_of = _call_links(site, e, run, path)
    cols = [*tick_headings(exp), *(["run"] if exp else []), "hub", "sender", "to", "content",
            "LLM call"]  # fmt: skip
    blocks = [{"type": "table", "id": "messages", "columns": cols, "numeric": CALL_NUMERIC,
               "rows": _message_rows(site, e, path, msgs, idx, link_of, exp,
                                     _agent_links(site, e, run, path)) if len(msgs) else [],
               "pager": _pager(site, e, "messages", page, pages, path) if pages > 1 else None}]  # fmt: skip
    return _render(site, path, e.rel, title=f"Messages of {e.path.name}",
                   crumbs=_crumbs(site, path, e, ("messages", None)), blocks=blocks)  # fmt: skip


def _spans_page(site: Site, e: Entry, run: Any, path: str, page: int) -> str | None:
    spans, pages = data.spans_df(run, page)
    if page > pages:
        return None
    idx, link_of = _call_links(site, e, run, path)
    call_of = data.span_calls(idx)
    agent_cell = _agent_links(site, e, run, path)
    base = site.base(path)
    # an experiment's spans name their run and stage: its list was rows of "experiment.run"
    # with agent and tick "–", saying nothing of which of its runs took 771 s
    runs = e.kind == "experiment"
    rows = []
    for r in spans.itertuples(index=False) if len(spans) else []:
        agent, tick = _na(r.agent), _na(r.tick)
        # an llm.call span names its call; another span, the call its agent made last (by
        # agent and time alone, an experiment's "expert_1" call could be another run's)
        own = _na(r.request_id)
        link = link_of(own) if own else None
        if link is None:
            rid = call_of(agent, tick, _na(r.start))
            link = link_of(rid) if rid else None
        status = _na(r.status) or ""
        sub = _na(r.run_id)
        place = [{"text": sub, "href": href(base, e.rel, f"xrun-{sub}.html")} if sub else "–",
                 _na(r.stage) or "–"] if runs else []  # fmt: skip
        rows.append({"cells": [
            r.name,
            *place,
            agent_cell(agent),
            tick,
            None if _na(r.duration) is None else round(float(r.duration), 4),
            {"text": status, "cls": "bad" if status == "error" else ""},
            _cut(_na(r.message), 300),
            {"text": "prompt & reply", "href": link} if link else "–",
        ]})  # fmt: skip
    blocks = [{"type": "table", "id": "spans", "columns": ["span", *(["run", "stage"] if runs else []),
               "agent", "tick", "duration (s)", "status", "message", "LLM call"],
               "numeric": {"tick", "duration (s)"}, "rows": rows,
               "pager": _pager(site, e, "spans", page, pages, path) if pages > 1 else None}]  # fmt: skip
    return _render(site, path, e.rel, title=f"Spans of {e.path.name}",
                   crumbs=_crumbs(site, path, e, ("spans", None)), blocks=blocks)  # fmt: skip


def _agents_page(site: Site, e: Entry, run: Any, path: str, page: int) -> str | None:
    agents = data.agents_df(e, run)
    part, pages = data._page(agents, page, data.ROWS_PER_PAGE)
    if page > pages:
        return None
    base = site.base(path)
    cols = [c for c in data.ACTIVITY if c in agents]
    lat = "latency_p50" in agents
    rows = []
    for r in part.to_dict("records"):
        a = r["agent"]
        cells: list[Any] = [{"text": a, "href": href(base, e.rel, f"agent-{a}.html")}]
        cells += [r[c] for c in cols]
        if lat:
            p50 = _na(r["latency_p50"])
            cells.append(None if p50 is None else round(float(p50), 3))
        bad = any(r.get(k) for k in ("llm_failures", "tool_errors", "step_errors"))
        rows.append({"cells": cells, "attrs": {"bad": int(bad)}})
    heads = [*cols, *(["latency p50 (s)"] if lat else [])]
    blocks: list[dict[str, Any]] = [{"type": "table", "id": "agents", "columns": ["agent", *heads],
               "numeric": set(heads), "rows": rows, "sortable": True,  # (who failed, called most)
               "note": f"{counted(len(agents), 'agent')}: what each did over the run (its page: by tick)",
               "pager": _pager(site, e, "agents", page, pages, path) if pages > 1 else None}]  # fmt: skip
    return _render(site, path, e.rel, title=f"Agents of {e.path.name}",
                   crumbs=_crumbs(site, path, e, ("agents", None)), blocks=blocks)  # fmt: skip


def _agent_page(site: Site, e: Entry, run: Any, path: str, agent: str) -> str | None:
    if agent not in data.agents_of(run):
        return None
    tl = data.agent_timeline_df(run, agent)
    _, link_of = _call_links(site, e, run, path)
    cols = ["tick", *data.ACTIVITY]
    rows = []
    for r in tl.head(2000).to_dict("records"):
        cells: list[Any] = [_na(r.get(c)) if c in r else 0 for c in cols]
        cells.append({"text": _cut(_na(r.get("state")), 300), "cls": "params"})
        first = _na(r.get("first_call"))
        link = link_of(first) if first else None
        cells.append({"text": "first call", "href": link} if link else "–")
        bad = any(_na(r.get(k)) for k in ("llm_failures", "tool_errors", "step_errors"))
        rows.append({"cells": cells, "attrs": {"tick": _na(r.get("tick")), "bad": int(bad)}})
    blocks = [{"type": "table", "id": "timeline", "heading": "Timeline by tick",
               "columns": [*cols, "state", "prompt & reply"], "numeric": set(cols), "rows": rows,
               "note": None if len(tl) <= 2000 else f"first 2,000 of {len(tl):,} ticks"}]  # fmt: skip
    return _render(site, path, e.rel, title=f"Agent {agent}",
                   subtitle=f"in {e.rel or e.path.name}",
                   crumbs=_crumbs(site, path, e, ("agents", href(site.base(path), e.rel, "agents-1.html")),
                                  (agent, None)), blocks=blocks)  # fmt: skip
