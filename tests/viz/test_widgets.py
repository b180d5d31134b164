"""Widgets on a run directory: history on open, live following, frame cap, controls."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentlab.store import open_run
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


async def _until(cond: Any, timeout: float = 20.0) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def _press(w: SocietyView, action: str) -> None:
    # exactly what the page's button sends
    w._dispatch_msg(w, {"type": "control", "action": action}, [])


async def test_buttons_drive_a_real_society(tmp_path: Path) -> None:
    import asyncio

    from agentlab.runtime import Society

    soc = Society.create(
        tmp_path / "soc", agents=4, llm="sim/instant", seed=0, progress=False, tick_seconds=0.02
    )
    w = SocietyView(soc, society=soc, follow=False)  # no ticks: start runs until stop
    w.refresh()
    assert w.controls and w.status == "idle" and w.enabled == ["start"]
    _press(w, "pause")  # not enabled while idle: ignored
    assert soc.status == "idle" and not soc.paused

    _press(w, "start")
    assert w.task is not None
    await _until(lambda: soc.tick >= 3)
    w.refresh()
    assert soc.status == "running" and w.status == "running"
    assert w.enabled == ["pause", "stop"]

    _press(w, "pause")
    await _until(lambda: soc.status == "paused")
    held = soc.tick
    await asyncio.sleep(0.3)
    assert soc.tick == held  # the loop holds between ticks
    w.refresh()
    assert w.status == "paused" and w.enabled == ["resume", "stop"]

    _press(w, "resume")
    await _until(lambda: soc.tick >= held + 3)
    assert soc.status == "running"

    _press(w, "stop")
    stats = await asyncio.wait_for(w.task, 20)
    assert soc.status == "stopped" and stats["ticks"] == soc.tick
    w.refresh()
    assert w.status == "stopped" and w.enabled == ["start"]
    assert w.summary["tick"] == soc.tick  # the view read every committed tick
    assert w.last_action == "stop"

    # start again continues from the committed tick, for `ticks` more when given
    w._ticks = 2
    before = soc.tick
    _press(w, "start")
    await asyncio.wait_for(w.task, 20)
    assert soc.status == "done" and soc.tick == before + 2
    w.close()
    soc.close()


async def test_live_without_ticks_waits_for_start_then_runs_until_stop(tmp_path: Path) -> None:
    import asyncio

    from agentlab.runtime import Society
    from agentlab.viz import live

    soc = Society.create(
        tmp_path / "soc", agents=3, llm="sim/instant", seed=0, progress=False, tick_seconds=0.02
    )
    dash = live(soc)
    assert dash.task is None and soc.status == "idle"
    assert dash.panels == ("society", "conversation", "iat")
    dash.start()
    await _until(lambda: soc.tick >= 5)
    soc.stop()
    await asyncio.wait_for(dash.task, 20)  # type: ignore[arg-type]
    dash.stop()
    assert soc.status == "stopped"
    html = dash._repr_mimebundle_()["text/html"]
    assert f"{soc.tick}" in html and 'data-agentlab-static="society"' in html
    soc.close()


async def test_live_on_an_experiment_runs_it_in_the_background_and_follows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``live(exp)`` said "live() needs a Society"; it now starts the experiment as a task
    (``Experiment.start``) and follows its run directory: the IAT histogram by topology
    and the conversation fill as its runs finish; cancelling the task stops it."""
    import asyncio

    from agentlab.errors import ConfigError
    from agentlab.topology import Experiment
    from agentlab.viz import live

    def exp(name: str, runs: int, parallel: int = 1) -> Experiment:
        return Experiment(topologies=["sequential", "star"], agents=3, runs=runs,
                          llm="sim/vllm-3b", seed=0, out=tmp_path / name, progress=False,
                          parallel_runs=parallel)  # fmt: skip

    e = exp("e", 3)
    dash = live(e)
    assert dash.panels == ("experiment", "conversation", "iat") and dash.task is not None
    assert dash._waiting is None  # (its run is starting: no "waiting for a run" line)
    res = await asyncio.wait_for(dash.task, 60)
    assert res.status == "done" and res.runs_done == 6
    iat = dash.iat
    assert iat is not None
    iat.refresh()
    assert iat.calls == len(res.calls_df()) > 0 and set(iat.groups) == {"sequential", "star"}
    dash.stop()
    with pytest.raises(ConfigError, match="already ran"):
        live(e)
    with pytest.raises(ConfigError, match="a society's"):
        live(exp("t", 1), ticks=3)

    panel = dash.experiment
    assert panel is not None
    panel.refresh()
    assert panel.status == "done" and panel.enabled == [] and panel.controls
    assert panel.summary["runs_done"] == panel.summary["runs_planned"] == 6
    assert panel.summary["llm_calls"] == len(res.calls_df())
    assert panel.state_line == "done: 6 of 6 runs"

    # the panel's stop button: the kernel's stop button interrupts a cell, and a
    # background experiment runs in none (it was dash.task.cancel() typed in a new cell)
    long = exp("long", 200)
    long.progress = True  # (as built by default): live draws no bar, its panel counts runs
    dash = live(long)
    assert long.progress is False
    panel = dash.experiment
    assert panel is not None
    await _until(lambda: long._results is not None and long._results.runs_done >= 2)
    panel.refresh()
    assert panel.status == "running" and panel.enabled == ["stop"]
    assert panel.state_line.startswith("running: ") and "of 400 runs" in panel.state_line
    assert "(the run in flight is dropped)" in panel.state_line
    panel._on_front_msg({"type": "control", "action": "stop"})  # what the press sends
    assert panel.status == "stopping" or panel._stopping
    res = await dash.task  # type: ignore[misc]
    assert res.status == "stopped" and 2 <= res.runs_done < 400
    # the panel says it stopped: the experiment prints no second line under the cell
    assert "experiment stopped after" not in capsys.readouterr().err
    panel.refresh()
    assert panel.status == "stopped" and panel.enabled == []
    assert panel.summary["runs_done"] == res.runs_done
    assert f"stopped after {res.runs_done} of 400 runs; Experiment.open(" in panel.state_line
    # the run the stop cut short is not counted, as the results leave it out
    # (the log also holds the cut run's first calls when the stop came after they started)
    in_log = len(open_run(long.out).llm_calls_df())
    assert panel.summary["llm_calls"] == len(res.calls_df()) <= in_log
    # its run has ended: the view no longer follows the directory, which a continuation
    # rewrites (it counted the cut run twice and said "stopped after 400 of 400 runs")
    assert not any(part._follower.running for part in dash.parts)
    assert "stopped after" in panel._static_html() and "Experiment" in panel._text()
    dash.stop()
    # Experiment.stop() typed in a cell says so in its line, as the kernel's stop button
    other = exp("other", 200, parallel=3)
    odash = live(other)
    await _until(lambda: other._results is not None and other._results.runs_done >= 1)
    assert odash.experiment is not None
    odash.experiment.refresh()
    assert "(the runs in flight (3 at a time) are dropped)" in odash.experiment.state_line
    other.stop()
    assert (await odash.task).status == "stopped"  # type: ignore[misc]
    assert "experiment stopped after" in capsys.readouterr().err
    odash.stop()
    # a study whose runs keep failing: the panel says failed, the error in red below
    from agentlab.errors import RunsFailedError
    from agentlab.llm import LLMClient

    bad = LLMClient("sim/instant", seed=0, sim_p_timeout=1.0, max_retries=0)
    failing = Experiment(topologies=["star"], agents=3, runs=20, llm=bad, seed=0,
                         out=tmp_path / "failing", progress=False)  # fmt: skip
    fdash = live(failing)
    with pytest.raises(RunsFailedError):
        await fdash.task  # type: ignore[misc]
    fp = fdash.experiment
    assert fp is not None
    fp.refresh()
    assert fp.status == "failed" and fp.error.startswith("RunsFailedError: ")
    assert fp.state_line == "failed after 5 of 20 runs (the error below)"
    assert fp.summary["runs_failed"] == 5 and "RunsFailedError" in fp._static_html()
    fdash.stop()
    capsys.readouterr()
    # shown later (another kernel): the status run.json records, no button
    again = show(tmp_path / "long", follow=False)
    assert again.panels == ("experiment", "conversation", "iat")
    assert again.experiment is not None and not again.experiment.controls
    assert again.experiment.status == "stopped" and again.experiment.enabled == []
    assert again.experiment.summary["runs_done"] == res.runs_done


async def test_a_press_on_another_thread_wakes_the_idle_kernel_loop(tmp_path: Path) -> None:
    # JupyterLab sends comm messages over a kernel subshell: ipykernel 7 runs the handler
    # in that subshell's thread (with its own loop) while the kernel's loop sleeps
    import asyncio
    import threading

    from agentlab.runtime import Society

    soc = Society.create(
        tmp_path / "soc", agents=3, llm="sim/instant", seed=0, progress=False, tick_seconds=0.02
    )
    w = SocietyView(soc, society=soc, follow=False)

    def press_on_a_thread(action: str) -> None:
        def handler() -> None:  # a subshell thread runs its own event loop
            async def on_msg() -> None:
                _press(w, action)

            asyncio.run(on_msg())

        th = threading.Thread(target=handler)
        th.start()
        th.join()

    press_on_a_thread("start")
    await _until(lambda: w.task is not None and soc.tick >= 2)
    press_on_a_thread("pause")
    await _until(lambda: soc.status == "paused")
    held = soc.tick
    w.refresh()
    assert "paused after tick" in w.state_line and "resume" in w.state_line
    # nothing else runs on this loop now (no polling, no timers): only the press can wake it
    press_on_a_thread("resume")
    ticked = _when(lambda: soc.tick >= held + 2)
    done, _ = await asyncio.wait([ticked], timeout=10)
    assert done and ticked.result(), "resume pressed on another thread did not wake the loop"
    press_on_a_thread("pause")
    await _until(lambda: soc.status == "paused")
    press_on_a_thread("stop")
    done, _ = await asyncio.wait([w.task], timeout=10)  # type: ignore[list-item]
    assert done, "stop pressed while paused did not wake the loop"
    w.refresh()
    assert soc.status == "stopped" and w.status == "stopped"
    assert (
        w.state_line == f"stopped after tick {soc.tick}: start continues with tick {soc.tick + 1}"
    )
    w.close()
    soc.close()


def _when(cond: Any) -> Any:
    """A future of this loop resolved from a watcher thread once ``cond()`` holds (or after
    15 s): waiting on it sets no timer on the loop and polls nothing on it."""
    import asyncio
    import threading

    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def watch() -> None:
        deadline = time.monotonic() + 15
        while not cond() and time.monotonic() < deadline:
            time.sleep(0.02)
        ok = bool(cond())
        loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(ok))

    threading.Thread(target=watch, daemon=True).start()
    return fut


def test_a_view_refuses_an_object_without_the_control_surface(run_dir: Path) -> None:
    import pytest

    from agentlab.errors import ConfigError

    class NotASociety:
        run_dir = "x"

    with pytest.raises(ConfigError, match="control surface"):
        SocietyView(run_dir, society=NotASociety(), follow=False)  # type: ignore[arg-type]


def test_live_in_a_script_says_to_run_the_society_instead(tmp_path: Path) -> None:
    # (it raised "There is no current event loop" and left a never-awaited run coroutine)
    import warnings

    from agentlab.errors import ConfigError
    from agentlab.runtime import Society
    from agentlab.viz import live

    soc = Society.create(tmp_path / "s", agents=2, seed=0, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine ... was never awaited"
        with pytest.raises(ConfigError, match=r"in a script use society.run_sync\(ticks\)"):
            live(soc, ticks=1)
    assert soc.tick == 0 and soc.status != "running"
    soc.close()


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


def test_messages_of_several_runs_say_whose_they_are(tmp_path: Path) -> None:
    """An experiment's runs (interleaved when several run at a time) all speak in the one
    ``discussion`` hub: each message said expert_2 · discussion · tick 1, of which run not
    said. With more than one run, each says its run (and the search finds it)."""
    from agentlab.topology import Experiment

    out = tmp_path / "par"
    Experiment(topologies=["star"], agents=3, runs=2, llm="sim/vllm-3b", seed=0, out=out,
               progress=False, parallel_runs=2).run_sync()  # fmt: skip
    conv = show(out, follow=False).conversation
    assert conv is not None
    runs = {m["run"] for m in conv.msgs_base}
    assert runs == {"star-0000", "star-0001"} and conv.facets["runs"] == 2
    assert " from 2 runs; hubs: discussion" in conv._text()
    html = conv._static_html()
    assert "star-0000 · discussion · tick" in html and "star-0001 · discussion" in html
    one = tmp_path / "one"  # one run: nothing more to say
    LogWriter(one).write("messages", [{"msg_id": "m", "sender": "a", "hub": "h",
                                       "content": "hi", "run_id": "r"}])  # fmt: skip
    conv = ConversationView(one, follow=False)
    assert conv.facets["runs"] == 1 and "r · h" not in conv._static_html()
    assert "from" not in conv._text()
    conv.close()


async def test_a_view_of_a_directory_draws_the_run_that_continues_or_replaces_it(
    tmp_path: Path,
) -> None:
    """``show(out)`` followed the directory while the run in it was continued (the runs in
    flight cut and run again) or replaced (``exist_ok="replace"``, a cell run again): it
    counted the cut rows twice and read the new run's rows into the old one's counts. It
    now draws the run there anew, as ``show(out)`` again would."""
    import asyncio

    from agentlab.runtime import Society
    from agentlab.topology import Experiment

    out = tmp_path / "run"
    kw = {"topologies": ["sequential", "star"], "agents": 3, "runs": 20, "llm": "sim/vllm-3b",
          "seed": 0, "out": out, "progress": False, "parallel_runs": 3}  # fmt: skip
    exp = Experiment(**kw)  # type: ignore[arg-type]
    task = exp.start(progress=False)
    await _until(lambda: exp._results is not None and exp._results.runs_done >= 4)
    exp.stop(say=False)
    done = (await task).runs_done
    dash = show(out)
    await _until(lambda: dash.experiment is not None and dash.experiment.summary.get(
        "runs_done") == done)  # fmt: skip
    res = await Experiment.open(out, progress=False).run()
    await _until(lambda: dash.redrawn == 1 and dash.experiment is not None
                 and dash.experiment.summary.get("runs_done") == 40)  # fmt: skip
    assert dash.experiment is not None and dash.iat is not None
    assert dash.experiment.summary["llm_calls"] == len(res.calls_df()) == dash.iat.calls
    assert dash.outdated == "" and dash.panels == ("experiment", "conversation", "iat")
    soc = Society.create(out, agents=5, env=["social_feed"], llm="sim/instant", seed=0,
                         progress=False, exist_ok="replace")  # fmt: skip
    await soc.run(ticks=2)
    await _until(lambda: dash.redrawn == 2 and dash.society is not None
                 and "tick 2, 5 agents, 10 steps" in dash.society._text())  # fmt: skip
    assert dash.panels == ("society", "conversation", "iat")
    soc.close()
    dash.stop()
    await asyncio.sleep(0)


async def test_a_live_view_keeps_its_run_and_says_when_it_is_replaced(tmp_path: Path) -> None:
    """``live(soc)``'s buttons and task are its society's: when the cell that built the
    society runs again (``exist_ok="replace"``) the old view kept following, and said 100
    steps for runs of 60 and 80. It keeps what it read and says why above its panels; a
    ``live(exp)`` of a directory it replaces itself reads only its own run."""
    from agentlab.runtime import Society
    from agentlab.topology import Experiment
    from agentlab.viz import live

    out = tmp_path / "soc"

    def society(seed: int) -> Society:
        return Society.create(out, agents=20, env=["social_feed"], llm="sim/instant",
                              seed=seed, progress=False, exist_ok="replace")  # fmt: skip

    soc = society(0)
    dash = live(soc, ticks=3)
    await dash.task  # type: ignore[misc]
    assert dash.society is not None
    for part in dash.parts:  # (what their threads read in the seconds before a re-run)
        part.refresh()
    before = dash._text()
    assert "tick 3, 20 agents, 60 steps" in before
    soc.close()
    again = society(1)
    await again.run(ticks=4)
    await _until(lambda: bool(dash.outdated))
    bundle = dash._repr_mimebundle_()
    assert dash._text() == before and dash.redrawn == 0  # what it read, nothing of the new
    dash.society.refresh()
    assert dash.society.enabled == []  # (its buttons would drive the closed society)
    assert dash.society.state_line.startswith("tick 3 of this view's run; its directory")
    assert bundle["text/plain"].startswith("The run log in ") and "agentlab.show(" in (
        bundle["text/plain"])  # fmt: skip
    assert "was rewritten after this view read it" in bundle["text/html"]
    again.close()
    dash.stop()
    # live(exp) into a directory holding a run: it replaces it, and the view reads its own
    exp_dir = tmp_path / "exp"
    for _ in range(2):
        e = Experiment(topologies=["star"], agents=3, runs=3, llm="sim/vllm-3b", seed=0,
                       out=exp_dir, progress=False, exist_ok="replace")  # fmt: skip
        edash = live(e)
        res = await edash.task  # type: ignore[misc]
        assert edash.outdated == "" and edash.experiment is not None
        assert edash.experiment.summary["llm_calls"] == len(res.calls_df())


def test_every_message_from_the_page_is_acked(
    run_dir: Path, log: LogWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's ``sender`` (widgets/_common.js) shows "no answer from the kernel" when a
    press gets no ack: a saved copy of the view, or a kernel gone. A live view acks every
    message, whatever it changed (an ignored press too)."""
    log.write("messages", [{"msg_id": "m0", "sender": "a", "hub": "h", "content": "hi"}])
    w = ConversationView(run_dir, follow=False)
    sent: list[Any] = []
    monkeypatch.setattr(w, "send", lambda content, buffers=None: sent.append(content))
    w._dispatch_msg(w, {"type": "span", "span_id": "nope"}, [])
    w._dispatch_msg(w, {"type": "no-such-message"}, [])
    assert sent == [{"type": "ack", "of": "span"}, {"type": "ack", "of": "no-such-message"}]
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


def test_show_picks_panels_by_what_the_run_contains(run_dir: Path, log: LogWriter) -> None:
    log.write("timeline", [timeline_row(0)])
    dash = show(run_dir, follow=False)
    assert dash.panels == ("society", "conversation", "iat")
    assert len(dash.box.children) == 3 and dash.human is None
    assert dash.society is not None and dash.society.summary["tick"] == 0
    dash.stop()
    log.write("human_requests", [{"request_id": "r1", "question": "ok?", "agent_id": "a"}])
    assert show(run_dir, follow=False).panels == ("society", "human", "conversation", "iat")


def test_show_on_an_experiment_and_on_threads(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    LogWriter(exp).write(
        "messages",
        [
            {
                "msg_id": "m",
                "sender": "expert_1",
                "hub": "h",
                "content": '{"answer": "42", "confidence": 0.9}',
            }
        ],
    )
    (exp / "run.json").write_text('{"kind": "topology_experiment"}')
    dash = show(exp, follow=False)
    assert dash.panels == ("experiment", "conversation", "iat") and dash.society is None
    assert dash.experiment is not None and not dash.experiment.controls  # (no task here)
    assert dash.experiment.summary["runs_planned"] is None  # (its run.json names no plan)
    text = dash.conversation.msgs_base[0]["content"]  # type: ignore[union-attr]
    assert text == "answer: 42\nconfidence: 0.9"  # structured content as readable text
    thr = tmp_path / "threads"
    LogWriter(thr).write(
        "thread_events",
        [
            {
                "ts": 1.0,
                "thread_id": "t0",
                "event": "slice",
                "kind": "message",
                "detail": {"turns": 2},
            }
        ],
    )
    dash = show(thr, follow=False)
    assert dash.panels == ("threads", "iat")
    m = dash.conversation.msgs_base[0]  # type: ignore[union-attr]
    assert (m["hub"], m["role"], m["content"]) == ("t0", "slice", "turns: 2")


def test_every_exported_name_imports() -> None:
    import agentlab.viz

    for name in agentlab.viz.__all__:
        assert getattr(agentlab.viz, name) is not None


def test_span_button_finds_the_tool_span_of_every_society_message(tmp_path: Path) -> None:
    # society messages carry no span_id: the post's env.tool span (and the LLM call that
    # asked for it) is found from sender, tick, role and order
    from agentlab.runtime import Society

    soc = Society.create(tmp_path / "soc", agents=3, env=["social_feed"], llm="sim/instant",
                         seed=0, progress=False)  # fmt: skip
    soc.run_sync(2)
    soc.close()
    w = ConversationView(tmp_path / "soc", follow=False)
    msgs = list(w._model.journal.items)
    assert msgs and all(not m["span_id"] for m in msgs)
    calls = set()
    for m in msgs:
        w._dispatch_msg(w, {"type": "span", "span_id": "", "msg_id": m["msg_id"]}, [])
        assert w.span_detail["found"], m["msg_id"]
        span = json.loads(w.span_detail["text"])
        assert span["name"] == "env.tool" and span["attributes"]["gen_ai.agent.id"] == m["sender"]
        assert span["attributes"]["agentlab.tick"] == m["tick"] and "llm_call" in span
        calls.add(span["attributes"]["gen_ai.tool.call.id"])
    assert len(calls) == len(msgs)  # each message its own tool call
    w.close()
    # the society panel states errors in the one vocabulary, as `report` does
    from agentlab.store.summary import summarize_run

    sv = SocietyView(tmp_path / "soc", follow=False)
    assert sv.errors_line == summarize_run(tmp_path / "soc").errors.describe()
    assert "step errors" in sv.errors_line and "tool errors" in sv.errors_line
    assert f"errors: {sv.errors_line}" in sv._static_html()
    sv.close()


def test_a_view_of_an_ended_run_says_so_and_notices_the_end(run_dir: Path, log: LogWriter) -> None:
    """A view with no society in this kernel shows the run's own status once it has ended
    (a saved notebook said "following the run log" of a run long finished)."""
    from agentlab.store.lifecycle import mark_status
    from agentlab.store.writer_lock import WriterLock

    log.write("timeline", [timeline_row(t) for t in range(3)])
    assert SocietyView(run_dir, follow=False).status == "static"  # no run.json: a bare log
    lock = WriterLock(run_dir).acquire()
    mark_status(run_dir, "running")
    w = SocietyView(run_dir, poll_interval=0.01)

    def wait(cond: Any) -> None:
        deadline = time.monotonic() + 5
        while not cond() and time.monotonic() < deadline:
            time.sleep(0.05)

    wait(lambda: w.state_line)
    assert w.status == "following" and w.state_line == "following the run log (tick 2)"
    mark_status(run_dir, "done")  # the writer ends the run: run.json only, no log row
    lock.release()
    wait(lambda: w.status == "done")
    w.stop()
    assert w.status == "done" and w.state_line == "done: tick 2 committed (read from the run log)"
    assert w.enabled == []  # no buttons: nothing in this kernel to drive
    mark_status(run_dir, "running")  # says running, but no writer holds the lock
    v = SocietyView(run_dir, follow=False)
    assert v.status == "interrupted" and "crash or a kill" in v.state_line


def test_the_static_charts_draw_every_tick_and_say_why_one_is_empty(tmp_path: Path) -> None:
    """After two ticks every chart has two points, rates included (a tick's rate is its own
    work's, from tick 1: no longer measured between two commits). A lone point is drawn as
    a dot (a one-point polyline draws nothing), and a chart with fewer points than it needs
    says so."""
    from agentlab.runtime import Society
    from agentlab.viz._static import line_chart_svg

    soc = Society.create(tmp_path / "soc", agents=3, env=["social_feed"], llm="sim/instant",
                         seed=0, progress=False)  # fmt: skip
    soc.run_sync(2)
    soc.close()
    sv = SocietyView(tmp_path / "soc", follow=False)
    html = sv._static_html()
    sv.close()
    import base64
    import re

    svgs = [base64.b64decode(b).decode() for b in re.findall(r"base64,([A-Za-z0-9+/=]+)", html)]
    # the live view's four charts: rates, concurrency, tokens and mean latency per tick
    assert len(svgs) == 4 and all("<polyline" in svg for svg in svgs), svgs
    assert "tokens per tick" in svgs[2] and "mean LLM call latency" in svgs[3]
    nan = float("nan")
    one = line_chart_svg({"a": ([1, 2], [nan, 4.0]), "b": ([1, 2], [nan, 2.0])},
                         x_label="tick", y_label="n", min_points=2, empty="too few")  # fmt: skip
    assert "too few" in one
    dot = line_chart_svg({"a": ([1], [4.0])}, x_label="tick", y_label="n")
    assert "<circle" in dot


async def test_the_live_view_runs_its_society_without_a_second_progress_bar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A society made with its tick bar on (the default), run from its live view, drew the
    bar under the panel that already shows the ticks: two progress displays of one run.
    The view's runs have none; the society's own runs keep theirs."""
    import asyncio

    from agentlab.runtime import Society

    monkeypatch.delenv("AGENTLAB_PROGRESS", raising=False)
    soc = Society.create(tmp_path / "soc", agents=3, llm="sim/instant", seed=0)
    assert soc.progress
    await soc.run(ticks=1)
    assert "society" in capsys.readouterr().err  # its own bar (tqdm, on stderr here)
    w = SocietyView(soc, society=soc, follow=False, ticks=2)
    _press(w, "start")
    assert w.task is not None
    await asyncio.wait_for(w.task, 20)
    assert soc.tick == 3 and "society" not in capsys.readouterr().err
    w.close()
    soc.close()


def test_show_of_a_sweep_or_paper_names_what_to_open(tmp_path: Path) -> None:
    """``show(sweep_dir)`` drew a conversation panel with "0 messages" and an IAT panel
    with "0 LLM calls" over a sweep holding runs; it now says what to open instead. A
    missing directory is refused unless followed (a run another process will write)."""
    from agentlab.errors import ConfigError
    from agentlab.store import write_manifest

    write_manifest(tmp_path / "sw", kind="sweep", config={}, seed=None)
    write_manifest(tmp_path / "sw" / "points" / "x=1" / "topo", kind="experiment", config={},
                   seed=0)  # fmt: skip
    with pytest.raises(ConfigError, match=r"is a sweep, not a run: agentlab\.open_sweep") as exc:
        show(tmp_path / "sw", follow=False)
    assert str(tmp_path / "sw" / "points" / "x=1" / "topo") in str(exc.value)
    write_manifest(tmp_path / "pa", kind="paper", config={}, seed=None)
    with pytest.raises(ConfigError, match=r"is a paper, not a run.*holds no run"):
        show(tmp_path / "pa", follow=False)
    with pytest.raises(ConfigError, match="no run directory at"):
        show(tmp_path / "nope", follow=False)
    later = show(tmp_path / "nope")  # following: it waits for the run
    later.stop()
    # a file (run.json, say) is no run's directory, followed or not: its folder is named
    for follow in (True, False):
        with pytest.raises(ConfigError, match=r"run\.json' is a file.*agentlab\.show\("):
            show(tmp_path / "sw" / "run.json", follow=follow)


def test_show_of_a_directory_with_no_run_says_it_waits_for_one(tmp_path: Path) -> None:
    """``show("runs/typo")`` followed an empty directory with empty panels, a mistyped path
    looking like a run about to start. A line above the panels names the directory while
    no run is there (and in the saved snapshot and text), and goes when a run appears; a
    directory holding a run, and ``live`` of a run it starts itself, show no such line."""
    from agentlab.store import write_manifest

    d = tmp_path / "typo"
    dash = show(d)
    try:
        note = dash.box.children[0]
        assert note is dash._waiting and note.layout.display != "none"
        assert f"waiting for a run at <code>{d}</code>" in note.value
        assert "waiting for a run at" in dash._static_html() and str(d) in dash._text()
        write_manifest(d, kind="society", config={}, seed=0)
        dash.parts[0].refresh()  # (the follower's next poll)
        assert note.layout.display == "none"
        assert "waiting for a run" not in dash._static_html() + dash._text()
    finally:
        dash.stop()
    there = show(d)
    assert there._waiting is None and there.box.children[0] is there.parts[0]
    there.stop()
