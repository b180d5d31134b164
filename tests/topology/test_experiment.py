"""Experiment: determinism, the run directory, interruption, clocks and config errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentlab.core.clock import VirtualClock
from agentlab.errors import ConfigError, UnknownNameError
from agentlab.store import open_run, read_manifest
from agentlab.topology import Experiment, WorkflowConfig, load_tasks

COLS = ["start", "end", "first_token", "queue_wait", "prompt_tokens", "completion_tokens",
        "stage", "iteration", "round", "sender", "receiver_role", "run_id", "task_id"]  # fmt: skip
TASKS = [{"id": "a", "category": "x", "prompt": "sum two numbers"},
         {"id": "b", "category": "y", "prompt": "sort a list"}]  # fmt: skip


def _exp(out: Path, seed: int, **kw: object) -> Experiment:
    return Experiment(topologies=["star", "full_mesh"], agents=3, runs=3, tasks=TASKS, seed=seed,
                      progress=False, out=out, **kw)  # fmt: skip


def test_same_seed_same_results_and_run_dir(tmp_path: Path) -> None:
    a = _exp(tmp_path / "a", seed=7).run_sync()
    b = _exp(tmp_path / "b", seed=7).run_sync()
    c = _exp(tmp_path / "c", seed=8).run_sync()
    ca, cb = a.calls_df()[COLS], b.calls_df()[COLS]
    assert ca.equals(cb)
    assert a.messages_df().drop(columns="msg_id").equals(b.messages_df().drop(columns="msg_id"))
    assert not ca.equals(c.calls_df()[COLS])
    runs = a.runs_df()
    assert len(runs) == 6 and set(runs.topology) == {"star", "full_mesh"}
    assert (runs.calls == a.calls_df().groupby("run_id").size().loc[runs.run_id].to_numpy()).all()
    # the run directory holds the same calls and messages
    run = open_run(tmp_path / "a")
    assert len(run.llm_calls_df()) == len(ca)
    msgs = run.messages_df()
    assert len(msgs) == len(a.messages_df()) and {"sender", "receivers", "hub", "tick"} <= set(
        msgs.columns
    )
    man = read_manifest(tmp_path / "a")
    assert man["status"] == "done" and man["seed"] == 7 and man["config"]["workflow"]["agents"] == 3
    sm = a.server_metrics_df()
    assert len(sm) > 10 and {"num_requests_running", "num_requests_waiting", "ts"} <= set(
        sm.columns
    )
    assert sm.ts.diff().dropna().round(9).eq(1.0).all()  # sampled every clock second
    assert len(a.process_metrics_df()) >= 1


def test_full_mesh_messages_are_directed_pairs(tmp_path: Path) -> None:
    res = Experiment(topologies=["full_mesh"], agents=3, runs=1, tasks=TASKS, progress=False,
                     out=tmp_path, rounds=1, max_iterations=1,
                     consensus_rates={"full_mesh": (0.0,)}).run_sync()  # fmt: skip
    m = res.messages_df()
    disc = m[m.hub == "discussion"]
    assert len(disc) == 6 and all(len(r) == 1 for r in disc.receivers)
    assert {(s, r[0]) for s, r in zip(disc.sender, disc.receivers, strict=True)} == {
        (f"expert_{i}", f"expert_{j}") for i in (1, 2, 3) for j in (1, 2, 3) if i != j
    }
    assert (disc.bytes > 0).all() and (disc.run_id == "full_mesh-0000").all()
    json.dumps(disc.blocks.iloc[0])


async def test_interrupt_keeps_finished_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = VirtualClock()
    exp = Experiment(topologies=["sequential"], runs=50, tasks=TASKS, clock=clock,
                     progress=False, out=tmp_path)  # fmt: skip
    task = asyncio.ensure_future(exp.run())
    while exp._results is None or exp._results.runs_done < 2:
        await clock.sleep(5.0)
    task.cancel()  # what the kernel's stop button does to the cell's task
    res = await task  # as Society.run: one line, the results of the finished runs
    assert res is exp.results
    assert res.status == "stopped" and 2 <= len(res.runs_df()) == res.runs_done < 50
    assert read_manifest(tmp_path)["status"] == "stopped"
    assert len(open_run(tmp_path).llm_calls_df()) == len(res.calls_df())
    err = capsys.readouterr().err
    assert f"experiment stopped after {res.runs_done} of 50 runs" in err
    # a second run() would repeat the same runs under the same ids into the same traffic
    with pytest.raises(ConfigError, match=r"already ran .*new Experiment"):
        await exp.run()
    assert len(res.runs_df()) == res.runs_done and res.runs_df().run_id.is_unique


def test_real_clock_with_instant_sim(tmp_path: Path) -> None:
    res = Experiment(topologies=["sequential"], runs=1, tasks=TASKS, clock="real",
                     llm="sim/instant", progress=False, out=tmp_path).run_sync()  # fmt: skip
    df = res.calls_df()
    assert len(df) > 5 and df.start.min() > 1e9  # epoch seconds


def test_config_errors() -> None:
    with pytest.raises(UnknownNameError, match=r"ring.*full_mesh"):
        Experiment(topologies=["ring"])
    with pytest.raises(ConfigError, match="agents>=2"):
        WorkflowConfig(agents=1)
    with pytest.raises(ConfigError, match="virtual"):
        Experiment(llm="openai/gpt-4o-mini", progress=False)._client(VirtualClock())
    with pytest.raises(ConfigError, match="no results"):
        _ = Experiment(progress=False).results
    with pytest.raises(ConfigError, match="'prompt'"):
        load_tasks([{"id": "x"}])
    assert len(load_tasks()) >= 5


async def test_experiments_one_after_another_in_one_loop(tmp_path: Path) -> None:
    """Each experiment has its own virtual clock; a finished one must not stall the next.

    (The first clock kept its cancelled metrics sampler queued, and two clock drivers kept
    each other from ever seeing an idle loop.)
    """
    for n in (3, 4):
        exp = Experiment(topologies=["full_mesh"], agents=n, runs=1, tasks=TASKS,
                         progress=False, out=tmp_path / str(n))  # fmt: skip
        res = await asyncio.wait_for(exp.run(), timeout=60)
        assert res.status == "done" and len(res.runs_df()) == 1


def test_an_experiment_shows_what_it_is_in_a_cell(tmp_path: Path) -> None:
    """A bare ``exp`` at the end of a cell said ``<...Experiment object at 0x...>``."""
    from agentlab.llm import LLMClient

    exp = Experiment(topologies=["star"], agents=3, runs=2, llm=LLMClient("sim/instant"),
                     clock="virtual", out=tmp_path / "x", progress=False)  # fmt: skip
    assert repr(exp) == (
        f"Experiment(topologies=['star'], agents=3, runs=2, llm='sim/instant', "
        f"out={str(tmp_path / 'x')!r}: not run)"
    )
    exp.run_sync()
    assert repr(exp).endswith(": done, 2 runs done)")


def test_common_slips_are_named(tmp_path: Path) -> None:
    """``topologies="star"`` iterated the letters ("unknown topology 's'"); an empty list
    ran nothing and said done; ``seed="a"`` was a ValueError from deep inside; a misspelt
    option a TypeError about ``WorkflowConfig.__init__``."""
    import numpy as np

    one = Experiment(topologies="star", agents=3, runs=1, progress=False, seed=np.int64(2))
    assert one.topologies == ["star"] and one.seed == 2
    with pytest.raises(ConfigError, match="no topologies to run"):
        Experiment(topologies=[])
    with pytest.raises(ConfigError, match="seed must be an integer, got 'a'"):
        Experiment(seed="a")  # type: ignore[arg-type]
    with pytest.raises(
        ConfigError, match=r"unknown option\(s\) round; its workflow options are rounds"
    ):
        Experiment(round=2)
