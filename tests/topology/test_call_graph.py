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


def _expected_rounds(rates: tuple[float, ...], rounds: int = 3) -> float:
    """E[rounds] when round r ends the discussion with probability rates[r]."""
    mean, alive = 0.0, 1.0
    for r in range(1, rounds + 1):
        stop = alive * (rates[min(r, len(rates)) - 1] if r < rounds else 1.0)
        mean += r * stop
        alive -= stop
    return mean


@pytest.mark.parametrize("topo", ["sequential", "star", "full_mesh"])
def test_default_call_graph_per_iteration(tmp_path: Path, topo: str) -> None:
    """Under the paper defaults: each iteration is recruitment → r discussion rounds →
    (synthesis) → N executions → evaluation, r in 1..3 at the configured stop rates (of the
    run's task category)."""
    from agentlab.topology import PAPER_CONSENSUS_RATES

    n, runs = 4, 120
    res = Experiment(topologies=[topo], agents=n, runs=runs, seed=11, progress=False,
                     out=tmp_path / topo).run_sync()  # fmt: skip
    calls = res.calls_df()
    per_round = {"sequential": n, "star": n, "full_mesh": n * (n - 1)}[topo]
    assert (calls.groupby("run_id").stage.apply(lambda s: (s == "final").sum()) == 1).all()
    rounds = []
    for (_, it), grp in calls[calls.stage != "final"].groupby(["run_id", "iteration"]):
        assert 1 <= it <= 3
        counts = grp.stage.value_counts().to_dict()
        r = int(grp[grp.stage == "discussion"]["round"].max())
        rounds.append(r)
        want = {"recruitment": 1, "discussion": r * per_round, "execution": n, "evaluation": 1}
        if topo != "star":
            want["synthesis"] = 1
        assert counts == want
        order = grp.groupby("stage").start.min().sort_values().index.tolist()
        assert order == [s for s in ("recruitment", "discussion", "synthesis", "execution",
                                     "evaluation") if s in want]  # fmt: skip
        ex = grp[grp.stage == "execution"]
        assert _peak(ex) == n and _together(ex.start)
        disc = grp[grp.stage == "discussion"]
        assert _peak(disc) == {"sequential": 1, "star": n - 1, "full_mesh": 5}[topo]
    # each run at its task category's rates (``<topology>/<category>``, else the topology's)
    cats = calls.groupby("run_id")["labels"].first().map(lambda lab: lab.get("task_category"))
    per_run = [
        _expected_rounds(PAPER_CONSENSUS_RATES.get(f"{topo}/{c}", PAPER_CONSENSUS_RATES[topo]))
        for (run, _it) in calls[calls.stage != "final"].groupby(["run_id", "iteration"]).groups
        for c in [cats[run]]
    ]
    expected = sum(per_run) / len(per_run)
    sd = float(pd.Series(rounds).std()) if len(set(rounds)) > 1 else 0.0
    assert abs(sum(rounds) / len(rounds) - expected) <= 4 * sd / len(rounds) ** 0.5 + 1e-9, (
        sum(rounds) / len(rounds), expected)  # fmt: skip
    if topo == "star":  # reviewers never all approve in the paper's runs
        assert set(rounds) == {3}
