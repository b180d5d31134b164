"""Trace shape of a society run, OTLP protobuf files and the OTLP/HTTP push."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from agentlab.cli import main as cli_main
from agentlab.errors import ConfigError
from agentlab.runtime import Society
from agentlab.store import open_run
from agentlab.store.otlp import traces_url
from agentlab.store.tail import read_tail
from tests.store.http_receiver import QuietHandler, serve

trace_pb2 = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")


def _society_run(out: Path, **kw: Any) -> Path:
    soc = Society.create(out, agents=[{"type": "counter", "n": 12, "config": {"llm_calls": 2}}],
                         llm="sim/instant", seed=3, progress=False, batch_size=5,
                         **kw)  # fmt: skip
    soc.run_sync(ticks=3)
    soc.close()
    return out


def _trees(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_trace.setdefault(r["trace_id"], []).append(r)
    return by_trace


def test_a_society_writes_one_tree_per_tick(tmp_path: Path) -> None:
    rows = read_tail(_society_run(tmp_path / "run") / "trace", None).rows
    trees = _trees(rows)
    assert len(trees) == 3  # one trace per tick
    for spans in trees.values():
        ids = {s["span_id"]: s for s in spans}
        roots = [s for s in spans if s["parent"] is None]
        assert [r["name"] for r in roots] == ["society.tick"]
        assert all(s["parent"] in ids for s in spans if s["parent"] is not None)
        parent_name = Counter((ids[s["parent"]]["name"], s["name"]) for s in spans if s["parent"])
        assert parent_name == {
            ("society.tick", "society.batch"): 3,  # 12 agents in batches of 5
            ("society.batch", "agent.step"): 12,
            ("agent.step", "llm.call"): 24,
        }
        tick = roots[0]["attributes"]["agentlab.tick"]
        for s in spans:
            assert s["attributes"]["agentlab.tick"] == tick
            assert not {"tick", "agent_id", "tool"} & set(s["attributes"])
        step = next(s for s in spans if s["name"] == "agent.step")
        assert step["attributes"]["gen_ai.operation.name"] == "invoke_agent"
        assert step["attributes"]["gen_ai.agent.name"] == "counter"
        chat = next(s for s in spans if s["name"] == "llm.call")
        a = chat["attributes"]
        assert a["gen_ai.agent.name"] == "counter" and a["gen_ai.agent.id"].startswith("counter")
        assert a["gen_ai.response.id"] and a["gen_ai.response.model"] == "sim/instant"
        assert a["gen_ai.conversation.id"] == f"run/{a['gen_ai.agent.id']}"


def test_sampled_out_chat_spans_leave_a_whole_tree(tmp_path: Path) -> None:
    rows = read_tail(_society_run(tmp_path / "run", llm_spans="none") / "trace", None).rows
    ids = {r["span_id"] for r in rows}
    assert not [r for r in rows if r["name"] == "llm.call"]
    assert all(r["parent"] in ids for r in rows if r["parent"] is not None)
    assert sum(r["name"] == "agent.step" for r in rows) == 36


def test_protobuf_file_parses_with_opentelemetry_proto(tmp_path: Path) -> None:
    run = _society_run(tmp_path / "run")
    out = tmp_path / "trace.otlp.pb"
    assert cli_main(["export-otlp", str(run), "--out", str(out)]) == 0
    req = trace_pb2.ExportTraceServiceRequest()
    req.ParseFromString(out.read_bytes())
    spans = [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert len(spans) == len(read_tail(run / "trace", None).rows)
    names = Counter(s.name.split(" ")[0] for s in spans)
    assert names == {"society.tick": 3, "society.batch": 9, "invoke_agent": 36, "chat": 72}
    by_id = {s.span_id: s for s in spans}
    chat = next(s for s in spans if s.name == "chat sim/instant")
    assert by_id[chat.parent_span_id].name == "invoke_agent counter"
    assert chat.trace_id == by_id[chat.parent_span_id].trace_id and len(chat.trace_id) == 16
    with open_run(run) as r:
        assert r.export_otlp(tmp_path / "t.json", format="json") == len(spans)
        with pytest.raises(ConfigError, match="valid: json, protobuf"):
            r.export_otlp(tmp_path / "t.x", format="xml")
        with pytest.raises(ConfigError, match="path and/or an endpoint"):
            r.export_otlp()


class _Receiver(QuietHandler):
    """A stand-in OTLP/HTTP receiver (an external service): keeps each request."""

    got: ClassVar[list[tuple[str, str, bytes]]] = []
    status: ClassVar[int] = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).got.append((self.path, self.headers["Content-Type"], body))
        self.send_response(type(self).status)
        self.end_headers()
        self.wfile.write(b"unsupported" if type(self).status != 200 else b"")


@pytest.fixture
def receiver() -> Iterator[str]:
    _Receiver.got, _Receiver.status = [], 200
    with serve(_Receiver) as url:
        yield url


def test_push_posts_protobuf_to_v1_traces_and_reports_refusals(
    tmp_path: Path, receiver: str
) -> None:
    run = _society_run(tmp_path / "run")
    with open_run(run) as r:
        n = r.export_otlp(endpoint=receiver)
    assert n == 120 and len(_Receiver.got) == 1
    path, ctype, body = _Receiver.got[0]
    assert path == "/v1/traces" and ctype == "application/x-protobuf"
    req = trace_pb2.ExportTraceServiceRequest()
    req.ParseFromString(body)
    assert sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans) == n
    _Receiver.status = 415
    with open_run(run) as r, pytest.raises(ConfigError, match="refused the spans: 415"):
        r.export_otlp(endpoint=f"{receiver}/v1/traces")
    with pytest.raises(ConfigError, match="not an http"):
        traces_url("127.0.0.1:4318")
    assert traces_url("http://h:4318/") == "http://h:4318/v1/traces"
