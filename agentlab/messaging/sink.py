"""Message sinks: where delivered messages are recorded (the run log's ``messages`` dataset).

A hub (or a pipeline) calls ``sink.record(msg, receivers, hub, tick)`` once per delivery
event — one row per message, listing every receiver, not one row per receiver. The replay
sink adapter writes rows in the column layout of the ``messages`` dataset declared in
:mod:`agentlab.store.catalog` (the same layout a ``Society`` writes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from agentlab.messaging.msg import Msg
from agentlab.store import catalog

__all__ = ["ListSink", "MessageSink", "ReplayMessageSink", "message_row"]


@runtime_checkable
class MessageSink(Protocol):
    """Receives one call per delivered message."""

    def record(self, msg: Msg, receivers: Sequence[str], hub: str | None, tick: int | None) -> None:
        """Record that ``msg`` was delivered to ``receivers`` inside ``hub`` at ``tick``."""
        ...


def message_row(
    msg: Msg,
    receivers: Sequence[str],
    hub: str | None,
    tick: int | None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The ``messages`` row for one delivery event (columns: ``agentlab.store.catalog``)."""
    return catalog.message_row(
        msg_id=msg.id,
        sender=msg.sender,
        receivers=receivers,
        hub=hub,
        role=msg.role,
        content=msg.content,
        blocks=msg.blocks_json(),
        tick=tick,
        ts=msg.ts,
        thread=msg.metadata.get("thread") if msg.metadata else None,
        run_id=run_id,
    )


class ListSink:
    """Keeps rows in memory (tests, notebooks without a run directory)."""

    def __init__(self, run_id: str | None = None) -> None:
        self.rows: list[dict[str, Any]] = []
        self.run_id = run_id

    def record(self, msg: Msg, receivers: Sequence[str], hub: str | None, tick: int | None) -> None:
        self.rows.append(message_row(msg, receivers, hub, tick, self.run_id))


class ReplayMessageSink:
    """Adapter from :class:`MessageSink` to a run-log replay sink (``register``/``append``).

    Args:
        replay: an ``agentlab.store`` replay sink (anything with ``register`` and ``append``).
        run_id: stored in every row, so several runs can share one run directory.
        dataset: dataset name (default ``"messages"``).
    """

    def __init__(self, replay: Any, run_id: str | None = None, dataset: str = "messages") -> None:
        self.replay = replay
        self.run_id = run_id
        self.dataset = dataset
        spec = catalog.dataset_spec("messages")
        replay.register(
            dataset, spec.columns, description=spec.description, module="agentlab.messaging"
        )

    def record(self, msg: Msg, receivers: Sequence[str], hub: str | None, tick: int | None) -> None:
        self.replay.append(self.dataset, message_row(msg, receivers, hub, tick, self.run_id))
