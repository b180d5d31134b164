"""Spans → OpenTelemetry OTLP (an ``ExportTraceServiceRequest``): JSON, protobuf, a push.

```python
write_otlp(rows, Path("trace.otlp.json"))                    # OTLP/JSON file
write_otlp(rows, Path("trace.otlp.pb"), fmt="protobuf")      # OTLP protobuf file
push_otlp(rows, "http://127.0.0.1:6006")                     # POST …/v1/traces (protobuf)
```

The protobuf messages are ``opentelemetry-proto``'s (extra ``agentlab[otlp]``): the
OTLP/JSON document is parsed into ``ExportTraceServiceRequest`` with protobuf's own JSON
parser, so the schema checks every field, then serialised.

Follows the OTLP/JSON encoding: camelCase field names, trace/span ids as lowercase hex,
``*TimeUnixNano`` as decimal strings, ``kind`` and ``status.code`` as integers, attributes
as ``KeyValue``/``AnyValue``. Spans with OpenTelemetry GenAI attributes
(``gen_ai.operation.name``...) are named as that convention says (``chat <model>``,
``execute_tool <tool>``), the agentlab name kept as ``agentlab.span.name``. One ``resourceSpans`` entry per shard (process), so tools show
which worker ran what.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from agentlab.errors import ConfigError
from agentlab.store.atomic import atomic_write_bytes
from agentlab.store.span_tree import complete_trees
from agentlab.store.trace import genai_provider

__all__ = [
    "OTLP_FORMATS",
    "any_value",
    "push_otlp",
    "spans_to_otlp",
    "spans_to_proto",
    "write_otlp",
]

#: file formats of :func:`write_otlp`
OTLP_FORMATS = ("json", "protobuf")

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
    for row in complete_trees(rows):  # threads' derived roots (agentlab.store.span_tree)
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


def spans_to_proto(
    rows: Iterable[Mapping[str, Any]], *, manifest: Mapping[str, Any] | None = None
) -> Any:
    """:func:`spans_to_otlp` as an ``opentelemetry-proto`` ``ExportTraceServiceRequest``."""
    try:
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    except ImportError as exc:
        raise ConfigError(
            "OTLP protobuf needs opentelemetry-proto: pip install 'agentlab[otlp]'"
        ) from exc
    doc = spans_to_otlp(rows, manifest=manifest)
    for rs in doc["resourceSpans"]:  # OTLP/JSON ids are hex, protobuf's JSON says base64
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json_format.ParseDict(doc, trace_service_pb2.ExportTraceServiceRequest())


def write_otlp(
    rows: Iterable[Mapping[str, Any]],
    path: Path,
    *,
    manifest: Mapping[str, Any] | None = None,
    fmt: str = "json",
) -> int:
    """Write the spans to ``path`` atomically as OTLP/JSON (``fmt="json"``) or OTLP
    protobuf (``"protobuf"``: one serialised ``ExportTraceServiceRequest``); returns the
    number of spans."""
    if fmt not in OTLP_FORMATS:
        raise ConfigError(f"unknown OTLP format {fmt!r}; valid: {', '.join(OTLP_FORMATS)}")
    if fmt == "protobuf":
        req = spans_to_proto(rows, manifest=manifest)
        atomic_write_bytes(path, req.SerializeToString(), fsync=False)
        return sum(len(s.spans) for rs in req.resource_spans for s in rs.scope_spans)
    doc = spans_to_otlp(rows, manifest=manifest)
    atomic_write_bytes(path, orjson.dumps(doc), fsync=False)
    return sum(len(s["spans"]) for rs in doc["resourceSpans"] for s in rs["scopeSpans"])


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of ``endpoint``: as given when it ends in ``/v1/traces``,
    else with ``/v1/traces`` appended (as ``OTEL_EXPORTER_OTLP_ENDPOINT`` is read)."""
    url = endpoint.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"OTLP endpoint {endpoint!r} is not an http(s):// URL")
    return url if url.endswith("/v1/traces") else f"{url}/v1/traces"


def push_otlp(
    rows: Iterable[Mapping[str, Any]],
    endpoint: str,
    *,
    manifest: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    batch: int = 2000,
    timeout: float = 30.0,
) -> int:
    """POST the spans to an OTLP/HTTP receiver as protobuf (``application/x-protobuf``),
    ``batch`` spans per request (whole traces kept together); returns the number sent.

    Raises :class:`~agentlab.errors.ConfigError` on a refused request (with the
    receiver's answer) or an unreachable endpoint.
    """
    url = traces_url(endpoint)
    by_trace: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_trace[str(row["trace_id"])].append(row)
    sent, chunk = 0, []
    for spans in by_trace.values():
        chunk.extend(spans)
        if len(chunk) >= batch:
            sent += post_spans(url, chunk, manifest, headers, timeout)
            chunk = []
    if chunk:
        sent += post_spans(url, chunk, manifest, headers, timeout)
    return sent


def post_spans(
    url: str,
    rows: Sequence[Mapping[str, Any]],
    manifest: Mapping[str, Any] | None,
    headers: Mapping[str, str] | None,
    timeout: float,
) -> int:
    """One OTLP/HTTP protobuf request of ``rows`` to the traces ``url``; returns the spans
    sent (with the thread roots :func:`spans_to_otlp` derives)."""
    msg = spans_to_proto(rows, manifest=manifest)
    body = msg.SerializeToString()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/x-protobuf", **(headers or {})})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        raise ConfigError(f"OTLP receiver {url} refused the spans: {exc.code} {detail}") from exc
    except OSError as exc:
        raise ConfigError(f"OTLP receiver {url} unreachable: {exc}") from exc
    return sum(len(ss.spans) for rs in msg.resource_spans for ss in rs.scope_spans)
