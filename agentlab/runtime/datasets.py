"""The replay datasets a society writes (declared in :mod:`agentlab.store.catalog`)."""

from __future__ import annotations

from typing import Any

from agentlab.store import catalog

__all__ = ["SOCIETY_DATASETS", "messages_from_events", "register_society_datasets"]

#: the catalogued datasets a society registers at create/open
SOCIETY_DATASETS: tuple[str, ...] = (
    "agent_profiles",
    "agent_states",
    "agent_errors",
    "batch_failures",
    "timeline",
    "llm_calls",
    "llm_attempts",
    "env_events",
    "env_requests",
    "messages",
)


def messages_from_events(
    events: list[dict[str, Any]], tick: int, ts: float, run_id: str | None = None
) -> list[dict[str, Any]]:
    """Rows of the ``messages`` dataset for the env events that carry text.

    An event is a message when it has an ``agent_id`` (the sender) and a ``content`` string:
    the hub is the env module, the thread the post it replies to (or itself), receivers
    the event's ``receivers`` if the module names them, else everyone on that hub (``*``).
    """
    rows = []
    for e in events:
        content = e.get("content")
        if not isinstance(content, str) or not e.get("agent_id"):
            continue
        msg_id = str(e.get("post_id") or e.get("msg_id") or f"{e.get('env')}-{e.get('seq')}")
        rows.append(
            catalog.message_row(
                msg_id=msg_id,
                sender=e["agent_id"],
                receivers=e.get("receivers") or ["*"],
                hub=str(e.get("env") or "env"),
                thread=str(e.get("reply_to") or msg_id),
                role=str(e.get("event") or "message"),
                content=content,
                tick=e.get("tick", tick),
                ts=ts,
                run_id=run_id,
            )
        )
    return rows


def register_society_datasets(sink: Any) -> None:
    """Declare every society dataset in ``replay/_schema.json``."""
    catalog.register(sink, SOCIETY_DATASETS, module="agentlab.runtime")
