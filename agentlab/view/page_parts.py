"""What the page modules share: the page template call, text and number cells, crumbs,
pagers, and the LLM-call table rows a run's calls page and an experiment's run page both
show. Below :mod:`agentlab.view.pages`, :mod:`~agentlab.view.pages_experiment` and
:mod:`~agentlab.view.pages_sweep`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from agentlab.store.summary import REPLY_KINDS
from agentlab.view import data
from agentlab.view.files import Entry
from agentlab.view.site_state import SiteState as Site
from agentlab.view.site_state import href

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


def counted(n: int, noun: str) -> str:
    """``"1 run"``, ``"2 runs"``, ``"1,200 societies"``: a count and its noun, plural
    unless one ("1 runs" headed a folder of one run). Only the head of a label is
    pluralised: ``"step error (retried)"`` → ``"step errors (retried)"``, ``"LLM failure:
    timeout"`` → ``"LLM failures: timeout"``; a noun already plural (``"threads"``) stays."""
    cut = min((i for i in (noun.find(" ("), noun.find(":")) if i >= 0), default=len(noun))
    head, tail = noun[:cut], noun[cut:]
    if n != 1 and not head.endswith("s"):
        head = head[:-1] + "ies" if re.search(r"[^aeiou]y$", head) else head + "s"
    return f"{n:,} {head}{tail}"


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


def _agent_links(site: Site, e: Entry, run: Any, path: str) -> Any:
    """``cell(agent)``: an agent's name linked to its page where it has one, else the name
    (the spans of a tick that never committed, before a resume cuts them, name agents
    with no page: ``agentlab view --bundle`` refused the folder over those links)."""
    base = site.base(path)
    known = set(data.agents_of(run))

    def cell(agent: Any) -> Any:
        if not agent:
            return "–"
        if str(agent) not in known:
            return str(agent)
        return {"text": agent, "href": href(base, e.rel, f"agent-{agent}.html")}

    return cell


def _calls_rows(
    site: Site, e: Entry, path: str, calls: Any, experiment: bool, agent_cell: Any
) -> list[Any]:
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
            agent_cell(agent),
            _na(getattr(r, "tick", None)),
            *([_round_cell(getattr(r, "round", None))] if experiment else []),
        ]
        if experiment:
            sub = _na(getattr(r, "run_id", None))
            cells += [{"text": sub, "href": href(base, e.rel, f"xrun-{sub}.html")} if sub else "–",
                      _na(getattr(r, "stage", None)) or "–"]  # fmt: skip
        lat = _na(getattr(r, "latency", None))
        ttft = _na(getattr(r, "ttft", None))  # (none for a call not streamed)
        outcome = _na(getattr(r, "outcome", None)) or "?"
        ended = _na(getattr(r, "finish_reason", None))  # (runs before the column: none)
        shown = f"ok · {REPLY_KINDS.get(ended, ended)}" if outcome == "ok" and ended else outcome
        cells += [
            None if start is None else round(float(start) - float(t0 or 0), 3),
            None if lat is None else round(float(lat), 3),
            None if ttft is None else round(float(ttft), 3),
            _na(getattr(r, "total_tokens", None)),
            {"text": shown, "cls": "ok" if outcome == "ok" else "bad"},
            {"text": "show", "details": io, "id": None} if io else "not recorded",
        ]
        rows.append({"id": f"c-{rid}", "cells": cells})
    return rows


#: the numeric columns of a calls table (right-aligned)
CALL_NUMERIC = {"tick", "iteration", "round", "start (s)", "latency (s)", "TTFT (s)", "tokens"}


def tick_headings(experiment: bool) -> list[str]:
    """The headings of the ``tick`` column and what follows it in a calls or messages
    table. An experiment's ``tick`` holds the workflow iteration, not a society's tick:
    "iteration", then the discussion ``round`` (titling the iteration "round" showed a
    round-2 discussion call, and every recruitment call, as round 1)."""
    return ["iteration", "round"] if experiment else ["tick"]


def _round_cell(value: Any) -> Any:
    """A call's discussion round; "–" for a call outside the discussion (recruitment,
    execution, evaluation: no round)."""
    v = _na(value)
    return "–" if v is None else v


def _calls_columns(experiment: bool) -> list[str]:
    return ["request", "agent", *tick_headings(experiment),
            *(["run", "stage"] if experiment else []),
            "start (s)", "latency (s)", "TTFT (s)", "tokens", "outcome", "prompt & reply"]  # fmt: skip


def _io_note(run: Any) -> str | None:
    if "llm_io" in set(run.dataset_names()):
        return None
    return ("prompts and replies were not recorded for this run: set AGENTLAB_LLM_IO=1 "
            "(or RunServices(llm_io=True)) before the run to record them")  # fmt: skip


def _message_rows(
    site: Site, e: Entry, path: str, msgs: Any, idx: Any, link_of: Any, experiment: bool,
    agent_cell: Any,
) -> list[Any]:  # fmt: skip
    base = site.base(path)
    call_of = data.message_calls(idx)
    # a message has no round of its own: the round of the call that wrote it
    rounds = dict(zip(idx["request_id"], idx["round"], strict=True)) if "round" in idx else {}
    rows = []
    for r in msgs.itertuples(index=False):
        receivers = _na(r.receivers) if not hasattr(r.receivers, "tolist") else r.receivers.tolist()
        sender = _na(r.sender)
        sub = _na(getattr(r, "run_id", None)) if experiment else None
        rid = call_of(sender, sub, _na(r.ts), _na(r.tick)) if sender else None
        link = link_of(rid) if rid else None
        cells: list[Any] = [_na(r.tick)]
        if experiment:
            cells.append(_round_cell(rounds.get(rid)))
            cells.append(
                {"text": sub, "href": href(base, e.rel, f"xrun-{sub}.html")} if sub else "–"
            )
        from agentlab.viz.conversation import readable

        cells += [
            _na(r.hub) or "",
            agent_cell(sender),
            ", ".join(map(str, receivers))
            if isinstance(receivers, list | tuple)
            else str(receivers or ""),
            {"text": _cut(readable(_na(r.content)), 1500), "pre": True},
            {"text": "prompt & reply", "href": link} if link else "–",
        ]
        rows.append({"cells": cells})
    return rows
