"""The pages: the runs list and one run's parts, as blocks for ``view_page.html.j2``.

A block is a dict (``type``: ``tiles`` / ``table`` / ``links`` / ``charts`` / ``pre`` /
``filters``); a table cell is a value or ``{"text", "href"}`` / ``{"text", "pre": True}``
/ ``{"text", "details": [(title, body), ...]}``. The template escapes every text: a
prompt, a message or a folder name holding ``<script>`` shows as text.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from agentlab.view import charts, data
from agentlab.view.files import Entry, read_doc
from agentlab.view.site import Site, href, quote

__all__ = ["index_page", "run_part"]

TOPO_RUNS_PER_PAGE = 50
#: parameters that name a replicate, not a condition (never a sweep chart's x axis)
REPLICATE = ("seed", "replicate", "rep")
XRUN_MAX_CALLS = 300
MAX_TEXT = 4000
#: recorded tables and figures larger than this are linked, not drawn in the page
MAX_INLINE = 300_000


def _render(site: Site, path: str, rel: str | None, **kw: Any) -> str:
    from agentlab.analysis.run_report import template_env

    args = site.render_args(path, rel)
    kw.setdefault("plotly_js", None)
    if kw["plotly_js"]:
        kw["plotly_js"] = args["root"] + "plotly.min.js"
    return str(template_env().get_template("view_page.html.j2").render(**args, **kw))


def _cut(value: Any, n: int = MAX_TEXT) -> str:
    text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
    return text if len(text) <= n else text[:n] + f"… ({len(text) - n:,} more characters)"


def _na(v: Any) -> Any:
    if v is None:
        return None
    try:
        if isinstance(v, float) and math.isnan(v):
            return None
        import pandas as pd

        if v is pd.NA or v is pd.NaT:
            return None
    except TypeError:
        pass
    return v.item() if hasattr(v, "item") else v


def _params_text(params: dict[str, Any], n: int = 160) -> str:
    text = ", ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v, default=str)}" for k, v in params.items()
    )
    return _cut(text, n)


def _crumbs(site: Site, path: str, e: Entry | None, *tail: tuple[str, str | None]) -> list[Any]:
    base = site.base(path)
    out: list[dict[str, Any]] = [{"text": site.title, "href": base + "index.html"}]
    if e is not None:
        parts = e.rel.split("/") if e.rel else []
        ents = site.entries()
        for i in range(1, len(parts)):  # the sweep or paper holding it
            up = "/".join(parts[:i])
            if up in ents:
                out.append({"text": parts[i - 1], "href": href(base, up)})
        out.append({"text": e.path.name if not e.rel else parts[-1], "href": href(base, e.rel)})
    out += [{"text": t, "href": h} for t, h in tail]
    return out


def _pager(site: Site, e: Entry, stem: str, page: int, pages: int, path: str) -> dict[str, Any]:
    base = site.base(path)

    def link(n: int) -> str:
        return href(base, e.rel, f"{stem}-{n}.html")

    return {
        "page": page,
        "pages": pages,
        "prev": link(page - 1) if page > 1 else None,
        "next": link(page + 1) if page < pages else None,
        "first": link(1),
        "last": link(pages),
    }


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
                      "params": json.dumps(r["params"], default=str, sort_keys=True)},
            "cells": [
                {"text": r["run"], "href": href("", r["rel"])},
                r["kind"],
                {"text": r["status"], "cls": "bad" if r["status"] in ("failed", "interrupted")
                 or str(r["status"]).startswith("unreadable") else ""},
                created[:19].replace("T", " "),
                r["ticks"], r["steps"], r["llm_calls"],
                r["step_errors"], r["tool_errors"], r["llm_failures"],
                {"text": r["errors"], "cls": "bad" if r["errors"] else ""},
                {"text": _params_text(r["params"]), "cls": "params",
                 "title": _cut(json.dumps(r["params"], default=str), 2000)},
            ],
        })  # fmt: skip
    kinds = sorted({r["kind"] for r in rows})
    statuses = sorted({str(r["status"]) for r in rows})
    by_kind = ", ".join(f"{sum(r['kind'] == k for r in rows)} {k}" for k in kinds)
    blocks = [
        {"type": "filters", "kinds": kinds, "statuses": statuses},
        {"type": "table", "id": "runs", "columns": cols, "numeric": numeric, "rows": table,
         "sortable": True},
    ]  # fmt: skip
    return _render(
        site, "index.html", None, title=f"Runs in {site.title}",
        subtitle=f"{len(rows)} runs ({by_kind})" if rows else "no runs here yet",
        crumbs=[{"text": site.title, "href": None}], blocks=blocks,
    )  # fmt: skip


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
    tiles = [
        {"key": "ticks", "label": "ticks", "value": s.get("ticks", 0)},
        {"key": "steps", "label": "steps", "value": s.get("steps", 0)},
        {"key": "llm_calls", "label": "LLM calls", "value": s.get("llm_calls", 0)},
        {"key": "step_errors", "label": "step errors", "value": err.get("step_errors", 0),
         "bad": bool(err.get("step_errors"))},
        {"key": "tool_errors", "label": "tool errors", "value": err.get("tool_errors", 0),
         "bad": bool(err.get("tool_errors"))},
        {"key": "llm_failures", "label": "LLM failures", "value": sum(failures.values()),
         "bad": bool(failures)},
    ]  # fmt: skip
    tiles += [{"key": f"llm_failures.{k}", "label": f"LLM {k}", "value": v, "bad": True}
              for k, v in sorted(failures.items())]  # fmt: skip
    return {"type": "tiles", "tiles": tiles, "id": "tiles"}


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
    figs = []
    if "timeline" in have:
        figs.append(charts.calls_per_tick_chart(run.df("timeline")))
    if "llm_calls" in have:
        cols = "start, stage, topology, run_id" if e.kind == "experiment" else "start"
        calls = run.sql(f"select {cols} from llm_calls where start is not null")
        figs.append(charts.iat_chart(calls, "topology" if e.kind == "experiment" else None))
    figs = [f for f in figs if f]
    if e.kind == "experiment":
        blocks.append(_topologies_block(site, e, run, path))
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
            {"text": agent, "href": href(base, e.rel, f"agent-{agent}.html")} if agent else "–",
            _na(r.tick),
            {"text": _cut(r.message, 600), "pre": True},
            {"text": "traceback", "details": [("traceback", tb)]} if tb else "–",
            {"text": "prompt & reply", "href": link} if link else (
                {"text": f"run {sub}", "href": href(base, e.rel, f"xrun-{sub}.html")} if sub else "–"),
        ]})  # fmt: skip
    counts = errs["kind"].value_counts().to_dict() if len(errs) else {}
    note = ", ".join(f"{v:,} {k}" for k, v in counts.items()) or "no errors"
    blocks = [{"type": "table", "id": "errors", "columns": ["kind", "agent", "tick", "message",
               "traceback", "LLM call"], "numeric": {"tick"}, "rows": rows, "note": note,
               "pager": _pager(site, e, "errors", page, pages, path) if pages > 1 else None}]  # fmt: skip
    return _render(site, path, e.rel, title=f"Errors of {e.path.name}",
                   crumbs=_crumbs(site, path, e, ("errors", None)), blocks=blocks)  # fmt: skip


def _io_details(r: Any) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    msgs = _na(getattr(r, "messages", None))
    if msgs is None:
        return out
    if isinstance(msgs, str):
        try:
            msgs = json.loads(msgs)
        except ValueError:
            msgs = [{"role": "?", "content": msgs}]
    for m in msgs if isinstance(msgs, list) else []:
        content = m.get("content") if isinstance(m, dict) else m
        if not isinstance(content, str):
            content = json.dumps(content, default=str, indent=1)
        out.append((f"prompt · {m.get('role', '?') if isinstance(m, dict) else '?'}",
                    _cut(content, 20_000)))  # fmt: skip
    reply = _na(getattr(r, "reply", None))
    tools = _na(getattr(r, "tool_calls", None))
    err = _na(getattr(r, "io_error", None))
    out.append(("reply", _cut(reply, 20_000) if reply else "(no text)"))
    if tools and tools not in ("[]", "null"):
        t = tools if isinstance(tools, str) else json.dumps(tools, default=str)
        out.append(("tool calls", _cut(t, 8000)))
    if err:
        out.append(("error", _cut(err, 4000)))
    return out


def _calls_rows(site: Site, e: Entry, path: str, calls: Any, experiment: bool) -> list[Any]:
    base = site.base(path)
    rows = []
    t0 = None
    for r in calls.itertuples(index=False):
        start = _na(getattr(r, "start", None))
        if t0 is None and start is not None:
            t0 = start
        agent = _na(r.agent_id)
        io = _io_details(r)
        rid = str(r.request_id)
        cells: list[Any] = [
            rid,
            {"text": agent, "href": href(base, e.rel, f"agent-{agent}.html")} if agent else "–",
            _na(getattr(r, "tick", None)),
        ]
        if experiment:
            sub = _na(getattr(r, "run_id", None))
            cells += [{"text": sub, "href": href(base, e.rel, f"xrun-{sub}.html")} if sub else "–",
                      _na(getattr(r, "stage", None)) or "–"]  # fmt: skip
        lat = _na(getattr(r, "latency", None))
        outcome = _na(getattr(r, "outcome", None)) or "?"
        cells += [
            None if start is None else round(float(start) - float(t0 or 0), 3),
            None if lat is None else round(float(lat), 3),
            _na(getattr(r, "total_tokens", None)),
            {"text": outcome, "cls": "ok" if outcome == "ok" else "bad"},
            {"text": "show", "details": io, "id": None} if io else "not recorded",
        ]
        rows.append({"id": f"c-{rid}", "cells": cells})
    return rows


def _calls_columns(experiment: bool) -> list[str]:
    return ["request", "agent", "tick", *(["run", "stage"] if experiment else []),
            "start (s)", "latency (s)", "tokens", "outcome", "prompt & reply"]  # fmt: skip


def _io_note(run: Any) -> str | None:
    if "llm_io" in set(run.dataset_names()):
        return None
    return ("prompts and replies were not recorded for this run: set AGENTLAB_LLM_IO=1 "
            "(or RunServices(llm_io=True)) before the run to record them")  # fmt: skip


def _calls_page(site: Site, e: Entry, run: Any, path: str, page: int) -> str | None:
    calls, pages = data.calls_df(run, page)
    if page > pages:
        return None
    exp = e.kind == "experiment"
    blocks = [{"type": "table", "id": "calls", "columns": _calls_columns(exp),
               "numeric": {"tick", "start (s)", "latency (s)", "tokens"},
               "rows": _calls_rows(site, e, path, calls, exp), "note": _io_note(run),
               "pager": _pager(site, e, "calls", page, pages, path) if pages > 1 else None}]  # fmt: skip
    return _render(site, path, e.rel, title=f"LLM calls of {e.path.name}",
                   crumbs=_crumbs(site, path, e, ("LLM calls", None)), blocks=blocks)  # fmt: skip


def _message_rows(
    site: Site, e: Entry, path: str, msgs: Any, idx: Any, link_of: Any, experiment: bool
) -> list[Any]:
    base = site.base(path)
    rows = []
    for r in msgs.itertuples(index=False):
        receivers = _na(r.receivers) if not hasattr(r.receivers, "tolist") else r.receivers.tolist()
        sender = _na(r.sender)
        sub = _na(getattr(r, "run_id", None)) if experiment else None
        rid = data.message_call(idx, sender, sub, _na(r.ts), _na(r.tick)) if sender else None
        link = link_of(rid) if rid else None
        cells: list[Any] = [_na(r.tick)]
        if experiment:
            cells.append(
                {"text": sub, "href": href(base, e.rel, f"xrun-{sub}.html")} if sub else "–"
            )
        from agentlab.viz.conversation import readable

        cells += [
            _na(r.hub) or "",
            {"text": sender, "href": href(base, e.rel, f"agent-{sender}.html")} if sender else "–",
            ", ".join(map(str, receivers))
            if isinstance(receivers, list | tuple)
            else str(receivers or ""),
            {"text": _cut(readable(_na(r.content)), 1500), "pre": True},
            {"text": "prompt & reply", "href": link} if link else "–",
        ]
        rows.append({"cells": cells})
    return rows


def _messages_page(site: Site, e: Entry, run: Any, path: str, page: int) -> str | None:
    msgs, pages = data.messages_df(run, page)
    if page > pages:
        return None
    exp = e.kind == "experiment"
    idx, link_of = _call_links(site, e, run, path)
    cols = ["tick", *(["run"] if exp else []), "hub", "sender", "to", "content", "LLM call"]
    blocks = [{"type": "table", "id": "messages", "columns": cols, "numeric": {"tick"},
               "rows": _message_rows(site, e, path, msgs, idx, link_of, exp) if len(msgs) else [],
               "pager": _pager(site, e, "messages", page, pages, path) if pages > 1 else None}]  # fmt: skip
    return _render(site, path, e.rel, title=f"Messages of {e.path.name}",
                   crumbs=_crumbs(site, path, e, ("messages", None)), blocks=blocks)  # fmt: skip


def _spans_page(site: Site, e: Entry, run: Any, path: str, page: int) -> str | None:
    spans, pages = data.spans_df(run, page)
    if page > pages:
        return None
    idx, link_of = _call_links(site, e, run, path)
    base = site.base(path)
    rows = []
    for r in spans.itertuples(index=False) if len(spans) else []:
        agent, tick = _na(r.agent), _na(r.tick)
        rid = data.span_call(idx, agent, tick, _na(r.start))
        link = link_of(rid) if rid else None
        status = _na(r.status) or ""
        rows.append({"cells": [
            r.name,
            {"text": agent, "href": href(base, e.rel, f"agent-{agent}.html")} if agent else "–",
            tick,
            None if _na(r.duration) is None else round(float(r.duration), 4),
            {"text": status, "cls": "bad" if status == "error" else ""},
            _cut(_na(r.message), 300),
            {"text": "prompt & reply", "href": link} if link else "–",
        ]})  # fmt: skip
    blocks = [{"type": "table", "id": "spans", "columns": ["span", "agent", "tick",
               "duration (s)", "status", "message", "LLM call"],
               "numeric": {"tick", "duration (s)"}, "rows": rows,
               "pager": _pager(site, e, "spans", page, pages, path) if pages > 1 else None}]  # fmt: skip
    return _render(site, path, e.rel, title=f"Spans of {e.path.name}",
                   crumbs=_crumbs(site, path, e, ("spans", None)), blocks=blocks)  # fmt: skip


def _agents_page(site: Site, e: Entry, run: Any, path: str, page: int) -> str | None:
    import pandas as pd

    agents = pd.DataFrame({"agent": data.agents_of(run)})
    part, pages = data._page(agents, page, data.ROWS_PER_PAGE)
    if page > pages:
        return None
    base = site.base(path)
    rows = [{"cells": [{"text": a, "href": href(base, e.rel, f"agent-{a}.html")}]}
            for a in part["agent"]]  # fmt: skip
    blocks: list[dict[str, Any]] = [{"type": "table", "id": "agents", "columns": ["agent"], "numeric": set(),
               "rows": rows, "note": f"{len(agents):,} agents",
               "pager": _pager(site, e, "agents", page, pages, path) if pages > 1 else None}]  # fmt: skip
    return _render(site, path, e.rel, title=f"Agents of {e.path.name}",
                   crumbs=_crumbs(site, path, e, ("agents", None)), blocks=blocks)  # fmt: skip


def _agent_page(site: Site, e: Entry, run: Any, path: str, agent: str) -> str | None:
    if agent not in data.agents_of(run):
        return None
    tl = data.agent_timeline_df(run, agent)
    _, link_of = _call_links(site, e, run, path)
    cols = ["tick", "steps", "llm_calls", "llm_failures", "tool_calls", "tool_errors",
            "messages", "step_errors"]  # fmt: skip
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


def _topologies_block(site: Site, e: Entry, run: Any, path: str) -> dict[str, Any]:
    runs = _exp_runs(run)
    base = site.base(path)
    rows = []
    for topo, g in runs.groupby("topology", sort=True):
        ok = int((g["status"] == "ok").sum()) if "status" in g else 0
        score = g["score"].mean() if "score" in g else None
        rows.append({"cells": [
            {"text": topo, "href": href(base, e.rel, f"topology-{topo}-1.html")},
            len(g), ok, _na(g["calls"].sum()) if "calls" in g else None,
            None if score is None or score != score else round(float(score), 2),
        ]})  # fmt: skip
    return {"type": "table", "id": "topologies", "heading": "Topologies",
            "columns": ["topology", "runs", "ok", "LLM calls", "mean score"],
            "numeric": {"runs", "ok", "LLM calls", "mean score"}, "rows": rows}  # fmt: skip


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
               "note": f"{len(runs):,} runs", "sortable": True,
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
                       "numeric": {"tick", "start (s)", "latency (s)", "tokens"},
                       "rows": _calls_rows(site, e, path, calls, True)})  # fmt: skip
    if "messages" in have:
        msgs = run.sql("select tick, ts, hub, sender, receivers, content, run_id "
                       "from internal.messages where run_id = ? order by _seq limit 200",
                       [sub])  # fmt: skip
        idx = data.calls_index(run)
        idx = idx[idx["run_id"] == sub]

        def link_of(rid: Any) -> str | None:
            return "#" + quote(f"c-{rid}")

        blocks.append({"type": "table", "id": "messages", "heading": "Messages",
                       "columns": ["tick", "run", "hub", "sender", "to", "content", "LLM call"],
                       "numeric": {"tick"},
                       "rows": _message_rows(site, e, path, msgs, idx, link_of, True)})  # fmt: skip
    error = _na(info.get("error"))
    if error:
        blocks.insert(1, {"type": "pre", "heading": "Error", "bad": True, "text": str(error)})
    return _render(site, path, e.rel, title=f"{sub}", subtitle=f"{topo} run of {e.path.name}",
                   crumbs=_crumbs(site, path, e, (topo, href(base, e.rel, f"topology-{topo}-1.html")),
                                  (sub, None)), blocks=blocks, plotly_js=bool(fig))  # fmt: skip


# --- sweeps and papers ----------------------------------------------------------------------


def _children(site: Site, e: Entry, prefix: str | None = None) -> list[Entry]:
    pre = (prefix or e.rel) + "/" if (prefix or e.rel) else ""
    return [c for c in site.entries().values() if c.rel != e.rel and c.rel.startswith(pre)
            and c.parent == e.rel]  # fmt: skip


def _runs_block(site: Site, e: Entry, path: str, kids: list[Entry], heading: str) -> dict[str, Any]:
    base = site.base(path)
    rows = []
    for c in kids:
        s = data.run_summary(c)
        rows.append({"cells": [
            {"text": c.rel[len(e.rel) + 1:] if e.rel else c.rel, "href": href(base, c.rel)},
            c.kind, s.get("status"), s.get("ticks", 0), s.get("llm_calls", 0),
            s["errors"].get("total", 0),
        ]})  # fmt: skip
    return {"type": "table", "id": "child-runs", "heading": heading, "rows": rows,
            "columns": ["run", "kind", "status", "ticks", "LLM calls", "errors"],
            "numeric": {"ticks", "LLM calls", "errors"}}  # fmt: skip


def _file_links(site: Site, e: Entry, folder: Path, path: str) -> list[dict[str, str]]:
    from agentlab.view.site import RAW_TYPES

    base = site.base(path)
    out = []
    for sub in ("", "tables", "figures"):
        d = folder / sub if sub else folder
        if not d.is_dir() or d.is_symlink():
            continue
        for p in sorted(d.iterdir()):
            if p.is_symlink() or not p.is_file() or p.suffix.lower() not in RAW_TYPES:
                continue
            if p.name in ("run.json", "plotly.min.js", "status.json", "sweep.json"):
                continue
            rel = p.relative_to(site.root).as_posix()
            out.append({"text": p.relative_to(folder).as_posix(), "href": base + quote(f"f/{rel}")})
    return out


def _results(folder: Path) -> dict[str, Any]:
    from agentlab.sweep.results import read_results

    return read_results(folder)


def _kv_block(heading: str, values: dict[str, Any], id_: str) -> dict[str, Any]:
    return {"type": "table", "id": id_, "heading": heading, "columns": ["name", "value"],
            "numeric": set(), "rows": [{"cells": [k, _cut(v if isinstance(v, str) else
                                        json.dumps(v, default=str), 400)]} for k, v in values.items()]}  # fmt: skip


def _paper_page(site: Site, e: Entry, path: str) -> str:
    s = data.run_summary(e)
    m = e.manifest
    cfg = m.get("config") or {}
    files = _file_links(site, e, e.path, path)
    html = [f for f in files if f["text"].endswith(".html")]
    blocks: list[dict[str, Any]] = []
    if html:
        blocks.append({"type": "links", "heading": "The paper", "links": html, "id": "paper-html"})
    if s.get("params"):
        blocks.append(_kv_block("Parameters", s["params"], "params"))
    res = data.redact(_results(e.path))
    if res:
        blocks.append(_kv_block("Recorded results", res, "results"))
    figs = _recorded(e.path, blocks)
    blocks.append(_runs_block(site, e, path, _children(site, e), "Runs written by the paper"))
    nb = Path(str(cfg.get("notebook") or "")).name
    sub = f"paper · {s.get('status')} · notebook {nb or '?'} · created {str(s.get('created') or '–')[:19]}"
    return _render(site, path, e.rel, title=e.rel or e.path.name, subtitle=sub,
                   crumbs=_crumbs(site, path, e), blocks=blocks, plotly_js=figs)  # fmt: skip


def _recorded(folder: Path, blocks: list[dict[str, Any]]) -> bool:
    """The tables (first rows) and figures a notebook recorded in ``folder``, as blocks;
    whether any figure was added."""
    import pandas as pd

    for p in sorted((folder / "tables").glob("*.csv")) if (folder / "tables").is_dir() else []:
        if p.is_symlink() or p.stat().st_size > MAX_INLINE:
            continue
        try:
            df = pd.read_csv(p).head(50)
        except (OSError, ValueError):
            continue
        blocks.append({"type": "table", "id": f"table-{p.stem}", "heading": f"Table {p.stem}",
                       "columns": [str(c) for c in df.columns], "numeric": {
                           str(c) for c in df.columns if pd.api.types.is_numeric_dtype(df[c])},
                       "rows": [{"cells": [_na(v) for v in r]} for r in df.itertuples(index=False)]})  # fmt: skip
    figs = []
    for p in sorted((folder / "figures").glob("*.json")) if (folder / "figures").is_dir() else []:
        if p.is_symlink() or p.stat().st_size > MAX_INLINE:
            continue
        fig = charts.recorded_figure_chart(p.stem, p.read_text())
        if fig:
            figs.append(fig)
    if figs:
        blocks.append({"type": "charts", "heading": "Figures", "charts": figs})
    return bool(figs)


def _sweep_part(site: Site, e: Entry, name: str, path: str) -> str | None:
    from agentlab.sweep import Sweep

    sw = Sweep(e.path)
    if name == "index.html":
        return _sweep_page(site, e, sw, path)
    m = re.match(r"^point-(.+)\.html$", name)
    if not m:
        return None
    pid = m.group(1)
    point = next((p for p in sw.points if p["point_id"] == pid), None)
    if point is None:
        return None
    folder = e.path / pid
    status = read_doc(folder / "status.json")
    blocks: list[dict[str, Any]] = [
        {"type": "tiles", "id": "tiles", "tiles": [
            {"key": "status", "label": "status", "value": status.get("status", "pending"),
             "bad": status.get("status") not in (None, "ok")},
            {"key": "duration_s", "label": "seconds", "value": _na(status.get("duration_s"))}]},
        _kv_block("Parameters", data.redact(point.get("params") or {}), "params"),
    ]  # fmt: skip
    res = data.redact(_results(folder))
    if res:
        blocks.append(_kv_block("Recorded results", res, "results"))
    if status.get("error"):
        blocks.append(
            {"type": "pre", "heading": "Error", "bad": True, "text": _cut(status["error"])}
        )
    figs = _recorded(folder, blocks)
    kids = [
        c
        for c in site.entries().values()
        if c.rel.startswith(f"{e.rel}/{pid}/" if e.rel else f"{pid}/")
    ]
    blocks.append(_runs_block(site, e, path, kids, "Runs of this point"))
    files = _file_links(site, e, folder, path)
    if files:
        blocks.append({"type": "links", "heading": "Files", "links": files, "id": "files"})
    return _render(site, path, e.rel, title=f"point {pid}", subtitle=_params_text(point.get("params") or {}),
                   crumbs=_crumbs(site, path, e, (pid, None)), blocks=blocks, plotly_js=figs)  # fmt: skip


def _sweep_page(site: Site, e: Entry, sw: Any, path: str) -> str:
    import pandas as pd

    df = sw.df()
    params = sw.params
    base = site.base(path)
    metrics = [c for c in df.columns if c not in {"point_id", "status", "duration_s", "error", *params}
               and pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])]  # fmt: skip
    cols = ["point", *params, "status", "seconds", *metrics]
    rows = []
    for r in df.to_dict("records"):
        rows.append({"attrs": {"status": r.get("status")}, "cells": [
            {"text": r["point_id"], "href": href(base, e.rel, f"point-{r['point_id']}.html")},
            *[_cut(v if isinstance(v := data.redact({p: _na(r.get(p))})[p], str) else
                   json.dumps(v, default=str), 60) for p in params],
            {"text": r.get("status"), "cls": "ok" if r.get("status") == "ok" else "bad"},
            _na(r.get("duration_s")),
            *[_na(r.get(c)) for c in metrics],
        ]})  # fmt: skip
    figs = _sweep_charts(df, params, metrics)
    blocks: list[dict[str, Any]] = []
    if figs:
        blocks.append({"type": "charts", "heading": "Recorded metrics against parameters",
                       "charts": figs, "note": "mean of the replicates with a 95% Student-t "
                       "interval (one point per parameter value)"})  # fmt: skip
    blocks.append({"type": "table", "id": "points", "heading": "Points", "columns": cols,
                   "numeric": {"seconds", *metrics}, "rows": rows, "sortable": True})  # fmt: skip
    blocks.append(_runs_block(site, e, path, _children(site, e), "Runs written by the points"))
    ok = int((df["status"] == "ok").sum()) if len(df) else 0
    nb = Path(str(sw.meta.get("notebook", ""))).name
    return _render(site, path, e.rel, title=e.rel or e.path.name,
                   subtitle=f"sweep of {nb} · {len(df)} points, {ok} ok",
                   crumbs=_crumbs(site, path, e), blocks=blocks, plotly_js=bool(figs))  # fmt: skip


def _sweep_charts(df: Any, params: list[str], metrics: list[str]) -> list[dict[str, str]]:
    from agentlab.sweep.summary import aggregate_df

    ok = df[df["status"] == "ok"] if "status" in df else df
    varied = [p for p in params if ok[p].astype(str).nunique() > 1] if len(ok) else []
    rep = next((p for p in REPLICATE if p in varied), None)
    figs = []
    for param in [p for p in varied if p != rep][:3]:
        for metric in metrics[:4]:
            try:
                agg = aggregate_df(ok.assign(**{param: ok[param].astype(str)})
                                   if ok[param].dtype == object else ok,
                                   [param], [metric], replicate=rep or param)  # fmt: skip
            except Exception:  # an unusable column: skip the chart, keep the page
                continue
            if len(agg):
                figs.append(charts.sweep_metric_chart(agg, param, metric))
    return figs
