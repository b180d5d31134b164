"""ConversationView: messages as they happen, grouped by hub, with filters and span links.

Follows the ``messages`` dataset. Messages are normalised to small JSON dicts (content
capped, structured blocks and tool calls summarised) and synced as snapshot + delta lists.
Filtering by hub, agent and role and text search happen in the browser over what is loaded.
Clicking a message's span link asks Python for the trace span, which is read from
``<run>/trace/*.jsonl`` and shown in a details panel.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import traitlets as t

from agentlab.viz._base import LiveWidget, load_css, load_esm
from agentlab.viz._follow import Journal
from agentlab.viz._static import card, esc

__all__ = ["ConversationModel", "ConversationView", "find_span", "readable"]

MAX_CONTENT = 4000
MAX_BLOCK = 300


def _loads(value: Any) -> Any:
    if isinstance(value, str | bytes):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _short(value: Any, limit: int = MAX_BLOCK) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _blocks(raw: Any) -> list[dict[str, str]]:
    """Compact view of structured blocks: ``{kind, name, text}`` each (never rendered as HTML)."""
    blocks = _loads(raw)
    if blocks is None or blocks == "":
        return []
    if not isinstance(blocks, list):
        blocks = [blocks]
    out = []
    for b in blocks[:20]:
        if not isinstance(b, dict):
            out.append({"kind": "data", "name": "", "text": _short(b)})
            continue
        kind = str(b.get("type") or b.get("kind") or "data")
        if kind == "text":
            continue  # already in content
        name = str(b.get("name") or b.get("tool") or "")
        body = {k: v for k, v in b.items() if k not in ("type", "kind", "name", "tool", "id")}
        if set(body) == {"input"} or set(body) == {"arguments"} or set(body) == {"output"}:
            body = next(iter(body.values()))
        out.append({"kind": kind, "name": name, "text": _short(body)})
    return out


def readable(value: Any) -> str:
    """Structured content as text a person reads: a JSON object becomes ``key: value``
    lines (nested values as compact JSON), a list of blocks its text parts; plain text
    stays as it is."""
    if isinstance(value, bytes):
        value = _loads(value)
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
            parsed = _loads(stripped)
            if isinstance(parsed, dict | list):
                value = parsed
    if value is None:
        return ""
    if isinstance(value, list):
        if all(isinstance(b, dict) and "text" in b for b in value):
            return "\n".join(str(b["text"]) for b in value if b.get("text"))
        return "\n".join(readable(v) for v in value)
    if isinstance(value, dict):
        lines = []
        for k, v in value.items():
            if isinstance(v, str):
                text = v
            elif isinstance(v, dict | list):
                text = json.dumps(v, default=str, ensure_ascii=False)
            else:
                text = str(v)
            lines.append(f"{k}: {text}")
        return "\n".join(lines)
    return str(value)


def _text(content: Any) -> str:
    text = readable(content)
    return text if len(text) <= MAX_CONTENT else text[: MAX_CONTENT - 1] + "…"


class ConversationModel:
    """Normalises ``messages`` rows and keeps facets (hubs, senders, roles) for filters.

    Args:
        max_messages: messages kept (older ones drop out of the view, never out of the log).
        snapshot_interval: seconds between full snapshots.
    """

    def __init__(self, max_messages: int = 1000, snapshot_interval: float = 2.0) -> None:
        self.journal: Journal[dict[str, Any]] = Journal(
            max_messages, snapshot_interval, max_delta=300
        )
        self.hubs: Counter[str] = Counter()
        self.senders: Counter[str] = Counter()
        self.roles: Counter[str] = Counter()
        #: the run ids seen (an experiment's messages name their run: with more than one,
        #: each message says whose it is, as the runs of a parallel study interleave)
        self.runs: set[str] = set()

    def normalise_thread_event(self, row: dict[str, Any], key: int) -> dict[str, Any]:
        """One ``thread_events`` row (an ``AgentSystem`` step) → a message-like dict."""
        detail = _loads(row.get("detail"))
        who = row.get("tool") or row.get("kind") or "thread"
        return {
            "k": key,
            "msg_id": str(row.get("dedup_id") or row.get("call_id") or ""),
            "sender": str(who),
            "receivers": [],
            "hub": str(row.get("thread_id") or "(thread)"),
            "run": "",
            "role": str(row.get("event") or ""),
            "content": _text(detail if detail not in ({}, None) else ""),
            "blocks": [],
            "tick": None,
            "ts": row.get("ts"),
            "span_id": "",
            "trace_id": "",
        }

    def normalise(self, row: dict[str, Any], key: int) -> dict[str, Any]:
        """One message row → the JSON dict the browser renders (all values plain text)."""
        if "thread_id" in row and "event" in row and "sender" not in row:
            return self.normalise_thread_event(row, key)
        receivers = _loads(row.get("receivers"))
        if receivers is None:
            receivers = []
        elif not isinstance(receivers, list):
            receivers = [receivers]
        blocks = _blocks(row.get("blocks"))
        for tc in _loads(row.get("tool_calls")) or []:
            if isinstance(tc, dict):
                fn: dict[str, Any] = tc["function"] if isinstance(tc.get("function"), dict) else tc
                blocks.append(
                    {
                        "kind": "tool_call",
                        "name": str(fn.get("name", "")),
                        "text": _short(_loads(fn.get("arguments", ""))),
                    }
                )
        return {
            "k": key,
            "msg_id": str(row.get("msg_id") or ""),
            "sender": str(row.get("sender") or ""),
            "receivers": [str(r) for r in receivers][:20],
            "hub": str(row.get("hub") or row.get("thread") or "(direct)"),
            "run": str(row.get("run_id") or ""),
            "role": str(row.get("role") or ""),
            "content": _text(row.get("content")),
            "blocks": blocks,
            "tick": row.get("tick"),
            "ts": row.get("ts"),
            "span_id": str(row.get("span_id") or ""),
            "trace_id": str(row.get("trace_id") or ""),
        }

    def locate(self, msg_id: str) -> dict[str, Any]:
        """``sender``, ``tick``, ``role`` and ``nth`` (its place among that sender's
        messages of that role in that tick) of a held message, for :func:`find_span`."""
        seen: Counter[tuple[str, Any, str]] = Counter()
        for m in self.journal.items:
            key = (m["sender"], m["tick"], m["role"])
            if m["msg_id"] == msg_id:
                tick = m["tick"] if isinstance(m["tick"], int) else None
                return {"sender": m["sender"], "tick": tick, "role": m["role"], "nth": seen[key]}
            seen[key] += 1
        return {}

    def ingest(self, rows: list[dict[str, Any]]) -> bool:
        """Add message rows; returns whether anything changed."""
        msgs = [self.normalise(r, self.journal.count + i) for i, r in enumerate(rows)]
        for m in msgs:
            self.hubs[m["hub"]] += 1
            self.senders[m["sender"]] += 1
            self.roles[m["role"]] += 1
            self.runs.add(m["run"])
        self.runs.discard("")
        return self.journal.extend(msgs) > 0

    def facets(self) -> dict[str, Any]:
        """Counts per hub, sender and role (for the filter controls), and how many runs
        the messages come from."""
        return {
            "hubs": dict(self.hubs.most_common(200)),
            "senders": sorted(self.senders)[:500],
            "roles": sorted(self.roles),
            "runs": len(self.runs),
        }

    def frame(self, force_snapshot: bool = False) -> dict[str, Any]:
        """Trait values of one frame."""
        base, delta = self.journal.frame(force_snapshot)
        traits: dict[str, Any] = {
            "msgs_delta": delta,
            "facets": self.facets(),
            "total": self.journal.count,
        }
        if base is not None:
            traits["msgs_base"] = base
        return traits


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    a = span.get("attributes", span.get("attrs"))  # the tracer writes "attributes"
    return a if isinstance(a, dict) else {}


def _spans(run_dir: str | os.PathLike[str], needles: list[bytes]) -> Iterator[dict[str, Any]]:
    """Spans of ``trace/*.jsonl`` whose line holds every needle (a cheap byte test first)."""
    folder = Path(run_dir) / "trace"
    try:
        names = sorted(p for p in folder.iterdir() if p.suffix == ".jsonl")
    except FileNotFoundError:
        return
    for path in names:
        with open(path, "rb") as f:
            for line in f:
                if not all(n in line for n in needles):
                    continue
                try:
                    span = json.loads(line)
                except ValueError:
                    continue
                if isinstance(span, dict):
                    yield span


def find_span(
    run_dir: str | os.PathLike[str],
    span_id: str = "",
    msg_id: str = "",
    *,
    sender: str = "",
    tick: int | None = None,
    role: str = "",
    nth: int = 0,
) -> dict:
    """The trace span of a message, else ``{}``.

    Looked up by ``span_id``, else a span whose attributes name ``msg_id``, else (society
    messages carry neither) the ``nth`` tool call named ``role`` (``post``, ...) by
    ``sender`` in ``tick``: the ``env.tool`` span that wrote it, with the agent's
    ``llm.call`` span that asked for it (the last one before it) under ``"llm_call"``.
    """
    if span_id:
        for span in _spans(run_dir, [span_id.encode()]):
            if span.get("span_id") == span_id:
                return span
    if msg_id:
        for span in _spans(run_dir, [msg_id.encode()]):
            if _attrs(span).get("msg_id") == msg_id:
                return span
    if not sender or tick is None:
        return {}
    mine = [
        s
        for s in _spans(run_dir, [json.dumps(sender).encode()])
        if _attrs(s).get("agentlab.tick", _attrs(s).get("tick")) == tick
        and sender in (_attrs(s).get("agent_id"), _attrs(s).get("gen_ai.agent.id"))
    ]
    mine.sort(key=lambda s: float(s.get("start") or 0.0))
    tools = [
        s
        for s in mine
        if s.get("name") in ("env.tool", "execute_tool")
        and (not role or role in (_attrs(s).get("tool"), _attrs(s).get("gen_ai.tool.name")))
    ]
    if not tools:
        return {}
    found = dict(tools[min(nth, len(tools) - 1)])
    asked = [
        s
        for s in mine
        if s.get("name") in ("llm.call", "chat")
        and float(s.get("start") or 0.0) <= float(found.get("start") or 0.0)
    ]
    if asked:
        found["llm_call"] = asked[-1]
    return found


class ConversationView(LiveWidget):
    """Messages grouped by hub/thread; filter by agent or role; search; span details.

    Args:
        run: run directory, store ``Run`` or ``Society``.
        max_messages: messages kept in the view.
        dataset: ``"messages"`` (agents' messages) or ``"thread_events"`` (the steps of
            an ``AgentSystem``'s threads, one hub per thread).
        **kwargs: see :class:`~agentlab.viz._base.LiveWidget`.
    """

    _esm = load_esm("conversation_view.js")
    _css = load_css()

    datasets = ("messages",)
    msgs_base: t.List[Any] = t.List().tag(sync=True)
    msgs_delta: t.List[Any] = t.List().tag(sync=True)
    facets = t.Dict().tag(sync=True)
    total = t.Int(0).tag(sync=True)
    span_detail = t.Dict().tag(sync=True)

    def __init__(
        self, run: Any, *, max_messages: int = 1000, dataset: str = "messages", **kwargs: Any
    ) -> None:
        if dataset not in ("messages", "thread_events"):
            from agentlab.errors import ConfigError

            raise ConfigError(f"dataset={dataset!r}; valid: 'messages', 'thread_events'")
        self.datasets = (dataset,)  # type: ignore[misc]  # per instance: which log
        self._model = ConversationModel(max_messages)
        super().__init__(run, **kwargs)

    def _ingest(self, dataset: str, rows: list[dict[str, Any]]) -> bool:
        return self._model.ingest(rows)

    def _frame(self) -> dict[str, Any]:
        return self._model.frame()

    def _on_front_msg(self, msg: dict[str, Any]) -> None:
        if msg.get("type") != "span":
            return
        span_id, msg_id = str(msg.get("span_id") or ""), str(msg.get("msg_id") or "")
        span = find_span(self.run_dir, span_id, msg_id, **self._model.locate(msg_id))
        self.span_detail = {
            "query": span_id or msg_id,
            "found": bool(span),
            "text": json.dumps(span, indent=1, default=str, sort_keys=True)[:20000],
        }

    # --- static form -------------------------------------------------------------------

    def _text(self) -> str:
        hubs = ", ".join(f"{h} ({n})" for h, n in list(self._model.hubs.most_common())[:5])
        runs = f" from {len(self._model.runs)} runs" if len(self._model.runs) > 1 else ""
        return (f"ConversationView {self.run_dir}: {self.total} messages{runs}; "
                f"hubs: {hubs or '–'}")  # fmt: skip

    def _static_html(self, last: int = 40) -> str:
        msgs = list(self._model.journal.items)[-last:]
        runs = len(self._model.runs) > 1
        rows = []
        for m in msgs:
            to = ", ".join(m["receivers"][:5])
            meta = " · ".join(
                x
                for x in (
                    m["run"] if runs else "",
                    m["hub"],
                    f"tick {m['tick']}" if m["tick"] is not None else "",
                    m["role"],
                    f"→ {to}" if to else "",
                )
                if x
            )
            blocks = "".join(
                f'<div style="color:#555;font-size:11px">[{esc(b["kind"])}'
                f"{' ' + esc(b['name']) if b['name'] else ''}] {esc(b['text'])}</div>"
                for b in m["blocks"]
            )
            rows.append(
                '<div style="border-top:1px solid #eee;padding:2px 0">'
                f'<div style="color:#666;font-size:11px"><b style="color:#333">'
                f"{esc(m['sender'])}</b> {esc(meta)}</div>"
                f'<div style="white-space:pre-wrap;word-break:break-word">'
                f"{esc(m['content'][:1500])}</div>{blocks}</div>"
            )
        shown = f"last {len(msgs)} of {self.total}" if self.total > len(msgs) else str(self.total)
        title = "Threads" if self.datasets == ("thread_events",) else "Conversation"
        body = "".join(rows) or '<div style="color:#777">(no messages)</div>'
        return card("conversation", title, f"{shown} messages", body)
