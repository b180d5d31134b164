"""Live OTLP push while a run runs, against a local OTLP/HTTP receiver that decodes every
request with opentelemetry-proto (a real protobuf endpoint, started in a thread)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from agentlab.cli import main as cli_main
from agentlab.runtime import Society
from agentlab.store.otlp_live import LiveOtlp, live_otlp
from agentlab.store.span_tree import tree_stats
from agentlab.store.tail import read_tail
from tests.store.http_receiver import QuietHandler, serve

trace_pb2 = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")


class _Otlp(QuietHandler):
    """POST /v1/traces: parse the protobuf request, keep its spans, answer as OTLP does."""

    spans: ClassVar[list[dict[str, Any]]] = []
    requests: ClassVar[int] = 0

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert self.path == "/v1/traces"
        assert self.headers["Content-Type"] == "application/x-protobuf"
        req = trace_pb2.ExportTraceServiceRequest()
        req.ParseFromString(body)
        got = [
            {"trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
             "parent": s.parent_span_id.hex() or None, "name": s.name}
            for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans
        ]  # fmt: skip
        type(self).spans.extend(got)
        type(self).requests += 1
        out = trace_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def receiver() -> Iterator[str]:
    _Otlp.spans, _Otlp.requests = [], 0
    with serve(_Otlp) as url:
        yield url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _society(out: Path) -> Society:
    return Society.create(out, agents=[{"type": "counter", "n": 12, "config": {"llm_calls": 2}}],
                          llm="sim/instant", seed=3, progress=False, batch_size=5)  # fmt: skip


def _wait_for(n: int, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while len(_Otlp.spans) < n and time.monotonic() < end:
        time.sleep(0.02)


def test_each_committed_tick_is_pushed_once_while_the_run_goes_on(
    tmp_path: Path, receiver: str
) -> None:
    soc = _society(tmp_path / "run")
    with live_otlp(tmp_path / "run", receiver, interval=0.05) as live:
        for tick in range(1, 4):
            soc.run_sync(ticks=1)
            _wait_for(40 * tick)  # 1 tick + 3 batches + 12 steps + 24 chats
            # pushed during the run, before the next tick starts, and whole
            assert len(_Otlp.spans) == 40 * tick
            assert len({s["trace_id"] for s in _Otlp.spans}) == tick
        soc.close()
    assert live.stats["pushed"] == live.stats["seen"] == 120
    assert live.stats["dropped"] == live.stats["failed_requests"] == 0
    written = read_tail(tmp_path / "run" / "trace", None).rows
    assert sorted(s["span_id"] for s in _Otlp.spans) == sorted(r["span_id"] for r in written)
    stats = tree_stats(_Otlp.spans)
    assert stats == {"spans": 120, "traces": 3, "roots": 3, "dangling": 0, "multi_root": 0}


def test_a_receiver_that_is_down_never_breaks_the_run(tmp_path: Path) -> None:
    soc = _society(tmp_path / "run")
    live = LiveOtlp(tmp_path / "run", f"http://127.0.0.1:{_free_port()}", interval=0.05,
                    timeout=1.0).start()  # fmt: skip
    soc.run_sync(ticks=3)
    assert soc.tick == 3  # every tick committed
    soc.close()
    with pytest.warns(RuntimeWarning, match="120 of 120 spans dropped"):
        stats = live.stop()
    assert stats["pushed"] == 0 and stats["dropped"] == stats["seen"] == 120
    assert stats["failed_requests"] >= 1 and "unreachable" in stats["last_error"]
    assert len(read_tail(tmp_path / "run" / "trace", None).rows) == 120  # the run's own copy


def test_the_queue_is_bounded_and_its_drops_counted(tmp_path: Path, receiver: str) -> None:
    soc = _society(tmp_path / "run")
    soc.run_sync(ticks=3)
    soc.close()
    live = LiveOtlp(tmp_path / "run", receiver, max_queue=50)  # not started: one read at stop
    with pytest.warns(RuntimeWarning, match="80 of 120 spans dropped"):
        stats = live.stop()
    assert (stats["pushed"], stats["dropped"]) == (40, 80)  # the two oldest traces dropped
    assert "queue full" in stats["last_error"]
    assert tree_stats(_Otlp.spans)["traces"] == 1


def test_cli_follow_pushes_a_finished_run_and_returns(tmp_path: Path, receiver: str) -> None:
    soc = _society(tmp_path / "run")
    soc.run_sync(ticks=2)
    soc.close()
    assert cli_main(["export-otlp", str(tmp_path / "run"), "--endpoint", receiver,
                     "--follow"]) == 0  # fmt: skip
    assert len(_Otlp.spans) == 80 and tree_stats(_Otlp.spans)["dangling"] == 0


def test_a_thread_systems_traces_go_at_stop_with_their_roots(tmp_path: Path, receiver: str) -> None:
    import asyncio

    from agentlab.llm import LLMClient
    from agentlab.runtime.threads import AgentSystem, LLMClientModel, Tool

    async def threads() -> None:
        model = LLMClientModel(LLMClient("sim/instant", seed=2), per_call=lambda m: {
            "sim_tool_call_p": 1.0 if m[-1]["role"] == "user" else 0.0})  # fmt: skip
        async with AgentSystem(model, tools=[Tool("lookup", lambda ctx, args: "found")],
                               agent_tools=False, run_dir=tmp_path / "t") as system:  # fmt: skip
            for t in ("ann", "bob", "cy"):
                system.send_user(t, f"hello {t}", "u1")
            await system.drain()

    with live_otlp(tmp_path / "t", receiver, interval=0.05) as live:
        asyncio.run(threads())
    # per thread: 2 slices, 2 chats, 1 tool written; 1 root derived at the push
    assert (live.stats["seen"], live.stats["pushed"], live.stats["dropped"]) == (15, 18, 0)
    assert tree_stats(_Otlp.spans) == {"spans": 18, "traces": 3, "roots": 3, "dangling": 0,
                                       "multi_root": 0}  # fmt: skip
