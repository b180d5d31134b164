"""The replay datasets a society writes, with their columns (registered at create/open)."""

from __future__ import annotations

from typing import Any

__all__ = ["SOCIETY_DATASETS", "register_society_datasets"]

SOCIETY_DATASETS: dict[str, tuple[str, dict[str, str]]] = {
    "agent_profiles": (
        "one row per agent at creation: id, type, persona name, config",
        {
            "agent_id": "VARCHAR",
            "type": "VARCHAR",
            "name": "VARCHAR",
            "config": "JSON",
            "schema_version": "BIGINT",
        },
    ),
    "agent_states": (
        "one row per agent per committed tick: outcome, attempts, the agent's summary()",
        {
            "agent_id": "VARCHAR",
            "type": "VARCHAR",
            "tick": "BIGINT",
            "ok": "BOOLEAN",
            "attempts": "BIGINT",
            "summary": "JSON",
        },
    ),
    "agent_errors": (
        "one row per failed agent-step attempt (retried or final)",
        {
            "agent_id": "VARCHAR",
            "type": "VARCHAR",
            "tick": "BIGINT",
            "attempt": "BIGINT",
            "final": "BOOLEAN",
            "error_class": "VARCHAR",
            "error": "VARCHAR",
        },
    ),
    "batch_failures": (
        "one row per Ray batch attempt lost to a dead worker or node (the tick ran again)",
        {
            "tick": "BIGINT",
            "batch": "BIGINT",
            "attempt": "BIGINT",
            "error_class": "VARCHAR",
            "error": "VARCHAR",
            "ts": "DOUBLE",
        },
    ),
    "timeline": (
        "one row per committed tick: counts, tokens, errors, wall time, limiter state",
        {
            "tick": "BIGINT",
            "ts": "DOUBLE",
            "agents": "BIGINT",
            "steps": "BIGINT",
            "llm_calls": "BIGINT",
            "tokens": "BIGINT",
            "errors": "BIGINT",
            "wall_s": "DOUBLE",
            "aimd_limit": "BIGINT",
            "in_flight": "BIGINT",
            "env_events": "BIGINT",
            "schema_version": "BIGINT",
        },
    ),
    "llm_calls": (
        "every LLM call (CallRecord fields, labels flattened), with run_id and tick",
        {
            "request_id": "VARCHAR",
            "model": "VARCHAR",
            "start": "DOUBLE",
            "end": "DOUBLE",
            "first_token": "DOUBLE",
            "queue_wait": "DOUBLE",
            "agent_id": "VARCHAR",
            "labels": "JSON",
            "prompt_tokens": "BIGINT",
            "completion_tokens": "BIGINT",
            "outcome": "VARCHAR",
            "error": "VARCHAR",
            "attempts": "BIGINT",
            "stream": "BOOLEAN",
            "schema_version": "BIGINT",
            "stage": "VARCHAR",
            "iteration": "BIGINT",
            "round": "BIGINT",
            "sender": "VARCHAR",
            "receiver_role": "VARCHAR",
            "run_id": "VARCHAR",
            "tick": "BIGINT",
        },
    ),
    "env_events": (
        "events emitted by env modules (drained after every tick)",
        {
            "env": "VARCHAR",
            "event": "VARCHAR",
            "tick": "BIGINT",
            "seq": "BIGINT",
            "schema_version": "BIGINT",
        },
    ),
    "messages": (
        "agent messages: env events that carry text (feed posts, replies), one row each",
        {
            "msg_id": "VARCHAR",
            "sender": "VARCHAR",
            "receivers": "JSON",
            "hub": "VARCHAR",
            "thread": "VARCHAR",
            "role": "VARCHAR",
            "content": "VARCHAR",
            "tick": "BIGINT",
            "ts": "DOUBLE",
        },
    ),
}


def messages_from_events(events: list[dict[str, Any]], tick: int, ts: float) -> list[dict]:
    """Rows of the ``messages`` dataset for the env events that carry text.

    An event is a message when it has an ``agent_id`` (the sender) and a ``content`` string:
    the hub is the env module, the thread the post it replies to (or itself), receivers
    the event's ``receivers`` if the module names them, else everyone on that hub.
    """
    rows = []
    for e in events:
        content = e.get("content")
        if not isinstance(content, str) or not e.get("agent_id"):
            continue
        msg_id = str(e.get("post_id") or e.get("msg_id") or f"{e.get('env')}-{e.get('seq')}")
        rows.append(
            {
                "msg_id": msg_id,
                "sender": e["agent_id"],
                "receivers": e.get("receivers") or ["*"],
                "hub": str(e.get("env") or "env"),
                "thread": str(e.get("reply_to") or msg_id),
                "role": str(e.get("event") or "message"),
                "content": content,
                "tick": e.get("tick", tick),
                "ts": ts,
            }
        )
    return rows


def register_society_datasets(sink: Any) -> None:
    """Declare every society dataset in ``replay/_schema.json``."""
    for name, (description, columns) in SOCIETY_DATASETS.items():
        sink.register(name, columns, description=description, module="agentlab.runtime")
