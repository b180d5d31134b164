"""Message shapes: synthetic event pairs, runtime tool schemas, an OpenAI-rules validator.

A chat conversation allows exactly one result per tool call, right after the call, so an
event that arrives later (a message from another thread, a timer, a second chunk of a
streamed tool result) cannot be appended as a free-standing message. It is delivered as a
*synthetic pair*: an assistant message that calls the runtime tool ``receive_event`` with
no arguments, immediately answered by a tool message carrying the event::

    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "evt_<16 hex>", "type": "function",
                     "function": {"name": "receive_event", "arguments": "{}"}}]}
    {"role": "tool", "tool_call_id": "evt_<16 hex>",
     "content": "{\\"kind\\":\\"message\\",\\"from\\":\\"b\\",\\"content\\":\\"hi\\"}"}

The id is derived from the thread id and the delivery's dedup id (deterministic, so replays
and step mode produce identical histories; ``[A-Za-z0-9_]`` only, which every provider
accepts). ``receive_event`` is also offered to the model as a real tool: calling it suspends
the thread until the next event, which then answers that call directly.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from agentlab.core.tools import function_tool, object_parameters, tool_message
from agentlab.errors import ConfigError

__all__ = [
    "RECEIVE_EVENT",
    "RUNTIME_TOOLS",
    "event_content",
    "runtime_tool_schemas",
    "synthetic_pair",
    "validate_openai_messages",
]

RECEIVE_EVENT = "receive_event"


def _fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return function_tool(name, description, object_parameters(props, required))


#: tools the runtime itself implements (offered to every thread when ``agent_tools=True``)
RUNTIME_TOOLS: dict[str, dict[str, Any]] = {
    RECEIVE_EVENT: _fn(RECEIVE_EVENT, "Wait for the next event or message.", {}, []),
    "send_message": _fn(
        "send_message",
        "Send a text message to another agent thread.",
        {"to": {"type": "string"}, "text": {"type": "string"}},
        ["to", "text"],
    ),
    "spawn_agent": _fn(
        "spawn_agent",
        "Start a child agent thread with a task; returns its id.",
        {"task": {"type": "string"}},
        ["task"],
    ),
    "report": _fn(
        "report",
        "Report a result to the parent thread.",
        {"text": {"type": "string"}},
        ["text"],
    ),
    "close_agent": _fn("close_agent", "Close a child thread.", {"id": {"type": "string"}}, ["id"]),
}


def runtime_tool_schemas() -> list[dict[str, Any]]:
    """The OpenAI ``tools`` entries of :data:`RUNTIME_TOOLS`."""
    return list(RUNTIME_TOOLS.values())


def _event_id(thread_id: str, dedup_id: str) -> str:
    return "evt_" + hashlib.blake2b(f"{thread_id}\0{dedup_id}".encode(), digest_size=8).hexdigest()


def event_content(kind: str, payload: Any, sender: str | None, **extra: Any) -> str:
    """The tool-message content describing one event (compact JSON text)."""
    body: dict[str, Any] = {"kind": kind}
    if sender is not None:
        body["from"] = sender
    body.update(extra)
    body["content"] = payload
    return orjson.dumps(body).decode()


def synthetic_pair(thread_id: str, dedup_id: str, content: str) -> list[dict[str, Any]]:
    """The assistant ``receive_event`` call and its tool answer (see module docstring)."""
    cid = _event_id(thread_id, dedup_id)
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": cid,
                    "type": "function",
                    "function": {"name": RECEIVE_EVENT, "arguments": "{}"},
                }
            ],
        },
        tool_message(cid, content),
    ]


_ROLES = {"system", "developer", "user", "assistant", "tool"}


def _fail(i: int, msg: str) -> None:
    raise ConfigError(f"message {i}: {msg}")


def _check_tool_calls(i: int, calls: Any, seen_ids: set[str]) -> list[str]:
    if not isinstance(calls, list) or not calls:
        _fail(i, "tool_calls must be a non-empty list")
    ids: list[str] = []
    for c in calls:
        if not isinstance(c, dict) or c.get("type") != "function":
            _fail(i, f"tool call {c!r} must be a dict with type 'function'")
        cid, fn = c.get("id"), c.get("function")
        if not isinstance(cid, str) or not cid:
            _fail(i, f"tool call id {cid!r} must be a non-empty string")
        if cid in seen_ids:
            _fail(i, f"tool call id {cid!r} is used twice in the conversation")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            _fail(i, f"tool call {cid!r} needs function.name")
        args = fn.get("arguments")
        try:
            parsed = orjson.loads(args) if isinstance(args, str) else None
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            _fail(i, f"tool call {cid!r}: arguments must be a JSON object string, got {args!r}")
        seen_ids.add(cid)
        ids.append(cid)
    return ids


def validate_openai_messages(
    messages: list[dict[str, Any]], *, allow_pending: bool = False
) -> None:
    """Raise :class:`~agentlab.errors.ConfigError` unless ``messages`` obey the OpenAI rules.

    Rules: known roles; string content (``None`` only for an assistant message with tool
    calls); tool-call ids unique, arguments a JSON-object string; the tool messages
    answering an assistant's calls come immediately after it, answer each id exactly once
    and nothing else. ``allow_pending`` accepts unanswered calls at the very end (a
    suspended history; it must be completed before it is sent to a model).
    """
    seen_ids: set[str] = set()
    open_ids: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in _ROLES:
            _fail(i, f"unknown role {role!r}; valid: {sorted(_ROLES)}")
        content = m.get("content")
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid not in open_ids:
                _fail(i, f"tool message answers {cid!r}, which is not an open tool call")
            if not isinstance(content, str):
                _fail(i, "tool message content must be a string")
            open_ids.discard(cid)
            continue
        if open_ids:
            _fail(i, f"{role} message before tool calls {sorted(open_ids)} were answered")
        if role == "assistant":
            if m.get("tool_calls") is not None:
                open_ids = set(_check_tool_calls(i, m["tool_calls"], seen_ids))
                if content is not None and not isinstance(content, str):
                    _fail(i, "assistant content must be a string or None")
            elif not isinstance(content, str):
                _fail(i, "assistant message without tool_calls needs string content")
        elif not isinstance(content, str | list):
            _fail(i, f"{role} message content must be a string or a list of parts")
    if open_ids and not allow_pending:
        _fail(len(messages), f"conversation ends with unanswered tool calls {sorted(open_ids)}")
