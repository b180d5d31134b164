"""An interrupted Experiment continued with ``Experiment.open(dir).run()``.

An experiment interrupted at run 80 of 150 (a dead kernel, a kill, the stop button) could
only be run again from the start. It now commits after each finished run
(``EXPERIMENT_STEP.json``); ``open`` + ``run`` cut the rows of the run in flight and run
the rest. On the virtual clock the result must be the uninterrupted run's, call for call.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from agentlab.errors import ConfigError
from agentlab.store import open_run
from agentlab.store.lifecycle import read_status
from agentlab.topology import Experiment

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

KW = {"topologies": ["sequential", "star", "full_mesh"], "agents": 4, "runs": 4,
      "llm": "sim/vllm-3b", "clock": "virtual", "seed": 2, "progress": False,
      "metrics_interval": 0.25}  # fmt: skip
COLS = ["run_id", "agent_id", "stage", "start", "end", "queue_wait", "prompt_tokens",
        "completion_tokens", "cached_tokens"]  # fmt: skip

# a real kill -9 of the process running the experiment, a few ms of the loop after its
# AFTER-th run finished; FLUSH=1: first, the log's buffered rows are written (as the sink's
# flush interval does in a long run) until the run in flight has rows on disk to be cut
KILLED = """
import asyncio, glob, json, os, signal, sys
from agentlab.store.replay import get_replay_sink
from agentlab.topology import Experiment
from agentlab.topology.continuation import read_commit
kw = json.loads(sys.argv[2])
def in_flight_on_disk(out):
    done = set((read_commit(out) or {}).get("done", []))
    for f in glob.glob(os.path.join(out, "replay", "llm_calls", "*.jsonl")):
        for line in open(f):
            if json.loads(line).get("run_id") not in done:
                return True
    return False
async def main():
    exp = Experiment(out=sys.argv[1], **kw)
    task = asyncio.ensure_future(exp.run())
    while exp._results is None or exp._results.runs_done < int(sys.argv[3]):
        await asyncio.sleep(0.0005)  # (a sleep(0) poll would starve the virtual clock)
    for _ in range(int(sys.argv[4])):
        await asyncio.sleep(0.0005)
    while sys.argv[5] == "1":
        get_replay_sink(sys.argv[1]).flush()
        if in_flight_on_disk(sys.argv[1]):
            break
        await asyncio.sleep(0.0005)
    os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(main())
"""


def _calls(path: Path) -> pd.DataFrame:
    df = open_run(path).llm_calls_df()
    return df[[c for c in COLS if c in df]].sort_values(["start", "run_id"]).reset_index(drop=True)


def _runs(path: Path) -> pd.DataFrame:
    from agentlab.topology.experiment import ExperimentResults

    return ExperimentResults(path).runs_df().sort_values("run_id").reset_index(drop=True)


def _stop_after(out: Path, kw: dict[str, object], runs: int, spins: int = 0) -> None:
    """Run an experiment into ``out`` and cancel it (the stop button) ``spins`` half
    milliseconds after its ``runs``-th run finished; it must say ``stopped``."""

    async def go() -> None:
        exp = Experiment(out=out, **kw)  # type: ignore[arg-type]
        task = asyncio.ensure_future(exp.run())
        while exp._results is None or exp._results.runs_done < runs:
            await asyncio.sleep(0.0005)  # (a sleep(0) poll would starve the virtual clock)
        for _ in range(spins):
            await asyncio.sleep(0.0005)
        task.cancel()
        assert (await task).status == "stopped"

    asyncio.run(go())


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("straight") / "run"
    Experiment(out=out, **KW).run_sync()
    return out


@pytest.mark.parametrize(("after", "spins", "flush"), [(3, 4, 1), (6, 20, 0), (8, 2, 1)])
def test_a_killed_experiment_continues_to_the_uninterrupted_result(
    straight: Path, tmp_path: Path, after: int, spins: int, flush: int
) -> None:
    import json

    from agentlab.topology.continuation import read_commit

    out = tmp_path / "killed"
    proc = subprocess.run([sys.executable, "-c", KILLED, str(out), json.dumps(KW), str(after),
                           str(spins), str(flush)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert read_status(out) == "interrupted"  # (its writer died)
    commit = read_commit(out)
    assert commit is not None and commit["runs_done"] >= after
    in_flight = set(open_run(out).llm_calls_df().run_id) - set(commit["done"])
    assert in_flight or not flush, in_flight  # flushed: rows of the run in flight, cut below
    exp = Experiment.open(out, progress=False)
    res = exp.run_sync()
    assert res.status == "done" and res.runs_done == 12
    assert read_status(out) == "done"
    a, b = _calls(straight), _calls(out)
    assert len(a) > 100 and a.equals(b), (len(a), len(b))
    assert _runs(straight).equals(_runs(out))


def test_a_stopped_experiment_continues_and_a_finished_one_runs_nothing(
    straight: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "stopped"

    _stop_after(out, KW, runs=4, spins=10)  # inside run 5
    assert "Experiment.open(" in capsys.readouterr().err  # the stop line says how to go on
    # opened, not run: its results are what the directory holds (the four finished runs)
    held = Experiment.open(out, progress=False).results
    assert (held.status, held.runs_done) == ("stopped", 4)
    assert held.calls_df()["run_id"].nunique() == 4
    Experiment.open(out, progress=False).run_sync()
    assert _calls(straight).equals(_calls(out))
    done = Experiment.open(out, progress=False)
    assert (done.results.status, done.results.runs_done) == ("done", 12)  # read, not run
    assert done.results.calls_df().equals(done.run_sync().calls_df())
    again = Experiment.open(out, progress=False).run_sync()  # all done: nothing to run
    assert again.runs_done == 12 and _calls(straight).equals(_calls(out))


def test_what_cannot_be_continued_says_why(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="holds no topology experiment"):
        Experiment.open(tmp_path / "nothing")
    tasks = [{"id": "a", "category": "x", "prompt": "sum two numbers"}]
    Experiment(out=tmp_path / "t", tasks=tasks, **{**KW, "runs": 1}).run_sync()
    assert Experiment.open(tmp_path / "t").tasks == tasks  # given tasks are kept


def test_a_real_clock_experiment_continues_with_the_finished_runs_kept(tmp_path: Path) -> None:
    """On a real clock no server state is kept (a real server's is its own): the finished
    runs stay, the one in flight is cut, the rest run now; each run has its calls once."""
    kw = {**KW, "llm": "sim/instant", "clock": "real", "topologies": ["star", "full_mesh"],
          "runs": 3}  # fmt: skip
    straight = Experiment(out=tmp_path / "straight", **kw).run_sync()
    out = tmp_path / "cut"

    _stop_after(out, kw, runs=2)
    res = Experiment.open(out, progress=False).run_sync()
    assert res.status == "done" and res.runs_done == 6
    per_run = res.calls_df().groupby("run_id").size()
    assert per_run.equals(straight.calls_df().groupby("run_id").size())
    assert res.calls_df()["request_id"].is_unique


def test_exist_ok_true_continues_the_same_experiment_and_refuses_another(
    straight: Path, tmp_path: Path
) -> None:
    """Re-running a cell with ``exist_ok=True`` appended the same runs under the same ids
    on a clock starting at 0 again: every call twice, the second set's times overlapping
    the first's (60 calls for 30, two ``star-0000``). It now continues the same
    experiment (nothing twice) and refuses another one, naming what differs."""
    import shutil

    out = tmp_path / "again"
    shutil.copytree(straight, out)
    res = Experiment(out=out, exist_ok=True, **KW).run_sync()  # finished: nothing to run
    assert res.runs_done == 12 and _calls(out).equals(_calls(straight))
    assert _runs(out).run_id.is_unique

    _stop_after(tmp_path / "cell", {**KW, "exist_ok": "replace"}, runs=2)
    Experiment(out=tmp_path / "cell", exist_ok=True, **KW).run_sync()  # the cell re-run
    assert _calls(tmp_path / "cell").equals(_calls(straight))

    with pytest.raises(ConfigError, match=r"holds another experiment \(its seed differ"):
        Experiment(out=out, exist_ok=True, **{**KW, "seed": 3}).run_sync()
    with pytest.raises(ConfigError, match="exist_ok=True to continue it"):
        Experiment(out=out, **KW).run_sync()
    from agentlab.runtime import Society

    Society.create(tmp_path / "soc", agents=2, progress=False).close()
    with pytest.raises(ConfigError, match="holds a 'society' run, not a topology experiment"):
        Experiment(out=tmp_path / "soc", exist_ok=True, **KW).run_sync()


def test_an_experiment_from_before_commits_is_left_as_it_is(straight: Path, tmp_path: Path) -> None:
    """An experiment written by an earlier version has finished runs and no commit: a
    continuation has no marks to cut the log at, and cutting it all would lose its runs.
    It is refused and nothing changes."""
    import shutil

    from agentlab.topology.continuation import COMMIT_FILE

    out = tmp_path / "old"
    shutil.copytree(straight, out)
    (out / COMMIT_FILE).unlink()
    with pytest.raises(ConfigError, match="cannot be continued \\(nothing was changed\\)"):
        Experiment.open(out, progress=False).run_sync()
    assert _calls(out).equals(_calls(straight))
