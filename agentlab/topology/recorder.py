"""Recording: every LLM call and message of an experiment, in memory and in the run log.

``RecordingClient`` wraps an ``LLMClient`` and hands each call record (successful or
failed) to the :class:`Recorder`, which keeps the rows for ``exp.results`` and appends them
to the run directory's ``llm_calls``/``messages``/``server_metrics``/``process_metrics``
datasets. ``sample_metrics`` polls the backend in *clock* time (virtual seconds under the
virtual clock) and the process (CPU, RSS) at most every ``process_every_s`` wall seconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Sequence
from typing import Any

from agentlab.core.clock import Clock
from agentlab.core.records import CallRecord, LLMResponse
from agentlab.errors import LLMError
from agentlab.messaging import Msg, message_row

__all__ = ["LABEL_COLUMNS", "Recorder", "RecordingClient", "call_row", "sample_metrics"]

SCHEMA_VERSION = 1
#: labels flattened into their own ``llm_calls`` columns
LABEL_COLUMNS = (
    "stage", "iteration", "round", "sender", "receiver_role", "receiver", "topology",
    "run_id", "task_id",
)  # fmt: skip
_CALL_TYPES = {
    "request_id": "VARCHAR", "model": "VARCHAR", "start": "DOUBLE", "end": "DOUBLE",
    "first_token": "DOUBLE", "queue_wait": "DOUBLE", "agent_id": "VARCHAR", "labels": "JSON",
    "prompt_tokens": "BIGINT", "completion_tokens": "BIGINT", "outcome": "VARCHAR",
    "error": "VARCHAR", "attempts": "BIGINT", "stream": "BOOLEAN", "latency": "DOUBLE",
    "ttft": "DOUBLE", "stage": "VARCHAR", "iteration": "BIGINT", "round": "BIGINT",
    "sender": "VARCHAR", "receiver_role": "VARCHAR", "receiver": "VARCHAR",
    "topology": "VARCHAR", "run_id": "VARCHAR", "task_id": "VARCHAR", "tick": "BIGINT",
    "schema_version": "BIGINT",
}  # fmt: skip


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(CallRecord))


def call_row(rec: CallRecord) -> dict[str, Any]:
    """The ``llm_calls`` row of a record: its fields, labels flattened, latency and TTFT."""
    # Field access instead of CallRecord.to_dict(): dataclasses.asdict deep-copies and was
    # the largest cost per call in a 30k-call study.
    row = {f: getattr(rec, f) for f in _RECORD_FIELDS}
    labels = row["labels"] = dict(rec.labels)
    for k in LABEL_COLUMNS:
        row[k] = labels.get(k)
    row["tick"] = labels.get("iteration")
    row["latency"] = rec.latency
    row["ttft"] = rec.ttft
    return row


class Recorder:
    """Collects rows in memory and, if ``replay`` is given, appends them to the run log."""

    def __init__(self, replay: Any | None = None) -> None:
        self.replay = replay
        self.calls: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.server: list[dict[str, Any]] = []
        self.process: list[dict[str, Any]] = []
        if replay is not None:
            replay.register("llm_calls", _CALL_TYPES, description="one row per LLM call",
                            module=__name__)  # fmt: skip

    def _out(self, dataset: str, rows: list[dict[str, Any]], row: dict[str, Any]) -> None:
        rows.append(row)
        if self.replay is not None:
            self.replay.append(dataset, row)

    def on_call(self, rec: CallRecord) -> None:
        """Record one LLM call."""
        self._out("llm_calls", self.calls, call_row(rec))

    def sink_for(self, run_id: str) -> _RunSink:
        """A message sink that stamps ``run_id`` on every row."""
        return _RunSink(self, run_id)


class _RunSink:
    def __init__(self, rec: Recorder, run_id: str) -> None:
        self.rec, self.run_id = rec, run_id

    def record(self, msg: Msg, receivers: Sequence[str], hub: str | None, tick: int | None) -> None:
        row = message_row(msg, receivers, hub, tick, self.run_id)
        self.rec._out("messages", self.rec.messages, row)


class RecordingClient:
    """An ``LLMClient`` look-alike that reports every call record to a :class:`Recorder`."""

    def __init__(self, client: Any, recorder: Recorder) -> None:
        self.client, self.recorder = client, recorder

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> LLMResponse:
        try:
            resp: LLMResponse = await self.client.complete(messages, **kwargs)
        except LLMError as exc:
            rec = getattr(exc, "record", None)
            if isinstance(rec, CallRecord):
                self.recorder.on_call(rec)  # failures are traffic too
            raise
        self.recorder.on_call(resp.record)
        return resp


def _process_sample(proc: Any) -> dict[str, Any]:
    mem = proc.memory_info()
    return {"cpu_percent": proc.cpu_percent(None), "rss_bytes": mem.rss, "pid": os.getpid()}


async def sample_metrics(
    client: Any,
    clock: Clock,
    recorder: Recorder,
    state: dict[str, Any],
    interval: float = 1.0,
    process_every_s: float = 0.5,
) -> None:
    """Sample server metrics every ``interval`` clock seconds until cancelled.

    ``state["topology"]`` (set by the experiment) is stamped on each row so the backend
    series can be split per topology.
    """
    import psutil

    proc = psutil.Process()
    proc.cpu_percent(None)  # first call primes the counter
    last_wall = 0.0
    while True:
        now = clock.now()
        row = {"ts": now, "topology": state.get("topology"), "schema_version": SCHEMA_VERSION}
        row.update(client.server_metrics())
        recorder._out("server_metrics", recorder.server, row)
        wall = time.monotonic()
        if wall - last_wall >= process_every_s:
            last_wall = wall
            prow = {"ts": now, "wall": time.time(), "topology": state.get("topology"),
                    "schema_version": SCHEMA_VERSION, **_process_sample(proc)}  # fmt: skip
            recorder._out("process_metrics", recorder.process, prow)
        try:
            await clock.sleep(interval)
        except asyncio.CancelledError:
            return
