"""Widgets on a run directory: history on open, live following, frame cap, controls."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from agentlab.viz import ConversationView, IATHistogram, SocietyView, show
from agentlab.viz.society_view import decode_series
from tests.viz.conftest import LogWriter, timeline_row


def test_opening_on_a_finished_run_shows_full_history(run_dir: Path, log: LogWriter) -> None:
    log.write("timeline", [timeline_row(t) for t in range(50)])
    w = SocietyView(run_dir, follow=False)
    assert w.summary["tick"] == 49 and w.summary["ticks"] == 50
    assert decode_series(w.series_base).shape[0] == 50
    assert not w.controls
    w.close()


def test_background_follow_streams_with_frame_cap(run_dir: Path, log: LogWriter) -> None:
    w = SocietyView(run_dir, max_fps=20, poll_interval=0.01)
    frames: list[int] = []
    w.observe(lambda ch: frames.append(ch["new"]), names="frame")
    ticks_seen: set[int] = set()
    w.observe(lambda ch: ticks_seen.add(ch["new"].get("tick")), names="summary")
    t0 = time.monotonic()
    for t in range(300):  # ~1.5 s of ticks every 5 ms: far more than 20 per second
        log.write("timeline", [timeline_row(t)])
        time.sleep(0.005)
    deadline = time.monotonic() + 5
    while w.summary.get("tick") != 299 and time.monotonic() < deadline:
        time.sleep(0.02)
    elapsed = time.monotonic() - t0
    w.stop()
    assert w.summary["tick"] == 299
    assert len(frames) <= 20 * elapsed + 3  # coalesced
    assert len(ticks_seen) >= 5  # but still many intermediate values
    base = decode_series(w.series_base)
    delta = decode_series(w.series_delta)
    keys = set(base[:, 0]) | set(delta[:, 0])
    assert keys == set(range(300))  # snapshot + delta = full history


class FakeSociety:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.calls: list[Any] = []
        self.paused = False

    def pause(self) -> None:
        self.calls.append("pause")
        self.paused = True

    def resume(self) -> None:
        self.calls.append("resume")
        self.paused = False

    def stop(self) -> None:
        self.calls.append("stop")

    async def run(self, ticks: int) -> None:
        self.calls.append(("run", ticks))


async def test_controls_reach_the_society(run_dir: Path) -> None:
    import asyncio

    soc = FakeSociety(run_dir)
    w = SocietyView(soc, society=soc, ticks=7, follow=False)
    assert w.controls
    for action in ("start", "pause", "start", "stop", "bogus"):
        w._dispatch_msg(w, {"type": "control", "action": action}, [])
        await asyncio.sleep(0.01)  # let the started run task begin
    assert soc.calls == [("run", 7), "pause", "resume", "stop"]
    assert w.last_action == "stop"
    w.close()


def test_conversation_view_and_span_lookup(run_dir: Path, log: LogWriter) -> None:
    log.write(
        "messages",
        [
            {
                "msg_id": f"m{i}",
                "sender": f"a{i % 3}",
                "hub": "h",
                "content": f"hi {i}",
                "span_id": f"s{i}",
            }
            for i in range(5)
        ],
    )
    (run_dir / "trace").mkdir()
    (run_dir / "trace" / "x.jsonl").write_text(
        json.dumps({"span_id": "s3", "name": "agent.step", "attrs": {"msg_id": "m3"}}) + "\n"
    )
    w = ConversationView(run_dir, follow=False)
    assert w.total == 5 and [m["content"] for m in w.msgs_base][-1] == "hi 4"
    assert w.facets["senders"] == ["a0", "a1", "a2"]
    w._dispatch_msg(w, {"type": "span", "span_id": "s3"}, [])
    assert w.span_detail["found"] and "agent.step" in w.span_detail["text"]
    w._dispatch_msg(w, {"type": "span", "span_id": "zz"}, [])
    assert not w.span_detail["found"]
    w.close()


def test_iat_widget_counts_per_topology(run_dir: Path, log: LogWriter) -> None:
    rows = [{"start": i * 0.1, "topology": "star"} for i in range(10)]
    rows += [{"start": i * 1.0, "topology": "chain"} for i in range(5)]
    log.write("llm_calls", rows)
    w = IATHistogram(run_dir, follow=False, fit=True)
    counts = np.frombuffer(w.counts).reshape(len(w.groups), -1)
    assert w.groups == ["star", "chain"] and w.totals == [9, 4]
    assert counts.sum() == 13 and w.calls == 15
    assert w.fit_names == ["lognormal", "exponential"]
    w.close()


def test_show_composes_the_four_widgets(run_dir: Path, log: LogWriter) -> None:
    log.write("timeline", [timeline_row(0)])
    dash = show(run_dir, follow=False)
    assert len(dash.box.children) == 4
    assert dash.society.summary["tick"] == 0
    dash.stop()
    stopper = threading.Event()
    stopper.set()


def test_every_exported_name_imports() -> None:
    import agentlab.viz

    for name in agentlab.viz.__all__:
        assert getattr(agentlab.viz, name) is not None
