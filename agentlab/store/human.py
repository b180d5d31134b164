"""Human-in-the-loop requests and answers, kept in the run log.

An agent asks a person through ``await ask_user(run_dir, question, schema)``: the request
is appended to the ``human_requests`` dataset, and the coroutine waits by tailing
``human_answers`` until a row with its ``request_id`` appears. Anything that can append a
row answers it: the :class:`agentlab.viz.HumanInput` widget (same kernel), a CLI, another
process. Because both sides live in the log, a pending request survives a browser reload,
a kernel restart of the viewer, and (with a stable ``request_id``) a resumed run.

Rows (``schema_version`` 1)::

    human_requests: request_id, agent_id, question, schema (JSON text), ts, tick
    human_answers:  request_id, answer (JSON text), answered_by, ts

Both sides read with :func:`agentlab.store.tail.tail_rows` (byte-offset cursors over the
shards, where a dataset that does not exist yet is just empty). Columns are declared in
:mod:`agentlab.store.catalog`.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from agentlab.core.ids import new_id
from agentlab.errors import ConfigError, StoreError
from agentlab.store import catalog
from agentlab.store.tail import tail_rows

__all__ = [
    "ANSWERS",
    "REQUESTS",
    "answer_request",
    "ask_user",
    "convert_answer",
    "decode_json_text",
    "pending_requests",
    "post_request",
    "post_row",
    "request_row",
    "validate_answer",
]

REQUESTS = "human_requests"
ANSWERS = "human_answers"
SCHEMA_VERSION = 1

# --- writing -----------------------------------------------------------------------------


def _append(run_dir: Path, dataset: str, row: dict[str, Any]) -> None:
    """Append one row through this process's replay sink and make it durable now (the
    other side is waiting for it)."""
    from agentlab.store.replay import get_replay_sink

    sink = get_replay_sink(run_dir)
    catalog.register(sink, [dataset], module=__name__)
    sink.append(dataset, row)
    sink.flush()


def _schema_dict(schema: Any) -> dict[str, Any] | None:
    if schema is None:
        return None
    if isinstance(schema, dict):
        return schema
    to_schema = getattr(schema, "model_json_schema", None)
    if to_schema is not None:
        return dict(to_schema())
    raise ConfigError(
        f"unsupported answer schema {schema!r}; valid: None, a JSON-schema dict, "
        "or a pydantic model class"
    )


def post_request(
    run_dir: str | os.PathLike[str],
    question: str,
    schema: Any = None,
    *,
    agent_id: str | None = None,
    tick: int | None = None,
    ts: float | None = None,
    request_id: str | None = None,
) -> str:
    """Append a request to ``human_requests`` and return its id (no waiting)."""
    row = request_row(question, schema, agent_id=agent_id, tick=tick, ts=ts, request_id=request_id)
    post_row(run_dir, row)
    return str(row["request_id"])


def request_row(
    question: str,
    schema: Any = None,
    *,
    agent_id: str | None = None,
    tick: int | None = None,
    ts: float | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """The ``human_requests`` row of a request (built where it is asked, posted by the
    process that writes the run: :func:`post_row`)."""
    import time

    return {
        "request_id": request_id or new_id("hq-"),
        "agent_id": agent_id,
        "question": str(question),
        "schema": json.dumps(_schema_dict(schema)),
        "ts": time.time() if ts is None else ts,
        "tick": tick,
        "schema_version": SCHEMA_VERSION,
    }


def post_row(run_dir: str | os.PathLike[str], row: dict[str, Any]) -> None:
    """Append a :func:`request_row` to ``human_requests`` (durable at once)."""
    _append(Path(run_dir), REQUESTS, row)


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def validate_answer(answer: Any, schema: dict[str, Any] | None) -> Any:
    """Check ``answer`` against a small JSON-schema subset and return it.

    Supported: ``type`` (one or a list), ``enum``, ``properties``/``required`` of objects,
    ``items`` of arrays, ``minimum``/``maximum``. Raises :class:`ConfigError` naming the
    offending value and the expected shape.
    """
    if not schema:
        return answer
    if "enum" in schema and answer not in schema["enum"]:
        raise ConfigError(f"answer {answer!r} is not one of {schema['enum']!r}")
    typ = schema.get("type")
    if typ is not None:
        names = typ if isinstance(typ, list) else [typ]
        ok = False
        for n in names:
            kinds = _TYPES.get(n)
            if kinds is None:
                continue
            # bool is an int subclass; a checkbox must not satisfy "integer"
            if isinstance(answer, bool) and n in ("integer", "number"):
                continue
            ok = ok or isinstance(answer, kinds)
        if not ok:
            raise ConfigError(f"answer {answer!r} has the wrong type; expected {typ!r}")
    if isinstance(answer, dict):
        for req in schema.get("required", []):
            if req not in answer:
                raise ConfigError(f"answer {answer!r} lacks required field {req!r}")
        for k, sub in (schema.get("properties") or {}).items():
            if k in answer:
                validate_answer(answer[k], sub)
    if isinstance(answer, list) and isinstance(schema.get("items"), dict):
        for item in answer:
            validate_answer(item, schema["items"])
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        if "minimum" in schema and answer < schema["minimum"]:
            raise ConfigError(f"answer {answer!r} is below minimum {schema['minimum']!r}")
        if "maximum" in schema and answer > schema["maximum"]:
            raise ConfigError(f"answer {answer!r} is above maximum {schema['maximum']!r}")
    return answer


def answer_request(
    run_dir: str | os.PathLike[str],
    request_id: str,
    answer: Any,
    *,
    answered_by: str = "human",
    schema: Any = None,
    ts: float | None = None,
) -> None:
    """Append the answer to ``request_id`` (validated against ``schema`` when given)."""
    import time

    if not isinstance(request_id, str) or not request_id:
        raise ConfigError(f"invalid request id {request_id!r}; expected a non-empty string")
    validate_answer(answer, _schema_dict(schema))
    row = {
        "request_id": request_id,
        "answer": json.dumps(answer),
        "answered_by": str(answered_by),
        "ts": time.time() if ts is None else ts,
        "schema_version": SCHEMA_VERSION,
    }
    _append(Path(run_dir), ANSWERS, row)


def decode_json_text(value: Any) -> Any:
    """A JSON-encoded log cell → its value (non-JSON text is returned as it is)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def pending_requests(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Requests with no answer yet, oldest first (``schema`` decoded to a dict)."""
    src = Path(run_dir)
    reqs, _ = tail_rows(src, REQUESTS)
    answers, _ = tail_rows(src, ANSWERS)
    done = {a.get("request_id") for a in answers}
    out = []
    for r in reqs:
        if r.get("request_id") not in done:
            out.append({**r, "schema": decode_json_text(r.get("schema"))})
    return out


async def ask_user(
    run_dir: str | os.PathLike[str],
    question: str,
    schema: Any = None,
    clock: Any = None,
    *,
    agent_id: str | None = None,
    tick: int | None = None,
    request_id: str | None = None,
    timeout: float | None = None,
    poll_interval: float = 0.1,
) -> Any:
    """Ask a person and wait for the answer; returns the decoded answer.

    Args:
        run_dir: the run directory whose log carries the request.
        question: the text shown to the person (rendered as text, never HTML).
        schema: ``None`` (free text), a JSON-schema dict or a pydantic model class; the
            answer is validated against it, and a pydantic model is returned as an instance.
        clock: the run's clock, used for the request timestamp (waiting is in real time:
            a person is not simulated).
        agent_id: who asks (shown in the widget).
        tick: the society tick, if any.
        request_id: a stable id makes the call idempotent: re-asking after a resume does
            not post twice, and an answer already in the log is returned at once.
        timeout: seconds of real time to wait before ``TimeoutError``; ``None`` waits.
        poll_interval: seconds between looks at the log.

    Raises:
        TimeoutError: no answer within ``timeout``.
    """
    rd = src = Path(run_dir)
    rid = request_id
    existing: set[str] = set()  # ids already in the log
    if rid is not None:
        reqs, _ = tail_rows(src, REQUESTS)
        existing = {str(r.get("request_id")) for r in reqs}
    if rid is None or rid not in existing:
        ts = clock.now() if clock is not None else None
        rid = post_request(
            rd, question, schema, agent_id=agent_id, tick=tick, ts=ts, request_id=rid
        )
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    cursor: Any = None
    while True:
        rows, cursor = tail_rows(src, ANSWERS, cursor)
        for row in rows:
            if row.get("request_id") == rid:
                return _convert(decode_json_text(row.get("answer")), schema)
        if deadline is not None and loop.time() >= deadline:
            raise TimeoutError(f"no answer to human request {rid!r} within {timeout} s")
        await asyncio.sleep(poll_interval)


def convert_answer(answer: Any, schema: Any) -> Any:
    """A decoded answer as the caller asked for it (a pydantic model becomes an instance)."""
    return _convert(answer, schema)


def _convert(answer: Any, schema: Any) -> Any:
    validator = getattr(schema, "model_validate", None)
    if validator is not None:
        try:
            return validator(answer)
        except Exception as e:
            raise StoreError(f"answer {answer!r} does not fit {schema!r}: {e}") from e
    return answer
