"""The run lifecycle (``store/lifecycle.py``), ``exist_ok="replace"``, ``NotARunError`` and
the interrupt of ``Society.run``, with real processes where a second writer matters."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab import open_run
from agentlab.errors import ConfigError, NotARunError, RunLockedError
from agentlab.runtime import Society
from agentlab.store import mark_status, read_status, summarize_run
from agentlab.store.lifecycle import writer_alive

ROOT = Path(__file__).resolve().parents[2]

# A writer that holds its society open (running) until killed or its stdin closes.
HOLDER = r"""
import sys
from agentlab import Society
s = Society.create(sys.argv[1], agents=3, seed=1, clock="virtual", progress=False)
s.run_sync(ticks=2)
from agentlab.store import mark_status
mark_status(sys.argv[1], "running")  # as while run() is in its loop
print("ready", flush=True)
sys.stdin.read()
s.close()
"""


def _holder(run: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.strip() == "ready", line
    return p


def _files(run: Path) -> dict[str, int]:
    return {
        str(p.relative_to(run)): p.stat().st_size
        for p in run.rglob("*")
        if p.is_file() and p.name != "WRITER.lock"
    }


def test_mark_status_sets_and_clears_ended(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    mark_status(run, "running")
    doc = json.loads((run / "run.json").read_text())
    assert doc["status"] == "running" and doc["ended"] is None
    mark_status(run, "failed", error="ValueError: x")
    doc = json.loads((run / "run.json").read_text())
    assert doc["status"] == "failed" and doc["ended"] and doc["error"] == "ValueError: x"
    assert read_status(run) == "failed"
    mark_status(run, "running")
    doc = json.loads((run / "run.json").read_text())
    assert doc["ended"] is None and "error" not in doc
    # nobody holds the lock: a run that says running was interrupted
    assert read_status(run) == "interrupted"
    with pytest.raises(ConfigError, match="only read"):
        mark_status(run, "interrupted")  # type: ignore[arg-type]


def test_legacy_statuses_read_in_lifecycle_words(tmp_path: Path) -> None:
    for old, new in (("ok", "done"), ("error", "failed"), ("partial", "failed")):
        (tmp_path / "run.json").write_text(json.dumps({"status": old}))
        assert read_status(tmp_path) == new


def test_society_status_done_after_close_and_stopped_after_stop(tmp_path: Path) -> None:
    s = Society.create(tmp_path / "a", agents=3, progress=False)
    assert read_status(tmp_path / "a") == "running"  # its writer is this live process
    s.run_sync(ticks=2)
    assert read_status(tmp_path / "a") == "done"
    s.close()
    summary = summarize_run(tmp_path / "a")
    assert (summary.status, summary.ticks, summary.steps) == ("done", 2, 6)
    assert summary.ended is not None

    b = Society.create(tmp_path / "b", agents=3, progress=False)

    async def stop_after_one() -> dict[str, object]:
        task = asyncio.ensure_future(b.run(ticks=50))
        while b.tick < 1:
            await asyncio.sleep(0.005)
        b.stop()
        return await task

    out = asyncio.run(stop_after_one())
    assert out["status"] == "stopped"
    b.close()
    assert read_status(tmp_path / "b") == "stopped"
    assert json.loads((tmp_path / "b" / "run.json").read_text())["ended"]


def test_writer_killed_reads_interrupted(tmp_path: Path) -> None:
    run = tmp_path / "k"
    p = _holder(run)
    try:
        assert read_status(run) == "running"
        assert writer_alive(run)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    assert json.loads((run / "run.json").read_text())["status"] == "running"
    assert not writer_alive(run)
    assert read_status(run) == "interrupted"
    assert summarize_run(run).status == "interrupted"
    assert summarize_run(run).status_recorded  # run.json says running: a killed writer


def test_a_bare_log_is_interrupted_by_rule_not_by_record(tmp_path: Path) -> None:
    # a run.json without a status (a log another tool is still writing): readers call it
    # interrupted, and say that no status was recorded, so a live view keeps following it
    run = tmp_path / "bare"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"kind": "society"}))
    summary = summarize_run(run)
    assert summary.status == "interrupted"
    assert not summary.status_recorded
    assert summary.to_dict()["status_recorded"] is False


def test_replace_refuses_while_another_process_writes(tmp_path: Path) -> None:
    run = tmp_path / "live"
    p = _holder(run)
    try:
        before = _files(run)
        with pytest.raises(RunLockedError, match=f"pid {p.pid}"):
            Society.create(run, agents=2, progress=False, exist_ok="replace")
        assert _files(run) == before  # nothing removed, nothing written
        assert open_run(run).timeline_df()["tick"].tolist() == [1, 2]
    finally:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(timeout=60)
    # once the writer is gone, replace starts over
    s = Society.create(run, agents=2, progress=False, exist_ok="replace")
    try:
        assert s.tick == 0 and len(s.agent_ids) == 2
        assert not (run / "replay" / "timeline").exists() or not len(open_run(run).timeline_df())
    finally:
        s.close()


def test_replace_refuses_a_running_society_of_this_process(tmp_path: Path) -> None:
    run = tmp_path / "same"
    s = Society.create(run, agents=3, progress=False)

    async def rerun_cell_while_running() -> None:
        task = asyncio.ensure_future(s.run(ticks=10_000))
        while s.tick < 1:
            await asyncio.sleep(0.005)
        try:
            with pytest.raises(RunLockedError, match="running Society object"):
                Society.create(run, agents=2, progress=False, exist_ok="replace")
        finally:
            s.stop()
            await task

    asyncio.run(rerun_cell_while_running())
    assert (run / "SOCIETY_STEP.json").exists() and s.tick >= 1
    assert len(open_run(run).timeline_df()) == s.tick
    s.close()


def test_create_refuses_existing_and_exist_ok_true_opens(tmp_path: Path) -> None:
    s = Society.create(tmp_path / "r", agents=2, progress=False)
    s.run_sync(ticks=1)
    s.close()
    with pytest.raises(ConfigError, match="exist_ok='replace'"):
        Society.create(tmp_path / "r", agents=2, progress=False)
    again = Society.create(tmp_path / "r", agents=5, progress=False, exist_ok=True)
    assert again.tick == 1 and len(again.agent_ids) == 2
    again.close()


def test_replace_refuses_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    d = tmp_path / "notes"
    d.mkdir()
    (d / "thesis.tex").write_text("precious")
    with pytest.raises(ConfigError, match="not a run directory"):
        Society.create(d, agents=2, progress=False, exist_ok="replace")
    assert (d / "thesis.tex").read_text() == "precious"


def test_open_run_refuses_folders_that_are_not_runs(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NotARunError, match="is empty"):
        open_run(empty)
    with pytest.raises(NotARunError, match="not a run directory"):
        open_run(ROOT / "notebooks")
    sweep = tmp_path / "sw"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps({"points": []}))
    (sweep / "run.json").write_text(json.dumps({"kind": "sweep", "status": "done"}))
    with pytest.raises(NotARunError, match=r"open_sweep\(") as e:
        open_run(sweep)
    from agentlab.sweep import Sweep

    assert "Sweep.run_dirs()" in str(e.value) and hasattr(Sweep, "run_dirs")  # (it named a
    # Sweep.run(point_id) that never existed)
    with pytest.raises(NotARunError, match="does not exist"):
        open_run(tmp_path / "nope")
    Society.create(tmp_path / "runs" / "one", agents=2, progress=False).close()
    with pytest.raises(NotARunError, match="folder of runs"):
        open_run(tmp_path / "runs")


def test_interrupt_prints_one_line_and_run_continues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = Society.create(tmp_path / "i", agents=4, progress=False)

    async def press_stop_then_rerun() -> tuple[dict[str, object], dict[str, object]]:
        task = asyncio.ensure_future(s.run(ticks=10_000))
        while s.tick < 2:
            await asyncio.sleep(0.001)
        task.cancel()  # what the kernel's stop button does to the cell's task
        first = await task
        second = await s.run(ticks=2)
        return first, second

    first, second = asyncio.run(press_stop_then_rerun())
    n = int(first["tick"])  # type: ignore[call-overload]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"stopped after tick {n}; tick {n + 1} was discarded; running again continues "
        f"from tick {n + 1}"
    ]
    assert first["status"] == "stopped"
    assert second["tick"] == n + 2 and second["status"] == "done"
    s.close()
    timeline = open_run(tmp_path / "i").timeline_df()
    assert timeline["tick"].tolist() == list(range(1, n + 3))  # no duplicate, no gap
    summary = summarize_run(tmp_path / "i")
    assert summary.status == "done" and summary.steps == 4 * (n + 2)


def test_writer_alive_sees_own_process_lock(tmp_path: Path) -> None:
    s = Society.create(tmp_path / "own", agents=2, progress=False)
    assert writer_alive(tmp_path / "own")
    s.close()
    assert not writer_alive(tmp_path / "own")
    assert os.path.exists(tmp_path / "own" / "WRITER.lock")


def _busy_lock(run: Path) -> object:
    """The lock of ``run`` held as by a running writer of this process."""
    from agentlab.store.writer_lock import WriterLock

    lock = WriterLock(run)
    lock.busy = lambda: True
    return lock.acquire()


def test_experiment_exist_ok(tmp_path: Path) -> None:
    from agentlab.topology import Experiment

    def exp(**kw: object) -> Experiment:
        return Experiment(topologies=["star"], agents=3, runs=1, llm="sim/instant", seed=0,
                          progress=False, out=tmp_path / "e", **kw)  # type: ignore[arg-type]  # fmt: skip

    res = exp().run_sync()
    assert res.status == "done" and read_status(tmp_path / "e") == "done"
    calls = len(open_run(tmp_path / "e").llm_calls_df())
    with pytest.raises(ConfigError, match="exist_ok='replace'"):
        exp().run_sync()
    assert len(open_run(tmp_path / "e").llm_calls_df()) == calls  # untouched
    lock = _busy_lock(tmp_path / "e")
    try:
        with pytest.raises(RunLockedError):
            exp(exist_ok="replace").run_sync()
        assert len(open_run(tmp_path / "e").llm_calls_df()) == calls
    finally:
        lock.release()  # type: ignore[attr-defined]
    again = exp(exist_ok="replace").run_sync()
    assert again.status == "done" and len(open_run(tmp_path / "e").llm_calls_df()) == calls
    assert summarize_run(tmp_path / "e").kind == "experiment"


def test_writing_run_and_agent_system_lifecycle(tmp_path: Path) -> None:
    from agentlab.runtime.threads import AgentSystem, MemoryThreadStore, ScriptedModel
    from agentlab.store.lifecycle import writing_run

    with writing_run(tmp_path / "w", kind="werewolf", config={"players": 5}) as d:
        assert read_status(d) == "running"
    assert read_status(tmp_path / "w") == "done"
    with pytest.raises(ValueError), writing_run(tmp_path / "w", kind="werewolf",
                                                exist_ok="replace"):  # fmt: skip
        raise ValueError("bad day")
    assert read_status(tmp_path / "w") == "failed"
    assert json.loads((tmp_path / "w" / "run.json").read_text())["error"] == "ValueError: bad day"
    with (
        pytest.raises(ConfigError, match="already holds a run"),
        writing_run(tmp_path / "w", kind="werewolf"),
    ):
        pass

    async def threads() -> None:
        system = AgentSystem(ScriptedModel(), MemoryThreadStore(), run_dir=tmp_path / "t",
                             exist_ok="replace")  # fmt: skip
        async with system:
            system.send_user("a", "hi", dedup_id="u0")
            await system.drain()
            assert read_status(tmp_path / "t") == "running"
            with pytest.raises(RunLockedError):  # a second system while this one writes
                AgentSystem(ScriptedModel(), run_dir=tmp_path / "t", exist_ok="replace")

    asyncio.run(threads())
    s = summarize_run(tmp_path / "t")
    assert (s.kind, s.status, s.steps, s.errors.total) == ("threads", "done", 1, 0)


def test_writer_alive_when_its_lock_file_was_deleted(tmp_path: Path) -> None:
    run = tmp_path / "gone"
    p = _holder(run)
    try:
        (run / "WRITER.lock").unlink()
        assert read_status(run) == "running"  # the directory's own lock still says so
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    assert read_status(run) == "interrupted"


def test_a_stopped_tick_leaves_no_rows_behind(tmp_path: Path) -> None:
    # the demo stopped in tick 2 (Ctrl-C) reported "tool errors 3" from the committed log
    # beside "reply: ToolError 4, post: ToolArgumentError 4, ...": the env host had already
    # written tick 2's env.tool spans, which open_run showed beside no call or step of
    # tick 2 until a resume cut them
    from agentlab.llm import LLMClient

    llm = LLMClient("sim/vllm-3b", seed=1, decode_tps=400)  # real clock: ticks take ~1 s
    s = Society.create(tmp_path / "t", agents=60, env=["social_feed"], llm=llm, seed=1,
                       progress=False)  # fmt: skip

    async def stop_inside_the_second_tick() -> None:
        task = asyncio.ensure_future(s.run(ticks=5))
        while s.tick < 1:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # well into tick 2: its tools have run
        task.cancel()
        await task

    asyncio.run(stop_inside_the_second_tick())
    committed = s.tick

    def ticks_in_log() -> set[int]:
        run = open_run(tmp_path / "t")
        spans = run.sql("select distinct attributes['agentlab.tick'] t from spans")["t"]
        calls = run.sql("select distinct tick from llm_calls")["tick"]
        return {int(t) for t in [*spans.dropna(), *calls.dropna()]}

    assert ticks_in_log() == set(range(1, committed + 1))  # stopped, not yet closed
    s.close()
    assert ticks_in_log() == set(range(1, committed + 1))
    assert summarize_run(tmp_path / "t").status == "stopped"
