"""Spans → OpenTelemetry OTLP/JSON (an ``ExportTraceServiceRequest``).

Follows the OTLP/JSON encoding: camelCase field names, trace/span ids as lowercase hex,
``*TimeUnixNano`` as decimal strings, ``kind`` and ``status.code`` as integers, attributes
as ``KeyValue``/``AnyValue``. Spans with OpenTelemetry GenAI attributes
(``gen_ai.operation.name``...) are named as that convention says (``chat <model>``,
``execute_tool <tool>``), the agentlab name kept as ``agentlab.span.name``. One ``resourceSpans`` entry per shard (process), so tools show
which worker ran what.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from agentlab.store.atomic import atomic_write_bytes
from agentlab.store.trace import genai_provider

__all__ = ["any_value", "spans_to_otlp", "write_otlp"]

_KIND = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5, "event": 1}
_STATUS = {"unset": 0, "ok": 1, "error": 2}


def any_value(v: Any) -> dict[str, Any]:
    """A Python value as an OTLP ``AnyValue``."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, str):
        return {"stringValue": v}
    if v is None:
        return {"stringValue": ""}
    if isinstance(v, Mapping):
        return {"kvlistValue": {"values": attributes(v)}}
    if isinstance(v, list | tuple):
        return {"arrayValue": {"values": [any_value(x) for x in v]}}
    return {"stringValue": str(v)}


def attributes(d: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return [{"key": str(k), "value": any_value(v)} for k, v in (d or {}).items()]


def _nanos(t: Any) -> str:
    return str(round(float(t) * 1e9)) if t is not None else "0"


def _genai_name(name: str, attrs: Mapping[str, Any]) -> str:
    # GenAI convention: "{gen_ai.operation.name} {model | tool name | agent name}"
    op = attrs.get("gen_ai.operation.name")
    if not op:
        return name
    target = (
        attrs.get("gen_ai.request.model")
        or attrs.get("gen_ai.tool.name")
        or attrs.get("gen_ai.agent.name")
    )
    return f"{op} {target}" if target else str(op)


def _span(row: Mapping[str, Any]) -> dict[str, Any]:
    name = str(row.get("name") or "")
    attrs = dict(row.get("attributes") or {})
    span_name = _genai_name(name, attrs)
    if span_name != name:
        attrs["agentlab.span.name"] = name
    model = attrs.get("gen_ai.request.model")
    if model and "gen_ai.provider.name" not in attrs:
        attrs["gen_ai.provider.name"] = genai_provider(str(model))
    out: dict[str, Any] = {
        "traceId": str(row["trace_id"]),
        "spanId": str(row["span_id"]),
        "name": span_name,
        "kind": _KIND.get(str(row.get("kind") or "internal"), 1),
        "startTimeUnixNano": _nanos(row.get("start")),
        "endTimeUnixNano": _nanos(
            row.get("end") if row.get("end") is not None else row.get("start")
        ),
        "attributes": attributes(attrs),
        "events": [
            {
                "timeUnixNano": _nanos(e.get("ts")),
                "name": str(e.get("name") or ""),
                "attributes": attributes(e.get("attributes")),
            }
            for e in row.get("events") or []
        ],
        "status": {"code": _STATUS.get(str(row.get("status") or "unset"), 0)},
    }
    if row.get("parent"):
        out["parentSpanId"] = str(row["parent"])
    if row.get("status_message"):
        out["status"]["message"] = str(row["status_message"])
    return out


def spans_to_otlp(
    rows: Iterable[Mapping[str, Any]], *, manifest: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Span rows (as written by :class:`~agentlab.store.trace.Tracer`) → OTLP/JSON dict."""
    by_shard: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_shard[str(row.get("_shard") or "unknown")].append(_span(row))
    manifest = manifest or {}
    version = str(manifest.get("agentlab_version") or "")
    resource_spans = []
    for shard, spans in sorted(by_shard.items()):
        res = {"service.name": "agentlab", "agentlab.shard": shard}
        if manifest.get("kind"):
            res["agentlab.run.kind"] = str(manifest["kind"])
        resource_spans.append({
            "resource": {"attributes": attributes(res)},
            "scopeSpans": [{"scope": {"name": "agentlab", "version": version}, "spans": spans}],
        })  # fmt: skip
    return {"resourceSpans": resource_spans}


def write_otlp(
    rows: Iterable[Mapping[str, Any]], path: Path, *, manifest: Mapping[str, Any] | None = None
) -> int:
    """Write :func:`spans_to_otlp` to ``path`` atomically; returns the number of spans."""
    doc = spans_to_otlp(rows, manifest=manifest)
    atomic_write_bytes(path, orjson.dumps(doc), fsync=False)
    return sum(len(s["spans"]) for rs in doc["resourceSpans"] for s in rs["scopeSpans"])
