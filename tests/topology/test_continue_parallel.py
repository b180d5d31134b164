"""An interrupted Experiment with ``parallel_runs > 1`` continued with ``Experiment.open``.

Runs in parallel interleave in the log, so no byte mark separates the finished runs from
those in flight, and such an experiment could not be continued: a study of 600 runs on a
real endpoint, run 8 at a time to finish in hours, started over after a crash. It now
commits the finished runs after each (``interleaved``) and the continuation rewrites the
log keeping their rows (``store/prune.py``). What must hold: every planned run once in the
results, no row or span of a run that was cut, the finished runs' calls as they ran, each
shard's ``_seq`` contiguous, each metrics sample once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from agentlab.analysis.inflight import inflight_summary_df
from agentlab.store import open_run
from agentlab.store.layout import REPLAY_DIR, TRACE_DIR
from agentlab.store.lifecycle import read_status
from agentlab.topology import Experiment
from agentlab.topology.continuation import read_commit
from tests.topology.test_continue import KILLED, _stop_after

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

KW = {"topologies": ["sequential", "star", "full_mesh"], "agents": 4, "runs": 4,
      "llm": "sim/vllm-3b", "clock": "virtual", "seed": 2, "progress": False,
      "metrics_interval": 0.25, "parallel_runs": 3}  # fmt: skip
COLS = ["run_id", "agent_id", "stage", "start", "end", "prompt_tokens", "completion_tokens"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("straight") / "run"
    Experiment(out=out, **KW).run_sync()
    return out


def _calls(path: Path, run_id: str) -> pd.DataFrame:
    df = open_run(path).llm_calls_df()
    return df[df.run_id == run_id][COLS].sort_values("start").reset_index(drop=True)


def _check_log(out: Path, planned: int) -> None:
    """Every run once; each run's calls, messages and spans of its one (last) attempt."""
    run = open_run(out)
    runs = run.df("experiment_runs")
    assert len(runs) == planned and runs.run_id.is_unique, runs.run_id.value_counts().head()
    window = runs.set_index("run_id")[["start", "end"]]
    calls, msgs = run.llm_calls_df(), run.df("messages")
    for rid, g in calls.groupby("run_id"):  # a cut attempt's calls began before the rerun
        assert g.start.min() >= window.start[rid] and g.end.max() <= window.end[rid], rid
    for rid, g in msgs.groupby("run_id"):
        assert g.ts.min() >= window.start[rid] and g.ts.max() <= window.end[rid], rid
    spans = run.df("spans")
    assert (spans.name == "experiment.run").sum() == planned
    assert (spans.name == "llm.call").sum() == len(calls)  # no span of a cut run's call
    samples = run.df("server_metrics").ts
    assert samples.is_unique  # (none taken twice: the cut stretch is sampled once, again)
    for shard in [*(out / REPLAY_DIR).glob("*/*.jsonl"), *(out / TRACE_DIR).glob("*.jsonl")]:
        seqs = [json.loads(line)["_seq"] for line in shard.read_bytes().splitlines()]
        assert seqs == list(range(len(seqs))), shard


def _most_at_once(runs: pd.DataFrame) -> int:
    """The most runs in flight at one time (each run a "call" from its start to its end)."""
    return int(inflight_summary_df(runs.assign(all=0), by="all").peak_in_flight.iloc[0])


@pytest.mark.parametrize(("after", "spins"), [(2, 6), (7, 30)])
def test_a_killed_parallel_experiment_keeps_its_finished_runs_and_runs_the_rest(
    straight: Path, tmp_path: Path, after: int, spins: int
) -> None:
    out = tmp_path / "killed"
    proc = subprocess.run([sys.executable, "-c", KILLED, str(out), json.dumps(KW), str(after),
                           str(spins), "1"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == -9, proc.stderr[-2000:]
    commit = read_commit(out)
    assert commit is not None and commit.get("interleaved") and commit["runs_done"] >= after
    cut = set(open_run(out).llm_calls_df().run_id) - set(commit["done"])
    assert cut, "the runs in flight had rows on disk (FLUSH=1): they must be cut"

    exp = Experiment.open(out, progress=False)
    assert exp.parallel_runs == 3  # (open built it with 1: the rest ran one at a time)
    res = exp.run_sync()
    assert res.status == "done" and res.runs_done == 12 and read_status(out) == "done"
    _check_log(out, 12)
    rest = open_run(out).df("experiment_runs").query("start >= @commit['ts']")
    assert _most_at_once(rest) == 3, rest[["run_id", "start", "end"]]
    for rid in commit["done"]:  # kept as they ran: the uninterrupted study's calls
        assert _calls(straight, rid).equals(_calls(out, rid)), rid
    assert Experiment.open(out, progress=False).run_sync().runs_done == 12  # nothing left


def test_a_stopped_parallel_experiment_continues(tmp_path: Path) -> None:
    out = tmp_path / "stopped"
    _stop_after(out, KW, runs=4, spins=10)
    before = open_run(out).llm_calls_df()
    assert set(before.run_id) - set(read_commit(out)["done"])  # runs in flight were cut
    res = Experiment.open(out, progress=False).run_sync()
    assert res.status == "done" and len(res.runs_df()) == 12
    _check_log(out, 12)
