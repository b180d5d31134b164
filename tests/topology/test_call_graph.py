"""Each topology's call graph for N = 3, 4, 5: calls per stage and which calls overlap.

Rates are pinned (never / always agree, evaluator always passes) so the counts are exact.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from agentlab.topology import Experiment

R = 2  # rounds


def _run(tmp_path: Path, topo: str, n: int, p: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    exp = Experiment(
        topologies=[topo],
        agents=n,
        runs=1,
        seed=3,
        progress=False,
        out=tmp_path / f"{topo}{n}{p}",
        rounds=R,
        consensus_rates={topo: (p,)},
        pass_rates={topo: 1.0},
        llm="sim/vllm-3b",
    )
    res = exp.run_sync()
    return res.calls_df(), res.runs_df()


def _peak(df: pd.DataFrame) -> int:
    ev = sorted([(s, 1) for s in df.start] + [(e, -1) for e in df.end])
    cur = peak = 0
    for _, d in ev:
        cur += d
        peak = max(peak, cur)
    return peak


# A fan-out's calls leave the client one after another, each after ~4 ms of client CPU
# (the profile's client_overhead_s): "together" means within this window, never 0 apart.
FANOUT_WINDOW = 0.1


def _together(starts: pd.Series) -> bool:
    gaps = starts.sort_values().diff().dropna()
    return bool(starts.max() - starts.min() < FANOUT_WINDOW and (gaps > 0).all())


def _expected(topo: str, n: int, rounds: int) -> dict[str, int]:
    per_round = {"sequential": n, "star": n, "full_mesh": n * (n - 1)}[topo]
    exp = {"recruitment": 1, "discussion": rounds * per_round, "execution": n, "evaluation": 1,
           "final": 1}  # fmt: skip
    if topo != "star":
        exp["synthesis"] = 1
    return exp


@pytest.mark.parametrize("n", [3, 4, 5])
@pytest.mark.parametrize("topo", ["sequential", "star", "full_mesh"])
def test_counts_per_stage_and_overlap(tmp_path: Path, topo: str, n: int) -> None:
    calls, runs = _run(tmp_path, topo, n, p=0.0)  # nobody ever agrees: all R rounds
    assert calls.groupby("stage").size().to_dict() == _expected(topo, n, R)
    assert (calls.outcome == "ok").all() and runs.status.tolist() == ["ok"]
    assert calls.ttft.notna().all() and (calls.queue_wait >= 0).all()
    for col in ("stage", "iteration", "sender", "receiver_role", "topology", "run_id", "task_id"):
        assert calls[col].notna().all(), col
    disc = calls[calls.stage == "discussion"]
    assert sorted(disc["round"].unique()) == list(range(1, R + 1))
    # stages never overlap each other: the workflow is a sequence of phases
    spans = calls.groupby("stage").agg(s=("start", "min"), e=("end", "max")).sort_values("s")
    assert (spans.s.iloc[1:].to_numpy() >= spans.e.iloc[:-1].to_numpy() - 1e-9).all()
    ex = calls[calls.stage == "execution"]
    # N expert calls in parallel; the client sends them a few ms apart (client_overhead_s)
    assert _together(ex.start) and _peak(ex) == n
    for stage in ("recruitment", "evaluation", "final"):
        assert _peak(calls[calls.stage == stage]) == 1
    if topo == "sequential":
        assert _peak(disc) == 1  # one speaker at a time
        order = disc.sort_values("start").sender.tolist()
        assert order == [f"expert_{i + 1}" for i in range(n)] * R
    elif topo == "star":
        solver = disc[disc.receiver_role == "reviewer"].sender.unique()
        assert len(solver) == 1  # one solver (the first planner, else expert_1)
        sol = disc[disc.sender == solver[0]]
        rev = disc[disc.sender != solver[0]]
        assert len(sol) == R and (sol.receiver_role == "reviewer").all()
        assert (rev.receiver_role == "solver").all() and _peak(rev) == n - 1
        for _, grp in rev.groupby("round"):
            assert _together(grp.start)  # reviewers start together
            assert grp.start.min() >= sol[sol["round"] == grp["round"].iloc[0]].end.max()
    else:
        assert _peak(disc) == min(5, n * (n - 1))  # max_parallel worker pool
        for _, grp in disc.groupby("round"):
            pairs = set(zip(grp.sender, grp.receiver, strict=True))
            assert len(pairs) == n * (n - 1) and all(s != r for s, r in pairs)
            first = grp.sort_values("start").start.iloc[0]
            assert (grp.start < first + FANOUT_WINDOW).sum() == min(5, n * (n - 1))


@pytest.mark.parametrize("topo", ["sequential", "star", "full_mesh"])
def test_early_stop_when_everyone_agrees(tmp_path: Path, topo: str) -> None:
    calls, runs = _run(tmp_path, topo, 4, p=1.0)
    assert calls.groupby("stage").size().to_dict() == _expected(topo, 4, 1)
    assert runs.early_stops.tolist() == [1] and runs.discussion_rounds.tolist() == [1]
