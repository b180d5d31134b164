"""An experiment whose runs keep failing stops (``topology/run_failures.py``).

A model the server lacks, an expired key, an endpoint gone down: every run failed, all 450
ran to the end and the experiment said ``done``. Now it stops when none of its last five
finished runs succeeded (or more than ``max_error_share`` of them failed), raising
``RunsFailedError``; the failed runs since the last success are not kept, so continuing it
runs them again (their rows are cut then, as an interrupted run's are).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentlab.errors import ConfigError, RunsFailedError
from agentlab.llm import LLMClient
from agentlab.store import open_run
from agentlab.store.lifecycle import read_status
from agentlab.topology import Experiment
from agentlab.topology.continuation import read_commit
from agentlab.topology.run_failures import FailureWatch
from tests.llm.serve_helpers import free_port, sim_serve_process

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _experiment(out: Path, p_timeout: float, **kw: Any) -> Experiment:
    # timeouts of the simulated server without retries: a run fails at its first one (a
    # star run makes ~30 calls); the virtual clock makes them instant
    llm = LLMClient("sim/instant", seed=0, sim_p_timeout=p_timeout, max_retries=0)
    return Experiment(topologies=["star"], agents=3, runs=30, llm=llm, seed=1, out=out,
                      progress=False, **kw)  # fmt: skip


def _runs(out: Path) -> list[tuple[str, str]]:
    rows = open_run(out).df("experiment_runs")
    return list(zip(rows["run_id"], rows["status"], strict=True))


def test_an_experiment_whose_every_run_fails_stops_after_five(tmp_path: Path) -> None:
    out = tmp_path / "e"
    with pytest.raises(RunsFailedError) as err:
        _experiment(out, 1.0).run_sync()
    msg = str(err.value)
    assert "stopped after 5 of 30 runs: none of the last 5 runs succeeded" in msg
    assert "first: star-0000: LLMTimeoutError" in msg and "max_error_share=None" in msg
    assert f"Experiment.open({str(out)!r}).run()" in msg
    assert read_status(out) == "failed"
    assert [s for _, s in _runs(out)] == ["error"] * 5  # readable until continued
    assert read_commit(out)["done"] == []  # none kept: a continuation runs them again
    # continued (the cause not fixed): the same five runs again, each once in the log
    with pytest.raises(RunsFailedError, match="stopped after 5 of 30 runs"):
        Experiment.open(out, progress=False).run_sync()
    assert [r for r, _ in _runs(out)] == [f"star-{k:04d}" for k in range(5)]


def test_runs_in_parallel_that_keep_failing_stop_and_continue_once_each(tmp_path: Path) -> None:
    out = tmp_path / "e"
    with pytest.raises(RunsFailedError, match="none of the last 5 runs succeeded"):
        _experiment(out, 1.0, parallel_runs=3).run_sync()
    commit = read_commit(out)
    assert commit["done"] == [] and commit["interleaved"]  # none kept
    first = open_run(out).llm_calls_df().groupby("run_id").size()
    with pytest.raises(RunsFailedError, match="stopped after 5 of 30 runs"):
        Experiment.open(out, progress=False).run_sync()
    runs = [r for r, _ in _runs(out)]
    assert len(runs) == 5 == len(set(runs))  # the first stop's runs were cut, not kept
    per_run = open_run(out).llm_calls_df().groupby("run_id").size()
    assert per_run[runs].eq(first[runs]).all(), (first, per_run)  # no run's calls twice


def test_the_failed_runs_since_the_last_success_are_not_kept(tmp_path: Path) -> None:
    out = tmp_path / "e"
    with pytest.raises(RunsFailedError, match="none of the last 5 runs succeeded") as err:
        _experiment(out, 0.03).run_sync()
    runs = _runs(out)
    last_ok = max(i for i, (_, s) in enumerate(runs) if s == "ok")
    assert [s for _, s in runs[last_ok + 1 :]] == ["error"] * 5
    assert "The 5 failed run(s) since the last that succeeded are not kept" in str(err.value)
    assert read_commit(out)["done"] == [r for r, _ in runs[: last_ok + 1]]
    # continued: the log is cut back to the last success and the five run again (on the
    # virtual clock, with the server's state restored, they fail alike)
    with pytest.raises(RunsFailedError):
        Experiment.open(out, progress=False).run_sync()
    assert _runs(out) == runs


def test_scattered_failures_do_not_stop_it_and_the_share_can_be_set(tmp_path: Path) -> None:
    res = _experiment(tmp_path / "a", 0.01).run_sync()  # 6 of 30 runs fail, never 5 in a row
    statuses = [s for _, s in _runs(tmp_path / "a")]
    assert res.status == "done" and len(statuses) == 30 and 0 < statuses.count("error") < 10
    with pytest.raises(RunsFailedError) as err:
        _experiment(tmp_path / "b", 0.01, max_error_share=0.5).run_sync()
    assert "3 of the last 5 runs failed, above max_error_share=0.5" in str(err.value)
    # kept in run.json: a continuation judges by the same rule
    assert Experiment.open(tmp_path / "b").max_error_share == 0.5
    res = _experiment(tmp_path / "c", 1.0, max_error_share=None).run_sync()
    assert res.status == "done" and [s for _, s in _runs(tmp_path / "c")] == ["error"] * 30
    for bad in ("all", True, 1.5, -0.1):
        with pytest.raises(ConfigError, match="max_error_share"):
            _experiment(tmp_path / "d", 0.0, max_error_share=bad)


def test_a_background_run_that_stops_says_so(tmp_path: Path, capsys: Any) -> None:
    # live(exp) starts it so: no status panel, and nobody may await the task
    async def go() -> asyncio.Task[Any]:
        task = _experiment(tmp_path / "e", 1.0).start()
        await asyncio.wait([task])
        return task

    task = asyncio.run(go())
    err = capsys.readouterr().err
    assert err.startswith("experiment failed: RunsFailedError: ") and "none of the last 5" in err
    assert isinstance(task.exception(), RunsFailedError)  # (awaiting it raises it still)


@pytest.mark.slow
def test_an_endpoint_gone_down_stops_it_and_it_continues_when_back(tmp_path: Path) -> None:
    """Real clock, real HTTP: the server is killed (SIGKILL) after four runs; the
    experiment stops on the five runs that then fail (connection refused), keeping the four;
    the server comes back and ``Experiment.open`` runs the rest: every run once, all ok."""
    out, port = tmp_path / "e", free_port()
    server, url = sim_serve_process("sim/instant", port=port)
    llm = LLMClient("hosted_vllm/sim/instant", base_url=f"{url}/v1", max_retries=1, timeout=10)

    def kill_after_four() -> None:
        while len((read_commit(out) or {}).get("done", [])) < 4:
            time.sleep(0.005)
        server.send_signal(signal.SIGKILL)

    threading.Thread(target=kill_after_four, daemon=True).start()
    try:
        with pytest.raises(RunsFailedError, match="none of the last 5 runs succeeded") as err:
            Experiment(topologies=["star"], agents=3, runs=12, llm=llm, clock="real", out=out,
                       progress=False).run_sync()  # fmt: skip
        server.wait(10)
        assert "ConnectionRefusedError" in str(err.value)
        kept = read_commit(out)["done"]
        assert len(kept) >= 4 and [s for _, s in _runs(out)[len(kept) :]] == ["error"] * 5
        server, _ = sim_serve_process("sim/instant", port=port)
        res = Experiment.open(out, progress=False).run_sync()
    finally:
        server.kill()
        server.wait(10)
    runs = _runs(out)
    assert res.status == "done" and [r for r, _ in runs] == [f"star-{k:04d}" for k in range(12)]
    assert {s for _, s in runs} == {"ok"}
    assert (open_run(out).llm_calls_df()["outcome"] == "ok").all()  # the failed runs' calls cut


def test_the_rule_by_hand() -> None:
    def row(k: int, ok: bool) -> dict[str, Any]:
        return {"run_id": f"r{k}", "status": "ok" if ok else "error",
                "error": None if ok else f"E{k}"}  # fmt: skip

    w = FailureWatch(1.0, 100, None)
    outcomes = [True, False, True, False, False, False, False]
    assert [w.finished(row(k, ok), {"after": k}) for k, ok in enumerate(outcomes)] == [None] * 7
    assert w.keep == {"after": 2} and w.streak == 4
    assert (
        w.finished(row(7, False), {"after": 7})
        == "none of the last 5 runs succeeded; first: r3: E3"
    )
    # fewer runs planned than the window: judged over all of them
    w = FailureWatch(1.0, 2, {"after": "start"})
    assert w.finished(row(0, False), {"after": 0}) is None
    assert w.finished(row(1, False), {"after": 1}) is not None
    assert w.keep == {"after": "start"}  # (a continuation's own commit)
    w = FailureWatch(0.2, 100, None)
    got = [w.finished(row(k, ok), None) for k, ok in enumerate([True, True, True, True, False])]
    assert got[:4] == [None] * 4 and got[4] is None  # 1 of 5 = 0.2: not above
    assert w.finished(row(5, False), None) == ("2 of the last 5 runs failed, above "
                                              "max_error_share=0.2; first: r4: E4")  # fmt: skip
    w = FailureWatch(None, 100, None)
    assert all(w.finished(row(k, False), None) is None for k in range(20))
