"""The ``thread_events`` dataset (columns in ``agentlab.store.catalog``): one row per step.

Events: ``delivery`` (a queued resumption was consumed), ``drop`` (duplicate, late or for a
closed thread), ``deferred``, ``slice`` (one completion finished; ``detail`` has timing and
sizes), ``interrupt``, ``dispatch`` (a tool call was started), ``suspend`` (the thread now
waits on a tool call), ``compaction``, ``error``, ``redispatch`` (recovery).
"""

from __future__ import annotations

import os
from typing import Any

from agentlab.core.clock import Clock
from agentlab.store import catalog

__all__ = ["DATASET", "ThreadLog"]

DATASET = "thread_events"


class ThreadLog:
    """Writes ``thread_events`` rows through the run's replay sink (no-op without a run).

    Args:
        run_dir: run directory, or ``None`` to record nothing.
        clock: timestamps.
        mode: ``"local"`` or ``"step"`` (stored on every row).
    """

    def __init__(self, run_dir: str | os.PathLike[str] | None, clock: Clock, mode: str) -> None:
        self.clock, self.mode = clock, mode
        self._sink: Any = None
        if run_dir is not None:
            from agentlab.store.replay import get_replay_sink

            self._sink = get_replay_sink(run_dir)
            catalog.register(self._sink, [DATASET], module=__name__)
        #: whether rows are recorded (an attribute, not a property: read on every slice)
        self.enabled = self._sink is not None

    def emit(
        self,
        event: str,
        thread_id: str,
        *,
        kind: str | None = None,
        dedup_id: str | None = None,
        call_id: str | None = None,
        tool: str | None = None,
        **detail: Any,
    ) -> None:
        """Record one event (cheap: encodes and buffers)."""
        if self._sink is None:
            return
        self._sink.append(
            DATASET,
            {
                "ts": self.clock.now(),
                "thread_id": thread_id,
                "event": event,
                "kind": kind,
                "dedup_id": dedup_id,
                "call_id": call_id,
                "tool": tool,
                "mode": self.mode,
                "detail": detail or None,
                "schema_version": 1,
            },
        )

    def flush(self) -> None:
        """Make buffered rows durable."""
        if self._sink is not None:
            self._sink.flush()
