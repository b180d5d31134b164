"""Pure state transitions of a slice: apply one delivery, finish a turn, compact.

Everything here is synchronous and IO-free, so local mode and step mode run literally the
same code and produce the same histories.

A slice is one step of the ReAct loop of :mod:`agentlab.core.tools`, persisted in between:
:func:`finish_turn` is :func:`~agentlab.core.tools.loop_step` (one call kept: one
suspension point per slice) and a tool result arriving as a delivery becomes the loop's
:func:`~agentlab.core.tools.tool_message` (:func:`apply_delivery`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from agentlab.core.records import LLMResponse, ToolCall
from agentlab.core.tools import loop_step, tool_message
from agentlab.runtime.threads.records import Delivery, ThreadState
from agentlab.runtime.threads.shapes import RECEIVE_EVENT, event_content, synthetic_pair

__all__ = [
    "COMPLETE",
    "DEFERRED",
    "INTERRUPTED",
    "NONE",
    "apply_delivery",
    "assistant_turn",
    "compact_messages",
    "finish_turn",
]

COMPLETE, NONE, DEFERRED = "complete", "none", "deferred"
#: content of the tool message answering a call cut short by new user input
INTERRUPTED = "interrupted: the user sent a new message before this tool returned"


def _event_text(d: Delivery) -> str:
    extra: dict[str, Any] = {}
    if d.kind == "tool_result":
        extra = {"call_id": d.call_id, "chunk": d.chunk, "final": d.final}
    return event_content(d.kind, d.payload, d.sender, **extra)


def _flush_deferred(st: ThreadState, out: list[dict[str, Any]]) -> None:
    # callers test st.deferred first: nearly always empty, and this runs on every turn
    for dd in st.deferred:
        d = Delivery.from_dict(dd)
        out.extend(synthetic_pair(st.thread_id, d.dedup_id, _event_text(d)))
    st.deferred.clear()


def apply_delivery(
    st: ThreadState, d: Delivery, out: list[dict[str, Any]], *, seen_window: int = 128
) -> str:
    """Apply ``d`` to ``st``, appending new history messages to ``out``.

    Returns:
        ``"complete"`` (run a completion next), ``"none"`` (state changed, no completion),
        ``"deferred"`` (kept until the pending tool call is answered), or
        ``"drop:<reason>"`` (duplicate, closed, late) — nothing changed.
    """
    if d.dedup_id in st.seen:
        return "drop:duplicate"
    if st.status == "closed":
        return "drop:closed"
    kind = d.kind
    if kind == "tool_result" and d.call_id not in st.pending and d.call_id not in st.streams:
        # Answered already (interrupted, or this is a late copy): the conversation allows
        # one result per call, so the late result is dropped (and logged by the caller).
        return "drop:late"
    st.seen.append(d.dedup_id)
    if len(st.seen) > seen_window:
        del st.seen[: len(st.seen) - seen_window]
    if st.parent is None and kind == "task" and d.sender and st.n_messages == 0:
        st.parent = d.sender

    if kind in ("user", "task"):
        for cid in list(st.pending):
            out.append(tool_message(cid, INTERRUPTED))
        st.pending.clear()
        st.streams.clear()
        if st.deferred:
            _flush_deferred(st, out)
        out.append({"role": "user", "content": d.text()})
        return COMPLETE
    if kind == "close":
        for cid in list(st.pending):
            out.append(tool_message(cid, "closed"))
        st.pending.clear()
        st.streams.clear()
        st.deferred.clear()
        st.status = "closed"
        return NONE
    if kind == "tool_result" and d.call_id in st.pending:
        name = st.pending.pop(d.call_id)["name"]
        out.append(tool_message(d.call_id, d.text()))  # type: ignore[arg-type]
        if not d.final:
            st.streams[d.call_id] = name  # type: ignore[index]
        if st.deferred:
            _flush_deferred(st, out)
        return COMPLETE
    if kind == "tool_result" and d.final:
        st.streams.pop(d.call_id, None)  # type: ignore[arg-type]
    # An asynchronous event (or a later chunk of a stream).
    waiting = [cid for cid, p in st.pending.items() if p["name"] == RECEIVE_EVENT]
    if waiting:
        del st.pending[waiting[0]]
        out.append(tool_message(waiting[0], _event_text(d)))
        return COMPLETE
    if st.pending:
        st.deferred.append(d.to_dict())
        return DEFERRED
    out.extend(synthetic_pair(st.thread_id, d.dedup_id, _event_text(d)))
    return COMPLETE


class _Reply:
    """A streamed completion as :func:`~agentlab.core.tools.loop_step` reads a reply."""

    __slots__ = ("text", "tool_calls")

    def __init__(self, text: str, tool_calls: list[ToolCall]) -> None:
        self.text, self.tool_calls = text, tool_calls


def assistant_turn(reply: _Reply | LLMResponse, calls: list[ToolCall]) -> dict[str, Any]:
    """A thread's assistant turn for ``reply`` (its ``text``) calling ``calls``."""
    text = reply.text
    if not calls:
        return {"role": "assistant", "content": text}
    msg: dict[str, Any] = {"role": "assistant", "content": text or None}
    msg["tool_calls"] = [_call_entry(c) for c in calls]
    return msg


def _call_entry(c: ToolCall) -> dict[str, Any]:
    # ToolCall.to_openai() with orjson (json.dumps is ~5x slower on this hot path).
    fn = {"name": c.name, "arguments": orjson.dumps(c.arguments).decode()}
    return {"id": c.id, "type": "function", "function": fn}


def _interrupted(reply: _Reply, calls: list[ToolCall]) -> bool:
    return True


def finish_turn(
    st: ThreadState, text: str, calls: list[ToolCall], *, partial: bool
) -> tuple[dict[str, Any], ToolCall | None]:
    """The assistant message of a completion and the (at most one) call to dispatch.

    One :func:`~agentlab.core.tools.loop_step` that keeps the answer's turn too (a thread's
    history holds every assistant turn) and only the first tool call: one call per slice
    keeps the suspension point unique (later calls would be answered by the model's next
    turn anyway). A partial (interrupted) completion calls nothing.
    """
    st.completions += 1
    turn: list[dict[str, Any]] = []
    run = loop_step(
        turn,
        _Reply(text, calls),
        assistant_message=assistant_turn,
        stop=_interrupted if partial else None,
        max_calls=1,
        keep_answer=True,
    )
    call: ToolCall | None = run[0] if run else None
    if call is not None:
        st.pending[call.id] = {"name": call.name, "arguments": call.arguments}
    st.status = "waiting" if st.pending else "idle"
    return turn[0], call


def _default_summary(covered: list[dict[str, Any]], limit: int = 600) -> str:
    parts = []
    for m in covered:
        c = m.get("content")
        if isinstance(c, str) and c and m["role"] in ("user", "assistant"):
            parts.append(f"{m['role']}: {c[:80]}")
    return " | ".join(parts)[:limit]


def compact_messages(
    messages: list[dict[str, Any]],
    keep_bytes: int,
    summarize: Callable[[list[dict[str, Any]]], str] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Replace the oldest whole turns by one summary message.

    The cut lands on a user message (a turn boundary), so no tool call is separated from
    its result; leading system messages stay. The kept suffix is about ``keep_bytes`` of
    content.

    Returns:
        ``(new_messages, covered)``; ``covered == 0`` means nothing could be compacted.
    """
    start = 0
    while start < len(messages) and messages[start]["role"] == "system":
        start += 1
    size, cut = 0, None
    for i in range(len(messages) - 1, start, -1):
        size += len(str(messages[i].get("content") or "")) + 64
        if size > keep_bytes:
            break
        if messages[i]["role"] == "user":
            cut = i
    if cut is None or cut <= start + 1:
        return messages, 0
    covered = messages[start:cut]
    text = (summarize or _default_summary)(covered)
    summary = {"role": "user", "content": f"[summary of {len(covered)} earlier messages] {text}"}
    return [*messages[:start], summary, *messages[cut:]], len(covered)
