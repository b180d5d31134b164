"""Society basics: create/open/run, datasets, retries, batching, pause, errors."""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path

import pytest

from agentlab.core.clock import VirtualClock
from agentlab.errors import ConfigError, StoreError, UnknownNameError
from agentlab.runtime import RetryPolicy, Society, derive_seed
from agentlab.runtime.step_rng import StepRandom
from tests.runtime.society_helpers import log_rows


def _rows(run_dir: Path, dataset: str) -> list[dict]:
    out = []
    for f in sorted((run_dir / "replay" / dataset).glob("*.jsonl")):
        out += [json.loads(x) for x in f.read_bytes().splitlines()]
    return out


def test_run_writes_state_and_datasets(run_dir: Path) -> None:
    s = Society.create(
        run_dir,
        agents=[{"type": "counter", "n": 7, "config": {"llm_calls": 1}}],
        llm="sim/instant",
        seed=3,
        batch_size=3,
        progress=False,
    )
    out = s.run_sync(ticks=2)
    assert out["steps"] == 14 and out["llm_calls"] == 14 and out["errors"] == 0
    assert s.tick == 2
    states = s.agent_states()
    assert all(len(v["history"]) == 2 for v in states.values())
    # the per-agent draw derives from (seed, agent_id, tick), not from execution order
    a0 = s.agent_ids[0]
    expect = [StepRandom(derive_seed(3, a0, t)).randint(0, 999) for t in (1, 2)]
    assert states[a0]["history"] == expect
    timeline = _rows(run_dir, "timeline")
    assert [r["tick"] for r in timeline] == [1, 2]
    assert {
        "ts",
        "agents",
        "steps",
        "llm_calls",
        "tokens",
        "errors",
        "wall_s",
        "aimd_limit",
        "in_flight",
    } <= set(timeline[0])
    calls = _rows(run_dir, "llm_calls")
    assert len(calls) == 14 and {c["tick"] for c in calls} == {1, 2}
    assert all(c["stage"] == "count" and c["agent_id"] for c in calls)
    assert len(_rows(run_dir, "agent_states")) == 14
    assert len(_rows(run_dir, "agent_profiles")) == 7
    schema = json.loads((run_dir / "replay" / "_schema.json").read_text())
    text = json.dumps(schema)
    for name in ("agent_profiles", "agent_states", "timeline", "llm_calls", "env_events"):
        assert name in text
    spans = [
        json.loads(x)
        for f in (run_dir / "trace").glob("*.jsonl")
        for x in f.read_bytes().splitlines()
    ]
    assert sum(sp["name"] == "llm.call" for sp in spans) == 14
    assert sum(sp["name"] == "society.batch" for sp in spans) == 6  # 3 batches x 2 ticks


def test_open_continues_and_run_until(run_dir: Path) -> None:
    s = Society.create(run_dir, agents={"counter": 4}, seed=1, progress=False)
    s.run_sync(ticks=1)
    s2 = Society.open(run_dir, progress=False)
    assert s2.tick == 1
    s2.run_sync(until=3)
    assert s2.tick == 3
    assert all(len(v["history"]) == 3 for v in s2.agent_states().values())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert s2.run_sync(until=3)["ticks"] == 0  # up to tick 3: there already, quietly
    with pytest.warns(UserWarning, match="until=2: the society is at tick 3 already"):
        assert s2.run_sync(until=2)["ticks"] == 0  # a tick passed: said, not silent
    assert s2.tick == 3
    with pytest.raises(ConfigError, match="at most one"):
        s2.run_sync(ticks=1, until=5)


async def test_pause_resume_stop_control_the_real_loop(run_dir: Path) -> None:
    s = Society.create(run_dir, agents={"counter": 3}, seed=1, progress=False)
    assert s.status == "idle"
    task = asyncio.ensure_future(s.run())  # open-ended: until stop()
    while s.tick < 2:
        await asyncio.sleep(0.01)
    s.pause()
    while s.status != "paused":
        await asyncio.sleep(0.01)
    held = s.tick
    await asyncio.sleep(0.2)
    assert s.tick == held and s.paused and not task.done()
    s.resume()
    while s.tick < held + 2:
        await asyncio.sleep(0.01)
    assert s.status == "running"
    s.stop()
    out = await asyncio.wait_for(task, 30)
    assert s.status == "stopped" and out["tick"] == s.tick >= held + 2
    with pytest.raises(ConfigError, match="at most one"):
        await s.run(ticks=1, until=2)
    out = await s.run(ticks=1)
    assert s.status == "done" and out["ticks"] == 1


def test_failed_steps_are_retried_and_recorded(run_dir: Path) -> None:
    s = Society.create(
        run_dir,
        agents=[{"type": "counter", "n": 3, "config": {"fail_every": 2}}],
        seed=0,
        progress=False,
    )
    out = s.run_sync(ticks=2)
    assert out["steps"] == 6 and out["errors"] == 3  # tick 2: first attempts fail
    errs = _rows(run_dir, "agent_errors")
    assert len(errs) == 3 and all(e["tick"] == 2 and not e["final"] for e in errs)
    states = _rows(run_dir, "agent_states")
    assert sorted(r["attempts"] for r in states if r["tick"] == 2) == [2, 2, 2]
    logs = list((run_dir / "agents").glob("*/.runtime/logs/errors.jsonl"))
    assert len(logs) == 3


def test_exhausted_retries_keep_state_and_report(run_dir: Path) -> None:
    s = Society.create(
        run_dir,
        agents=[{"type": "counter", "n": 2, "config": {"fail_every": 1}}],
        seed=0,
        retry=RetryPolicy(max_attempts=1),
        progress=False,
        max_error_share=None,  # keep a tick where every step failed (default: it stops)
    )
    out = s.run_sync(ticks=1)
    assert out["steps"] == 0 and out["errors"] == 2
    assert all(r["final"] for r in _rows(run_dir, "agent_errors"))
    assert all(not r["ok"] for r in _rows(run_dir, "agent_states"))
    assert all(v["total"] == 0 for v in s.agent_states().values())


def test_llm_agents_use_env_tools(run_dir: Path) -> None:
    s = Society.create(
        run_dir, agents=6, env=["test_notes"], llm="sim/instant", seed=2, progress=False
    )
    out = s.run_sync(ticks=3)
    assert out["llm_calls"] >= 18 and out["errors"] == 0
    env = s.env_state()[0]
    assert len(env["state"]["notes"]) > 0  # agents posted through the tool loop
    events = _rows(run_dir, "env_events")
    assert len(events) == len(env["state"]["notes"])
    states = s.agent_states()
    assert sum(sum(v["actions"].values()) for v in states.values()) > 0
    assert all(v["memory"] for v in states.values())
    assert (run_dir / "env" / "ENV_STATE.json").exists()  # published after the last tick
    profiles = _rows(run_dir, "agent_profiles")
    assert all(p["name"] for p in profiles)


def test_virtual_clock_local(run_dir: Path) -> None:
    s = Society.create(
        run_dir,
        agents=[{"type": "counter", "n": 4, "config": {"llm_calls": 1}}],
        llm="sim/vllm-3b",
        clock="virtual",
        seed=0,
        tick_seconds=60,
        progress=False,
    )
    assert isinstance(s.clock, VirtualClock)
    s.run_sync(ticks=2)
    assert s.clock.now() >= 120  # two ticks of 60 virtual seconds, no wall time spent
    calls = _rows(run_dir, "llm_calls")
    assert all(c["end"] > c["start"] for c in calls)
    # The commit holds the simulated server's state (it grows with the prefix cache), so it
    # is written compact (an indented dump runs json's pure-Python encoder every tick) and
    # reads back as the very record the society holds.
    raw = (run_dir / "SOCIETY_STEP.json").read_bytes()
    assert b"\n" not in raw and b'"server":{' in raw
    assert json.loads(raw) == json.loads(json.dumps(s._step))
    # (on Ray this run equals the local one: tests/runtime/test_ray_vclock.py); an
    # executor with no way to keep virtual time is refused before it is made
    with pytest.raises(ConfigError, match="clock 'virtual' needs executor 'local' or 'ray'"):
        Society.open(run_dir, executor="dask")


def test_stop_ends_between_ticks(run_dir: Path) -> None:
    s = Society.create(run_dir, agents={"counter": 2}, seed=0, progress=False)

    async def go() -> dict:
        task = asyncio.create_task(s.run(ticks=50))
        while s.tick < 2:
            await asyncio.sleep(0.001)
        s.stop()
        return await task

    out = asyncio.run(go())
    assert 2 <= out["ticks"] < 50 and s.tick == out["tick"]


def test_errors_name_the_bad_value(run_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match="counter"):
        Society.create(run_dir, agents={"nope": 1}, progress=False)
    with pytest.raises(ConfigError, match="unknown executor 'slurm'; valid: local, ray"):
        Society.create(tmp_path / "x", agents={"counter": 1}, executor="slurm", progress=False)
    with pytest.raises(ConfigError, match="duplicate"):
        Society.create(tmp_path / "y", agents=[("counter", "a"), ("counter", "a")])
    with pytest.raises(StoreError, match="no society"):
        Society.open(tmp_path / "nothing")
    Society.create(tmp_path / "z", agents={"counter": 1}, progress=False)
    with pytest.raises(ConfigError, match="already holds"):
        Society.create(tmp_path / "z", agents={"counter": 1}, progress=False)


def test_same_seed_same_log(tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        s = Society.create(
            tmp_path / name, agents=5, env=["test_notes"], seed=9, batch_size=2, progress=False
        )
        s.run_sync(ticks=2)
        runs.append((s.agent_states(), s.env_state()[0]["state"], log_rows(tmp_path / name)))
    assert runs[0][0] == runs[1][0] and runs[0][1] == runs[1][1]
    a, b = runs[0][2], runs[1][2]
    a.pop("agent_profiles"), b.pop("agent_profiles")
    # llm_calls/llm_attempts rows carry the run id (the directory name, "a" vs "b")
    per_run = ("llm_calls", "llm_attempts")
    assert {k: v for k, v in a.items() if k not in per_run} == {
        k: v for k, v in b.items() if k not in per_run
    }


def test_create_over_an_interrupted_create_warns_at_the_callers_line(tmp_path: Path) -> None:
    # what a create stopped before its commit leaves: everything but SOCIETY_STEP.json
    Society.create(tmp_path / "half", agents=3, progress=False).close()
    (tmp_path / "half" / "SOCIETY_STEP.json").unlink()
    with pytest.warns(UserWarning, match="leftovers of an interrupted Society.create") as seen:
        s = Society.create(tmp_path / "half", agents=2, progress=False)
    # the warning names the line that called create (a notebook cell), not agentlab's
    assert seen[0].filename == __file__
    assert len(s.agent_ids) == 2 and s.tick == 0
    s.close()


async def test_two_virtual_societies_side_by_side_run_as_alone(tmp_path: Path) -> None:
    # (both spun at virtual time 0 forever: each clock's driver took the other's rounds
    # for work; tests/core/test_clock_driver.py has the clock-level case)
    from agentlab.store import open_run

    def make(name: str) -> Society:
        return Society.create(tmp_path / name, agents=30, env=["social_feed"],
                              llm="sim/vllm-3b", clock="virtual", seed=3, progress=False)  # fmt: skip

    def calls(name: str) -> list[tuple[object, ...]]:
        df = open_run(tmp_path / name).llm_calls_df()
        cols = ["agent_id", "start", "end", "prompt_tokens", "completion_tokens"]
        return [tuple(r) for r in df[cols].itertuples(index=False)]

    a, b = make("a"), make("b")
    await asyncio.wait_for(asyncio.gather(a.run(ticks=3), b.run(ticks=3)), 60)
    a.close()
    b.close()
    alone = make("alone")
    await alone.run(ticks=3)
    alone.close()
    assert len(calls("alone")) > 100
    assert calls("a") == calls("alone") == calls("b")


def test_run_refuses_tick_counts_that_are_not_whole_and_non_negative(run_dir: Path) -> None:
    import numpy as np

    s = Society.create(run_dir, agents=2, seed=0, progress=False)
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ConfigError, match="ticks must be a whole number >= 0"):
            s.run_sync(ticks=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="until must be a whole number >= 0"):
        s.run_sync(until=-2)
    assert s.run_sync(ticks=np.int64(2))["tick"] == 2  # a sweep's numpy parameter
    assert s.run_sync(ticks=0)["ticks"] == 0 and s.tick == 2
    s.close()


def test_a_stop_inside_a_tick_then_run_on_equals_the_straight_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stopping discarded the tick's rows but not the virtual time it had used, nor what the
    # simulated server had queued: from the stopped tick on every call came ~8 s later than
    # in the straight run (what reopening the run restores, so resume was exact, run on not)
    from agentlab.core import clock as clock_mod
    from agentlab.store import open_run

    rewinds: list[tuple[float, float]] = []
    original = clock_mod.VirtualClock.rewind_to

    def spy(self: VirtualClock, t: float) -> bool:
        before = self.now()
        done = original(self, t)
        if done:
            rewinds.append((before, t))
        return done

    monkeypatch.setattr(clock_mod.VirtualClock, "rewind_to", spy)

    def make(name: str) -> Society:
        return Society.create(tmp_path / name, agents=40, env=["social_feed"],
                              llm="sim/vllm-3b", clock="virtual", seed=3, progress=False)  # fmt: skip

    def rows(name: str) -> tuple[list[tuple[object, ...]], object]:
        df = open_run(tmp_path / name).llm_calls_df()
        cols = ["tick", "agent_id", "start", "end", "prompt_tokens", "completion_tokens"]
        return [tuple(r) for r in df[cols].itertuples(index=False)], Society.open(
            tmp_path / name, read_only=True, progress=False
        ).env_state()

    straight = make("straight")
    straight.run_sync(ticks=5)
    straight.close()
    for k, wait in enumerate((0.0, 0.002, 0.01, 0.03)):  # (0: at the tick's first instant)
        s = make(f"stopped{k}")

        async def stop_in_tick_3_then_run_on(s: Society = s, wait: float = wait) -> None:
            task = asyncio.ensure_future(s.run(ticks=5))
            while s.tick < 2:
                await asyncio.sleep(0.0005)  # (real time: the virtual clock runs meanwhile)
            await asyncio.sleep(wait)
            task.cancel()
            assert (await task)["status"] == "stopped"
            assert (await s.run(until=5))["tick"] == 5

        asyncio.run(stop_in_tick_3_then_run_on())
        s.close()
        assert rows(f"stopped{k}") == rows("straight"), k
    assert any(before > t for before, t in rewinds)  # a stop fell inside a tick's time


def test_close_during_a_run_stops_after_the_tick_then_closes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``soc.close()`` in the cell after ``agentlab.live(soc, ticks=N)`` (or beside any run
    task): close cut the store of the tick in progress while the run went on, took the lock
    again and finished with other calls than a straight run (1,437 calls for 1,419) and the
    lock held. It now stops the run after the tick in progress commits and closes then; the
    run reopens and runs on to the straight run's log."""
    from agentlab.store import open_run
    from agentlab.store.lifecycle import read_status

    def make(name: str) -> Society:
        return Society.create(tmp_path / name, agents=40, env=["social_feed"],
                              llm="sim/vllm-3b", clock="virtual", seed=3, progress=False)  # fmt: skip

    def rows(name: str) -> list[tuple[object, ...]]:
        df = open_run(tmp_path / name).llm_calls_df()
        cols = ["tick", "agent_id", "start", "end", "prompt_tokens", "completion_tokens"]
        return [tuple(r) for r in df[cols].itertuples(index=False)]

    straight = make("straight")
    straight.run_sync(ticks=4)
    straight.close()
    s = make("closed")

    async def close_inside_tick_2() -> dict[str, object]:
        task = asyncio.ensure_future(s.run(ticks=4))
        while s.tick < 1 or s.tick_progress().get("tick") != 2:
            await asyncio.sleep(0.0005)
        s.close()  # (from the kernel's loop, as a cell does: the run is a task beside it)
        assert read_status(tmp_path / "closed") == "running"  # not "done" under a live run
        return await task

    out = asyncio.run(close_inside_tick_2())
    assert out["status"] == "stopped" and out["tick"] == 2, out
    assert "a run is in progress; it stops after tick 2 commits" in capsys.readouterr().err
    assert read_status(tmp_path / "closed") == "stopped" and not s._lock.held
    again = Society.open(tmp_path / "closed", progress=False)  # not locked: it closed
    again.run_sync(until=4)
    again.close()
    assert rows("closed") == rows("straight")


def test_a_live_run_started_in_the_closing_cell_runs_then_closes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``with Society.create(...) as soc: agentlab.live(soc, ticks=3)`` (or ``live`` and
    ``close()`` in one cell): close() ran before the live run's task began, so it closed
    an idle society; the run then began, took the lock back, ran and left it held until
    the kernel ended. Now the run started in that cell runs its ticks, then the society
    closes; a start cancelled before it began closes it too."""
    from agentlab.store import open_run
    from agentlab.store.lifecycle import read_status
    from agentlab.viz import live

    def make(name: str) -> Society:
        return Society.create(tmp_path / name, agents=20, env=["social_feed"],
                              llm="sim/vllm-3b", clock="virtual", seed=5, progress=False)  # fmt: skip

    with make("straight") as straight:
        straight.run_sync(ticks=3)

    async def one_cell() -> tuple[Society, dict[str, object]]:
        with make("live") as soc:
            dash = live(soc, ticks=3)
            assert dash.task is not None and soc.status == "idle"  # not begun: same cell
        assert soc._lock.held  # still the run's
        out = await dash.task
        return soc, out

    soc, out = asyncio.run(one_cell())
    assert out["status"] == "done" and out["tick"] == 3, out
    assert capsys.readouterr().err.count("the run started in this cell runs first") == 1
    assert not soc._lock.held and read_status(tmp_path / "live") == "done"
    cols = ["tick", "agent_id", "start", "end", "prompt_tokens", "completion_tokens"]
    calls = [open_run(tmp_path / n).llm_calls_df()[cols] for n in ("live", "straight")]
    assert len(calls[0]) > 20 and calls[0].equals(calls[1])

    async def cancelled_before_it_began() -> Society:
        soc = Society.open(tmp_path / "live", progress=False)
        task = soc.start(ticks=2)
        soc.close()  # owed until the run ends
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return soc

    soc = asyncio.run(cancelled_before_it_began())
    assert soc.tick == 3 and not soc._lock.held

    async def stopped_before_it_began() -> dict[str, object]:
        with Society.open(tmp_path / "live", progress=False) as soc:
            task = soc.start(ticks=2)
            with pytest.raises(ConfigError, match="has a run starting"):
                await soc.run(ticks=1)  # a second run beside it
            soc.stop()  # (run() reset the stop request: the run went on)
        return await task

    out = asyncio.run(stopped_before_it_began())
    assert out["status"] == "stopped" and out["ticks"] == 0 and out["tick"] == 3

    async def paused_before_it_began() -> int:
        with Society.open(tmp_path / "live", progress=False) as soc:
            task = soc.start(ticks=2)
            soc.pause()  # (run() reset it too: the run went on)
            for _ in range(5000):  # (at most ~5 s)
                if soc.status == "paused" or task.done():
                    break
                await asyncio.sleep(0.001)
            assert soc.status == "paused", soc.status
            ticks_while_paused = soc.tick
            soc.resume()
            await task
        return ticks_while_paused

    assert asyncio.run(paused_before_it_began()) == 3
    with (
        Society.open(tmp_path / "live", progress=False) as late,
        pytest.raises(ConfigError, match=r"in a script use society.run_sync\(ticks\)"),
    ):
        late.start(ticks=1)


def test_a_society_closes_at_the_end_of_a_with_block(tmp_path: Path) -> None:
    """``with Society.create(...) as soc:`` (as ``with open_run(...) as run:``) raised
    ``AttributeError: __enter__``; it closes the society when the block ends."""
    from agentlab.store.lifecycle import read_status

    with Society.create(tmp_path / "w", agents=3, llm="sim/instant", seed=0,
                        progress=False) as soc:  # fmt: skip
        assert soc.run_sync(ticks=2)["tick"] == 2
        assert soc._lock.held
    assert not soc._lock.held and read_status(tmp_path / "w") == "done"
    with Society.open(tmp_path / "w", progress=False) as again:  # not locked: it closed
        assert again.tick == 2


def test_the_timeline_carries_each_ticks_mean_call_latency(run_dir: Path) -> None:
    """The live society view's latency chart reads the timeline: each row's
    ``latency_mean_s`` is the mean latency of the tick's answered calls (persona agents on
    ``social_feed``, ``sim/vllm-3b``, virtual clock; summed as whole µs, so any order of
    batches gives the same row)."""
    from agentlab.store import open_run

    s = Society.create(run_dir, agents=12, env=["social_feed"], llm="sim/vllm-3b",
                       clock="virtual", seed=3, batch_size=4, progress=False)  # fmt: skip
    s.run_sync(ticks=3)
    s.close()
    run = open_run(run_dir)
    calls = run.llm_calls_df()
    ok = calls[calls["outcome"] == "ok"]
    want = ok.assign(lat=ok["end"] - ok["start"]).groupby("tick")["lat"].mean()
    got = run.timeline_df().set_index("tick")["latency_mean_s"]
    assert list(got.index) == [1, 2, 3] and (want > 0.1).all()
    assert got.to_numpy() == pytest.approx(want.loc[got.index].to_numpy(), abs=1e-6)
