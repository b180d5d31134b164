"""``BatchLog``: the rows and spans of one batch, handed to the writers once at its end.

Appending a row to the run log one at a time takes the writer's lock, checks the row's
keys against the dataset's registered columns and copies it; a span also goes through the
tracer's open-span table. At 10k agents that was ~20–30 µs of each agent-step's ~120 µs.
A batch instead collects its ``agent_states``, ``llm_calls`` (and the rare
``llm_attempts`` / ``agent_errors``) rows and its ``llm.call`` spans in plain lists and
writes each list with one ``extend`` when the batch ends, right before the batch's flush.

Nothing is lost that was durable before: rows reached disk only at a flush, and a batch
flushes before it returns (the driver takes log offsets after the last batch). A batch
that is cancelled or raises past its agents writes none of its buffered rows, which is
what a tick that is never committed needs anyway (its rows are cut at resume).

The hot rows (``agent_states``, ``llm_calls``, span rows) are encoded when built
(:meth:`BatchLog.state`, :meth:`BatchLog.call`, :meth:`BatchLog.span`): the dict dies at
once, in cache, and never reaches the cyclic GC, which walked every buffered row again
while the batch ran; the flush joins their bytes (runtime/README.md, "Rows encoded when
built"). The bytes on disk are the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from agentlab.store._writer import encode_row

if TYPE_CHECKING:
    from agentlab.store.replay import ReplaySink
    from agentlab.store.trace import Tracer

__all__ = ["BatchLog", "LogTarget"]


class LogTarget(Protocol):
    """Where a batch's rows and spans go (``runtime.services.RunServices``)."""

    @property
    def replay(self) -> ReplaySink: ...
    @property
    def trace(self) -> Tracer: ...


class BatchLog:
    """Row buffers of one batch (one per dataset) plus its finished span rows.

    Args:
        replay: the sink the rows go to (checks their columns as they are encoded).
    """

    __slots__ = ("_call_keys", "_replay", "_state_keys", "calls", "rows", "spans", "states")

    def __init__(self, replay: ReplaySink) -> None:
        self._replay = replay
        # The key set (``within``) of each hot dataset once the sink found its columns
        # cover it (ReplaySink.covered): columns only grow, so the batch's later rows are
        # encoded without asking the sink again (a call and three lookups per row).
        self._state_keys: frozenset[str] | None = None
        self._call_keys: frozenset[str] | None = None
        # encoded rows (ReplaySink.encode / encode_row): bytes, or a dict orjson refused
        self.states: list[bytes | Mapping[str, Any]] = []  # agent_states
        self.calls: list[bytes | Mapping[str, Any]] = []  # llm_calls
        self.spans: list[bytes | Mapping[str, Any]] = []  # finished span rows
        self.rows: dict[str, list[dict[str, Any]]] = {}  # any other dataset, as dicts

    def state(self, row: dict[str, Any], within: frozenset[str] | None = None) -> None:
        """Buffer an ``agent_states`` row, encoded now; ``within``: every key the row's
        builder can give it (``ReplaySink.encode``)."""
        if within is not None and within is self._state_keys:
            self.states.append(encode_row(row))
            return
        self.states.append(self._replay.encode("agent_states", row, within))
        if within is not None and self._replay.covered("agent_states", within):
            self._state_keys = within

    def call(self, row: dict[str, Any], within: frozenset[str] | None = None) -> None:
        """Buffer an ``llm_calls`` row, encoded now; ``within``: every key the row's
        builder can give it (``ReplaySink.encode``)."""
        if within is not None and within is self._call_keys:
            self.calls.append(encode_row(row))
            return
        self.calls.append(self._replay.encode("llm_calls", row, within))
        if within is not None and self._replay.covered("llm_calls", within):
            self._call_keys = within

    def span(self, row: dict[str, Any]) -> None:
        """Buffer a finished span's row (``Tracer.finish_row`` / ``span_row``), encoded now."""
        self.spans.append(encode_row(row))

    def add(self, dataset: str, row: dict[str, Any]) -> None:
        """Buffer one row of ``dataset`` (do not mutate it afterwards)."""
        if dataset == "llm_calls":
            self.call(row)
        elif dataset == "agent_states":
            self.state(row)
        else:
            self.rows.setdefault(dataset, []).append(row)

    def __len__(self) -> int:
        return (
            len(self.states)
            + len(self.calls)
            + len(self.spans)
            + sum(len(v) for v in self.rows.values())
        )

    def write(self, services: LogTarget) -> None:
        """Hand every buffered row and span to this process's sink and tracer; empties."""
        replay = services.replay
        for dataset, encoded in (("llm_calls", self.calls), ("agent_states", self.states)):
            replay.extend_encoded(dataset, encoded)  # built here and dropped below: no copy
        for dataset, rows in self.rows.items():
            replay.extend(dataset, rows, copy=False)
        if self.spans:
            services.trace.extend(self.spans, copy=False)
        self.states, self.calls, self.spans, self.rows = [], [], [], {}
