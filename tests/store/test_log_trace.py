"""Spans: nesting, decorators (sync and async), errors, events, clocks, OTLP export."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest

from agentlab.core.clock import VirtualClock
from agentlab.errors import ConfigError
from agentlab.store import Tracer, open_run
from agentlab.store.tail import read_tail


def _spans(run_dir: Path) -> dict[str, dict]:
    return {r["name"]: r for r in read_tail(run_dir / "trace", None).rows}


async def test_nesting_decorators_errors_and_events(run_dir: Path) -> None:
    clock = VirtualClock(start=100.0)
    tracer = Tracer(run_dir, clock=clock, shard="t")

    @tracer.trace_span("agent.step", agent_id="a1")
    async def step() -> int:
        await clock.sleep(2.5)
        tracer.record_event("tool.result", ok=True)
        return 7

    @tracer.trace_span("sync.work")
    def work() -> str:
        return "done"

    with tracer.trace_span("tick", tick=3) as tick:
        assert await step() == 7
        assert work() == "done"
        llm = tracer.start_span("llm.call", model="sim/x")
        tracer.end_span(llm, status="ok", tokens=12)
        with pytest.raises(ValueError), tracer.trace_span("boom"):
            raise ValueError("bad")
    assert Tracer.current_span() is None
    tracer.record_event("orphan", why="no span")
    with pytest.raises(ConfigError, match="valid"):
        tracer.end_span(tracer.start_span("x"), status="weird")
    tracer.flush()

    spans = _spans(run_dir)
    assert {s["trace_id"] for n, s in spans.items() if n != "orphan"} == {tick.trace_id}
    assert spans["tick"]["parent"] is None and spans["tick"]["attributes"] == {"tick": 3}
    for child in ("agent.step", "sync.work", "llm.call", "boom"):
        assert spans[child]["parent"] == tick.span_id
    step_span = spans["agent.step"]
    assert step_span["end"] - step_span["start"] == pytest.approx(2.5)  # virtual clock
    assert step_span["events"] == [{"name": "tool.result", "ts": 102.5, "attributes": {"ok": True}}]
    assert spans["llm.call"]["attributes"] == {"model": "sim/x", "tokens": 12}
    assert spans["boom"]["status"] == "error" and "bad" in spans["boom"]["status_message"]
    assert spans["orphan"]["kind"] == "event" and spans["orphan"]["trace_id"] != tick.trace_id
    assert len(spans["tick"]["span_id"]) == 16 and len(spans["tick"]["trace_id"]) == 32


async def test_context_follows_asyncio_tasks(run_dir: Path) -> None:
    tracer = Tracer(run_dir, shard="t")

    async def agent(i: int) -> str:
        with tracer.trace_span("step", i=i) as s:
            await asyncio.sleep(0)
            return s.parent or ""

    with tracer.trace_span("batch") as batch:
        parents = await asyncio.gather(*(agent(i) for i in range(5)))
    assert parents == [batch.span_id] * 5
    # a parent from another process travels as span.context
    remote = tracer.start_span("remote", parent=batch.context)
    assert (remote.trace_id, remote.parent) == (batch.trace_id, batch.span_id)
    tracer.close()  # ends the still-open span with status "unset"
    assert _spans(run_dir)["remote"]["status"] == "unset"


def test_export_otlp_loads_with_opentelemetry_proto(run_dir: Path, tmp_path: Path) -> None:
    trace_pb2 = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    from google.protobuf import json_format

    tracer = Tracer(run_dir, shard="t")
    with tracer.trace_span("tick", tick=1, ratio=0.5, flag=True, tags=["a"], meta={"k": "v"}):
        with tracer.trace_span("child"):
            tracer.record_event("evt", n=2)
        with pytest.raises(RuntimeError), tracer.trace_span("fails"):
            raise RuntimeError("x")
    tracer.flush()
    out = tmp_path / "trace.json"
    assert open_run(run_dir).export_otlp(out) == 3
    doc = json.loads(out.read_text())
    # Validate field names and types against the protobuf schema.
    req = json_format.Parse(json.dumps(doc), trace_pb2.ExportTraceServiceRequest())
    assert len(req.resource_spans[0].scope_spans[0].spans) == 3
    # OTLP/JSON ids are hex (protobuf JSON would say base64): convert and check the bytes.
    for span in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in span:
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    req = json_format.Parse(json.dumps(doc), trace_pb2.ExportTraceServiceRequest())
    spans = {s.name: s for s in req.resource_spans[0].scope_spans[0].spans}
    rows = _spans(run_dir)
    assert spans["child"].parent_span_id.hex() == rows["tick"]["span_id"]
    assert spans["tick"].trace_id.hex() == rows["tick"]["trace_id"]
    assert spans["tick"].start_time_unix_nano == round(rows["tick"]["start"] * 1e9)
    assert spans["fails"].status.code == 2 and spans["child"].status.code == 1
    assert spans["child"].events[0].name == "evt"
    attrs = {a.key: a.value for a in spans["tick"].attributes}
    assert attrs["tick"].int_value == 1 and attrs["ratio"].double_value == 0.5
    assert attrs["flag"].bool_value and attrs["tags"].array_value.values[0].string_value == "a"
    assert attrs["meta"].kvlist_value.values[0].key == "k"


def test_span_ids_are_unique_across_threads_and_a_forked_child() -> None:
    """Span ids come from a pool drawn many at a time: threads drawing at once never get
    the same id, and a forked child does not hand out the ids its parent had drawn."""
    import os
    import threading

    from agentlab.store.trace import new_span_id

    got: list[list[str]] = [[] for _ in range(4)]

    def draw(out: list[str]) -> None:
        for _ in range(5_000):
            out.append(new_span_id())

    threads = [threading.Thread(target=draw, args=(out,)) for out in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for out in got for i in out]
    assert len(set(ids)) == len(ids) == 20_000
    assert all(len(i) == 16 and int(i, 16) >= 0 for i in ids)

    new_span_id()  # the pool now holds undrawn ids the parent would hand out next
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, ",".join(new_span_id() for _ in range(300)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        child = set(f.read().decode().split(","))
    os.waitpid(pid, 0)
    parent = {new_span_id() for _ in range(300)}
    assert len(child) == 300 and not child & parent


def test_child_span_takes_the_parents_ids_once(run_dir: Path) -> None:
    """``Tracer.child_span``: spans under ids taken once with ``parent_ids`` (a batch's
    agent steps) are the spans ``open_span`` makes under that parent."""
    tracer = Tracer(run_dir)
    with tracer.trace_span("society.batch") as batch:
        ids = tracer.parent_ids()
        assert ids == (batch.trace_id, batch.span_id)
        a = tracer.child_span("agent.step", ids, {"gen_ai.agent.id": "a"})
        b = tracer.open_span("agent.step", **{"gen_ai.agent.id": "b"})
    for span in (a, b):
        assert (span.trace_id, span.parent) == ids and span.span_id != batch.span_id
    assert a.span_id != b.span_id
    row = tracer.finish_row(a)
    assert row["status"] == "ok" and row["attributes"] == {"gen_ai.agent.id": "a"}
    assert row["end"] >= row["start"]
    lone = tracer.child_span("x", Tracer.parent_ids(), {})  # no current span: a new trace
    assert lone.parent is None and len(lone.trace_id) == 32
    with pytest.raises(ConfigError, match="unknown span status"):
        tracer.finish_row(lone, "bad")
    tracer.close()
