"""The dataset catalogue: every dataset agentlab writes, declared once.

Each :class:`DatasetSpec` names a dataset's columns and their DuckDB types, a one-line
description and its ``schema_version``. Every writer registers through :func:`register`
(which merges the declaration into ``replay/_schema.json``) and builds its rows with the
builders here (:func:`llm_call_row`, :func:`llm_attempt_rows`, :func:`message_row`), so a
dataset written by a ``Society``, an ``Experiment`` and an ``AgentSystem`` has one column
set and one set of types, and a single SQL query reads all three.

``_shard``/``_seq`` (:data:`ROW_COLUMNS`) are set by the writer on every row; readers hide
them unless asked (``Run.df(..., internal=True)``).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentlab.core.records import CallRecord
from agentlab.errors import UnknownNameError

__all__ = [
    "CATALOG",
    "LABEL_COLUMNS",
    "ROW_COLUMNS",
    "SPAN_COLUMNS",
    "DatasetSpec",
    "attempt_kind",
    "dataset_spec",
    "llm_attempt_rows",
    "llm_call_row",
    "message_row",
    "register",
]

#: implicit columns of every row (set by the writer, hidden by ``Run.df`` unless asked)
ROW_COLUMNS: dict[str, str] = {"_shard": "VARCHAR", "_seq": "BIGINT"}

#: columns of the trace spans (``trace/<shard>.jsonl``)
SPAN_COLUMNS: dict[str, str] = {
    "trace_id": "VARCHAR",
    "span_id": "VARCHAR",
    "parent": "VARCHAR",
    "name": "VARCHAR",
    "kind": "VARCHAR",
    "start": "DOUBLE",
    "end": "DOUBLE",
    "status": "VARCHAR",
    "status_message": "VARCHAR",
    "attributes": "JSON",
    "events": "JSON",
}

#: call labels that get their own ``llm_calls`` column (``NULL`` where a driver has none)
LABEL_COLUMNS: tuple[str, ...] = (
    "stage", "iteration", "round", "turn", "sender", "receiver_role", "receiver",
    "topology", "task_id",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """One dataset: name, description, ``{column: DuckDB type}`` and schema version.

    ``open`` datasets (metrics samples) may carry further columns whose types are inferred
    from the first value written; every other dataset's rows use exactly ``columns``.
    """

    name: str
    description: str
    columns: Mapping[str, str]
    schema_version: int = 1
    open: bool = False


def _spec(name: str, description: str, /, open: bool = False, **columns: str) -> DatasetSpec:
    return DatasetSpec(name, description, {**columns, "schema_version": "BIGINT"}, 1, open)


_V, _B, _D, _F, _J, _L = "VARCHAR", "BIGINT", "DOUBLE", "BOOLEAN", "JSON", "VARCHAR[]"

CATALOG: dict[str, DatasetSpec] = {
    s.name: s
    for s in (
        _spec(
            "llm_calls",
            "one row per LLM call (any driver): timing, tokens, outcome, labels",
            request_id=_V, model=_V, run_id=_V, tick=_B, agent_id=_V,
            start=_D, end=_D, first_token=_D, latency=_D, ttft=_D, queue_wait=_D,
            prompt_tokens=_B, completion_tokens=_B, total_tokens=_B, cached_tokens=_B,
            outcome=_V, finish_reason=_V, error=_V, attempts=_B, stream=_F, labels=_J,
            stage=_V, iteration=_B, round=_B, turn=_B, sender=_V, receiver_role=_V,
            receiver=_V, topology=_V, task_id=_V,
        ),
        _spec(
            "llm_attempts",
            "each attempt of every LLM call retried or failed: ok / rate_limit / timeout / "
            "malformed / error (a first-attempt success is only its llm_calls row)",
            request_id=_V, attempt=_B, kind=_V, error_class=_V, error=_V, start=_D, end=_D,
            latency=_D, model=_V, agent_id=_V, run_id=_V, tick=_B,
        ),
        _spec(
            "messages",
            "one row per delivered message: sender, receivers, hub, thread, content",
            msg_id=_V, sender=_V, receivers=_L, hub=_V, thread=_V, role=_V, content=_V,
            blocks=_J, tick=_B, ts=_D, bytes=_B, run_id=_V,
        ),
        _spec(
            "llm_io",
            "prompt and reply of each LLM call, when the run records them (RunServices "
            "llm_io=True or AGENTLAB_LLM_IO=1); request_id links the llm_calls row",
            request_id=_V, run_id=_V, tick=_B, agent_id=_V, messages=_J, reply=_V,
            tool_calls=_J, error=_V,
        ),
        _spec(
            "agent_profiles",
            "one row per agent at creation: id, type, persona name, config",
            agent_id=_V, type=_V, name=_V, config=_J,
        ),
        _spec(
            "agent_states",
            "one row per agent per committed tick: outcome, attempts, the agent's summary()",
            agent_id=_V, type=_V, tick=_B, ok=_F, attempts=_B, summary=_J,
        ),
        _spec(
            "agent_errors",
            "one row per failed agent-step attempt (retried or final)",
            agent_id=_V, type=_V, tick=_B, attempt=_B, final=_F, error_class=_V, error=_V,
            traceback=_V,
        ),
        _spec(
            "batch_failures",
            "one row per Ray batch attempt lost to a dead worker or node (the tick ran again)",
            tick=_B, batch=_B, attempt=_B, error_class=_V, error=_V, ts=_D,
        ),
        _spec(
            "timeline",
            "one row per committed tick: counts, tokens, errors, wall time, limiter state, "
            "the mean latency of its answered LLM calls",
            tick=_B, ts=_D, agents=_B, steps=_B, llm_calls=_B, tokens=_B, errors=_B,
            wall_s=_D, aimd_limit=_B, in_flight=_B, latency_mean_s=_D, env_events=_B,
            routers=_J,
        ),
        _spec(
            "env_requests",
            "one row per services.env.ask(): router, request, generated code or plan, tool "
            "calls, outcome, LLM calls it made, wall-clock latency",
            run_id=_V, tick=_B, agent_id=_V, router=_V, module=_V, request=_V, code=_V,
            plan=_J, tool_calls=_J, n_tool_calls=_B, ok=_F, outcome=_V, error_type=_V,
            error=_V, observation=_V, llm_calls=_B, tokens=_B, cache_hit=_F, latency_s=_D,
        ),
        _spec(
            "env_events",
            "events emitted by env modules (drained after every tick)",
            open=True, env=_V, event=_V, tick=_B, seq=_B,
        ),
        _spec(
            "server_metrics",
            "backend metrics sampled in clock time (running, waiting, tokens/s, limiter)",
            open=True, ts=_D, topology=_V,
        ),
        _spec(
            "process_metrics",
            "process CPU and RSS sampled during an experiment",
            ts=_D, wall=_D, topology=_V, cpu_percent=_D, rss_bytes=_B, pid=_B,
        ),
        _spec(
            "experiment_runs",
            "one row per finished experiment run: topology, task, iterations, score, status",
            open=True, run_id=_V, topology=_V, task_id=_V, status=_V, error=_V,
        ),
        _spec(
            "thread_events",
            "suspendable agent threads: deliveries, slices, dispatches",
            ts=_D, thread_id=_V, event=_V, kind=_V, dedup_id=_V, call_id=_V, tool=_V,
            mode=_V, detail=_J,
        ),
        # ``schema`` and ``answer`` hold JSON *text*: an answer may be any JSON value, and
        # text keeps the column one type for DuckDB.
        _spec(
            "skill_activations",
            "Agent Skills an agent used: activated (how: keyword or tool), a reference read",
            run_id=_V, agent_id=_V, tick=_B, skill=_V, how=_V, action=_V, path=_V, ok=_F,
        ),
        _spec(
            "human_requests",
            "human-in-the-loop questions an agent asked",
            request_id=_V, agent_id=_V, question=_V, schema=_V, ts=_D, tick=_B,
        ),
        _spec(
            "human_answers",
            "human-in-the-loop answers (any process may append one)",
            request_id=_V, answer=_V, answered_by=_V, ts=_D,
        ),
    )
}  # fmt: skip


def dataset_spec(name: str) -> DatasetSpec:
    """The declaration of ``name``.

    Raises:
        UnknownNameError: ``name`` is not a catalogued dataset (the message lists them).
    """
    spec = CATALOG.get(name)
    if spec is None:
        raise UnknownNameError("dataset", name, list(CATALOG))
    return spec


class _Registrar(Protocol):
    def register(
        self,
        dataset: str,
        columns: Mapping[str, str],
        *,
        description: str = "",
        module: str | None = None,
    ) -> None: ...


def register(sink: _Registrar, names: Iterable[str], module: str = "agentlab") -> None:
    """Declare the catalogued datasets ``names`` in the sink's ``replay/_schema.json``."""
    for name in names:
        spec = dataset_spec(name)
        sink.register(name, spec.columns, description=spec.description, module=module)


# --- row builders --------------------------------------------------------------------------

_FIELDS: dict[type, tuple[str, ...]] = {}
_SKIP_FIELDS = frozenset({"tries"})


def _record_fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(cls) if f.name not in _SKIP_FIELDS)
        _FIELDS[cls] = names
    return names


_GETTERS: dict[type, tuple[tuple[str, ...], Any]] = {}

#: every key :func:`llm_call_row` gives a ``CallRecord``'s row: the ``llm_calls`` columns
#: (``test_catalog`` holds the builder to it), for ``ReplaySink.encode(within=...)``
CALL_ROW_KEYS: frozenset[str] = frozenset(CATALOG["llm_calls"].columns)
#: every key of a batch's ``agent_states`` row (``runtime.batch``): that dataset's columns
STATE_ROW_KEYS: frozenset[str] = frozenset(CATALOG["agent_states"].columns)
_LABEL_SET = frozenset(LABEL_COLUMNS)


def _record_getter(cls: type) -> tuple[tuple[str, ...], Any]:
    got = _GETTERS.get(cls)
    if got is None:
        names = _record_fields(cls)
        got = _GETTERS[cls] = (names, operator.attrgetter(*names))
    return got


def llm_call_row(
    record: Any, *, run_id: str | None, tick: int | None, finish_reason: str | None = None
) -> dict[str, Any]:
    """The ``llm_calls`` row of a ``CallRecord``; ``finish_reason``: the reply's (``stop``,
    ``length``, ``tool_calls``), ``None`` for a call that failed.

    Labels are kept as JSON and the ones in :data:`LABEL_COLUMNS` flattened (a label the
    call lacks is left out of the row and reads back as ``NULL``); ``tick`` falls back to
    the ``tick``/``iteration`` label for drivers without ticks.
    """
    # Field access instead of CallRecord.to_dict(): dataclasses.asdict deep-copies and was
    # about a third of a society step. A CallRecord's row is one dict display (3x cheaper
    # than building it from the field names; test_catalog checks it has every field).
    if type(record) is CallRecord:
        r = record
        labels: dict[str, Any] = dict(r.labels) if r.labels else {}
        start, end, first = r.start, r.end, r.first_token
        prompt, completion = r.prompt_tokens, r.completion_tokens
        row: dict[str, Any] = {
            "request_id": r.request_id, "model": r.model, "start": start, "end": end,
            "first_token": first, "queue_wait": r.queue_wait,
            "agent_id": r.agent_id, "labels": labels, "prompt_tokens": prompt,
            "completion_tokens": completion, "outcome": r.outcome,
            "error": r.error, "attempts": r.attempts, "stream": r.stream,
            "cached_tokens": r.cached_tokens, "schema_version": r.schema_version,
        }  # fmt: skip
    else:
        names, get = _record_getter(type(record))
        row = dict(zip(names, get(record), strict=True))
        labels = row["labels"] = dict(row.get("labels") or {})  # type: ignore[call-overload]
        start, end, first = record.start, record.end, record.first_token
        prompt, completion = record.prompt_tokens, record.completion_tokens
    if labels:
        for key, value in labels.items():
            # Absent keys read back as NULL: a driver's unused labels cost no bytes per row.
            if value is not None and key in _LABEL_SET:
                row[key] = value
        # an experiment's sub-run (its ``run_id`` label) is more specific than the directory
        run_id = labels.get("run_id") or run_id
        if tick is None:
            tick = labels.get("tick", labels.get("iteration"))
    row["run_id"] = run_id
    row["tick"] = tick
    row["finish_reason"] = finish_reason
    row["latency"] = end - start
    row["ttft"] = None if first is None else first - start
    row["total_tokens"] = prompt + completion
    return row


#: ``LLMError.code`` → the attempt kind stored in ``llm_attempts``
_KINDS = {
    "ok": "ok",
    "rate_limited": "rate_limit",
    "timeout": "timeout",
    "bad_response": "malformed",
    "structured_output": "malformed",
}


def attempt_kind(code: str) -> str:
    """``ok`` / ``rate_limit`` / ``timeout`` / ``malformed`` / ``error`` for an error code."""
    return _KINDS.get(code, "error")


def llm_attempt_rows(record: Any, *, run_id: str | None, tick: int | None) -> list[dict[str, Any]]:
    """The ``llm_attempts`` rows of a ``CallRecord`` (one per entry of ``record.tries``)."""
    base = {
        "request_id": record.request_id,
        "model": record.model,
        "agent_id": record.agent_id,
        "run_id": run_id,
        "tick": tick,
        "schema_version": 1,
    }
    rows = []
    for attempt, code, start, end, error in record.tries:
        rows.append({
            **base, "attempt": attempt, "kind": attempt_kind(code),
            "error_class": None if code == "ok" else code, "error": error,
            "start": start, "end": end, "latency": end - start,
        })  # fmt: skip
    return rows


def message_row(
    *,
    msg_id: str,
    sender: str | None,
    receivers: Sequence[str],
    hub: str | None,
    role: str | None,
    content: str,
    tick: int | None,
    ts: float | None,
    thread: str | None = None,
    blocks: Any = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The ``messages`` row of one delivery event (one row per message, all receivers)."""
    return {
        "msg_id": msg_id,
        "sender": sender,
        "receivers": [str(r) for r in receivers],
        "hub": hub,
        "thread": thread,
        "role": role,
        "content": content,
        "blocks": blocks,
        "tick": tick,
        "ts": ts,
        # Payload size drives the "message bytes per directed pair" analysis.
        "bytes": len(content.encode()),
        "run_id": run_id,
        "schema_version": 1,
    }
