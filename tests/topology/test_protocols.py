"""The free-text workflow: markers, history truncation, what each protocol shows, rates.

Prompts are read off a pass-through wrapper around a real ``LLMClient("sim/vllm-3b")``
(it only records the messages before delegating ``complete``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from agentlab.core.clock import VirtualClock
from agentlab.errors import ConfigError
from agentlab.llm import LLMClient
from agentlab.topology import (
    TRUNCATION_NOTE,
    Experiment,
    RunContext,
    WorkflowConfig,
    has_approval,
    has_consensus,
    parse_evaluation,
    run_workflow,
    truncate_history,
)

TASK = {"id": "t", "category": "x", "prompt": "Compare TCP and UDP."}


class Capture:
    """Records (labels, user prompt) of every call, then delegates to the real client."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[dict[str, Any], str]] = []
        self.kwargs: list[set[str]] = []

    async def complete(self, messages: list[dict[str, Any]], **kw: Any) -> Any:
        self.calls.append((dict(kw.get("labels") or {}), messages[-1]["content"]))
        self.kwargs.append(set(kw))
        return await self.inner.complete(messages, **kw)


def _run(
    topo: str, seed: int = 0, simulated: bool = True, **cfg: Any
) -> tuple[Capture, dict[str, Any]]:
    async def main() -> tuple[Capture, dict[str, Any]]:
        clock = VirtualClock()
        cap = Capture(LLMClient("sim/vllm-3b", seed=seed).with_clock(clock))
        ctx = RunContext(cap, WorkflowConfig(**cfg), topo, f"{topo}-0", TASK, clock,
                         simulated=simulated)  # fmt: skip
        return cap, await run_workflow(ctx)

    return asyncio.run(main())


def _prompts(cap: Capture, **match: Any) -> list[str]:
    return [p for lab, p in cap.calls if all(lab.get(k) == v for k, v in match.items())]


@pytest.mark.parametrize(
    ("text", "consensus", "approved"),
    [
        ("I agree. [CONSENSUS]", True, False),
        ("ok **consensus**", True, False),
        ("**CONSENSUS:** done", True, False),
        ("[Approved] looks right", False, True),
        ("**APPROVED**", False, True),
        ("no consensus yet; not approved", False, False),
        ("CONSENSUS without brackets", False, False),
        ("", False, False),
    ],
)
def test_marker_parsing(text: str, consensus: bool, approved: bool) -> None:
    assert has_consensus(text) is consensus
    assert has_approval(text) is approved


def test_history_truncation_keeps_the_tail() -> None:
    h = "".join(f"line {i}\n" for i in range(1000))
    assert truncate_history(h[:50], 6000) == h[:50]
    cut = truncate_history(h, 100)
    assert cut == TRUNCATION_NOTE + h[-100:]
    assert truncate_history("x" * 100, 100) == "x" * 100  # at the cap: unchanged
    assert truncate_history(h, 0) == h  # 0 disables the cap


@pytest.mark.parametrize(
    ("reply", "score", "scored"),
    [
        ('{"goal_achieved": true, "score": 92, "feedback": ""}', 92, True),
        ('```json\n{"score": 71}\n```', 71, True),
        ('Here it is: {"score": 140, "goal_achieved": false} thanks', 100, True),
        ("Overall score: 65\nFeedback: add tests", 65, True),
        ("The team did fine.", 0, False),
        ('{"score": "n/a"}', 0, True),
    ],
)
def test_evaluation_parsing(reply: str, score: int, scored: bool) -> None:
    ev = parse_evaluation(reply)
    assert ev["score"] == score and ev["scored"] is scored


@pytest.mark.parametrize(("topo", "marker"), [("sequential", "[CONSENSUS]"),
                                              ("full_mesh", "[CONSENSUS]"),
                                              ("star", "[APPROVED]")])  # fmt: skip
def test_real_and_simulated_servers_get_the_same_marker_instructions(
    topo: str, marker: str
) -> None:
    """A non-``sim/`` backend (``simulated=False``) is asked for the markers in the same
    words; only the simulator's ``sim_*`` overrides are left out."""
    sim, _ = _run(topo, rounds=1, max_iterations=1)
    real, _ = _run(topo, rounds=1, max_iterations=1, simulated=False)
    asks = [lab.get("call") != "vertical_solver" for lab, _ in sim.calls]
    disc = [p for (lab, p), a in zip(sim.calls, asks, strict=True)
            if lab["stage"] == "discussion" and a]  # fmt: skip
    assert disc and all(marker in p for p in disc)
    # round 1 shows no earlier reply, so the two backends' prompts are identical
    assert [p for lab, p in real.calls if lab["stage"] == "discussion"] == [
        p for lab, p in sim.calls if lab["stage"] == "discussion"
    ]
    assert any(any(k.startswith("sim_") for k in kw) for kw in sim.kwargs)
    assert not any(any(k.startswith("sim_") for k in kw) for kw in real.kwargs)


def test_sequential_shows_previous_rounds_only() -> None:
    # history_chars=0: no truncation (four ~460-token turns pass the 6000-character cap;
    # truncation has its own tests), so the whole of round 1 must be visible
    cap, run = _run("sequential", rounds=2, consensus_rates={"sequential": (0.0,)},
                    pass_rates={"sequential": 1.0}, history_chars=0)  # fmt: skip
    r1 = _prompts(cap, stage="discussion", round=1)
    r2 = _prompts(cap, stage="discussion", round=2)
    assert len(r1) == len(r2) == 4
    assert all("(No discussion yet)" in p and "--- Round" not in p for p in r1)
    # every round-2 prompt shows all four round-1 replies and none of round 2
    for p in r2:
        assert p.count("--- Round 1 ---") == 1 and "--- Round 2 ---" not in p
        block = p.split("--- Round 1 ---\n", 1)[1].split("\n\nRound: 2")[0]
        assert len([ln for ln in block.splitlines() if ln.split(":")[0].isupper()]) == 4
    synth = _prompts(cap, stage="synthesis")
    assert len(synth) == 1 and "--- Round 2 ---" in synth[0]
    assert run["discussion_rounds"] == 2 and run["early_stops"] == 0


def test_star_reviewers_see_the_current_proposal() -> None:
    cap, _ = _run("star", seed=2, rounds=2, pass_rates={"star": 1.0})
    solver = _prompts(cap, stage="discussion", call="vertical_solver")
    assert len(solver) == 2
    assert "previous proposal" not in solver[0] and "critiques" not in solver[0].lower()
    assert "Your previous proposal:" in solver[1] and "Reviewer critiques:" in solver[1]
    for rnd in (1, 2):
        reviews = _prompts(cap, stage="discussion", call="vertical_reviewer", round=rnd)
        assert len(reviews) == 3
        proposal = solver[1].split("Your previous proposal:\n", 1)[1].split("\n\nReviewer")[0]
        if rnd == 1:  # the proposal the reviewers saw is the solver's next "previous"
            assert all(proposal in p for p in reviews)
        assert all("Discussion so far" not in p and "transcript" not in p for p in reviews)


def test_full_mesh_messages_and_truncated_history() -> None:
    cap, _ = _run("full_mesh", rounds=3, history_chars=300,
                  consensus_rates={"full_mesh": (0.0,)}, pass_rates={"full_mesh": 1.0})  # fmt: skip
    for rnd in (1, 2, 3):
        ps = _prompts(cap, stage="discussion", round=rnd)
        assert len(ps) == 12
    r2 = _prompts(cap, stage="discussion", round=2)
    full = r2[0].split("Full-mesh transcript so far:\n", 1)[1].split("\n\nRound: 2")[0]
    # round 1's 12 directed lines were longer than 300 chars: the tail is kept
    assert full.startswith(TRUNCATION_NOTE) and len(full) == len(TRUNCATION_NOTE) + 300
    labels = [lab for lab, _ in cap.calls if lab.get("stage") == "discussion"]
    assert {lab["call"] for lab in labels} == {"full_mesh_message"}
    assert all(lab["receiver"] != lab["sender"] for lab in labels)


def test_iterations_recruit_again_and_early_stop_off() -> None:
    cap, run = _run("sequential", pass_rates={"sequential": 0.0},
                    consensus_rates={"sequential": (1.0,)}, early_stop=False)  # fmt: skip
    stages = [lab["stage"] for lab, _ in cap.calls]
    assert stages.count("recruitment") == 3 and run["iterations"] == 3
    assert run["unscored"] == 3 and run["passed"] is False and run["score"] == 0
    # every round agreed, but early_stop=False completes all 3 rounds each iteration
    assert stages.count("discussion") == 3 * 3 * 4 and run["early_stops"] == 0
    # the evaluator's feedback is in the next recruitment prompt
    rec = _prompts(cap, stage="recruitment")
    assert "Feedback from the previous iteration" not in rec[0]
    assert all("Feedback from the previous iteration" in p for p in rec[1:])
    # Star stops on approval even without early_stop, as the original
    cap, run = _run("star", pass_rates={"star": 1.0}, consensus_rates={"star": (1.0,)},
                    early_stop=False)  # fmt: skip
    assert run["discussion_rounds"] == 1


def test_structured_style_keeps_the_call_graph() -> None:
    cap, run = _run("full_mesh", style="structured", rounds=2,
                    consensus_rates={"full_mesh": (0.0,)}, pass_rates={"full_mesh": 1.0})  # fmt: skip
    assert len(_prompts(cap, stage="discussion")) == 24 and run["status"] == "ok"


def test_rates_are_honoured_on_the_simulator() -> None:
    """Round-1 agreement and the pass rate match the configured values (binomial 4 sigma).

    1000 full-mesh runs: tight enough to see correlated markers (e.g. two peers of the same
    role getting identical requests, which once pushed 0.40 to 0.47).
    """
    n = 1000
    res = Experiment(topologies=["full_mesh"], runs=n, progress=False, seed=5,
                     rounds=1, consensus_rates={"full_mesh": (0.4,)},
                     pass_rates={"full_mesh": 0.75}, max_iterations=1).run_sync()  # fmt: skip
    runs = res.runs_df()
    for got, p in ((runs.early_stops.mean(), 0.4), (runs.passed.mean(), 0.75)):
        assert abs(got - p) < 4 * (p * (1 - p) / n) ** 0.5, (got, p)


def test_config_errors_name_the_bad_value() -> None:
    with pytest.raises(ConfigError, match="style"):
        WorkflowConfig(style="json")
    with pytest.raises(ConfigError, match="consensus_rates"):
        WorkflowConfig(consensus_rates={"star": (1.5,)})
    with pytest.raises(ConfigError, match="pass_rates"):
        WorkflowConfig(pass_rates={"star": -0.1})


def test_sim_marker_override_is_seeded_and_free_text_only() -> None:
    """The simulator ends a free-text reply with ``sim_marker`` at rate ``sim_marker_p``."""

    async def main() -> tuple[list[bool], list[bool], str]:
        clock = VirtualClock()
        a = LLMClient("sim/instant", seed=1).with_clock(clock)
        b = LLMClient("sim/instant", seed=1).with_clock(clock)
        msgs = [[{"role": "user", "content": f"turn {i}"}] for i in range(400)]
        kw = {"sim_marker": "[CONSENSUS]", "sim_marker_p": 0.3}
        ra = [has_consensus((await a.complete(m, **kw)).text) for m in msgs]
        rb = [has_consensus((await b.complete(m, **kw)).text) for m in msgs]
        js = await a.complete(msgs[0], response_format=_Flag, **kw)
        return ra, rb, js.text

    ra, rb, structured = asyncio.run(main())
    assert ra == rb  # same seed, same requests: the same decisions
    assert abs(sum(ra) / len(ra) - 0.3) < 4 * (0.3 * 0.7 / len(ra)) ** 0.5
    assert "[CONSENSUS]" not in structured  # structured replies stay valid JSON


class _Flag(BaseModel):
    ok: bool


def test_workflow_rates_round_trip() -> None:
    """Rates estimated from the calls of a simulated study recover the configured ones."""
    from agentlab.topology import workflow_rates, workflow_rates_df

    rates = {"sequential": (0.2, 0.5, 0.5), "full_mesh": (0.4, 0.6, 0.6)}
    passes = {"sequential": 0.6, "full_mesh": 0.8}
    n = 250
    res = Experiment(topologies=["sequential", "full_mesh"], runs=n, progress=False, seed=9,
                     consensus_rates=rates, pass_rates=passes).run_sync()  # fmt: skip
    calls = res.calls_df()
    got = workflow_rates(calls)
    table = workflow_rates_df(calls)
    for topo in rates:
        for r in (1, 2):
            row = table[(table.topology == topo) & (table["round"] == r)].iloc[0]
            p = rates[topo][r - 1]
            assert abs(row.rate - p) < 4 * (p * (1 - p) / row.reached) ** 0.5, (topo, r, row.rate)
        assert got["consensus_rates"][topo][2] == got["consensus_rates"][topo][1]  # carried
        prow = table[(table.topology == topo) & (table.kind == "pass")].iloc[0]
        p = passes[topo]
        assert abs(prow.rate - p) < 4 * (p * (1 - p) / prow.reached) ** 0.5, (topo, prow.rate)
    WorkflowConfig(**got)  # ready to use
    with pytest.raises(ConfigError, match="columns"):
        workflow_rates(calls.drop(columns="round"))


def test_rates_per_task_category_are_looked_up_first() -> None:
    """``topology/category`` keys win over the topology's; a category without its own key,
    no category and a config without category keys use the topology's rates."""
    cfg = WorkflowConfig(consensus_rates={"full_mesh": (0.4, 0.5), "full_mesh/math": (0.1,)},
                         pass_rates={"full_mesh": 0.75, "full_mesh/math": 0.6})  # fmt: skip
    assert cfg.round_rate("full_mesh", 1, "math") == 0.1
    assert cfg.round_rate("full_mesh", 3, "math") == 0.1  # past the tuple: its last value
    assert cfg.round_rate("full_mesh", 2, "coding") == 0.5
    assert cfg.round_rate("full_mesh", 2) == 0.5
    assert cfg.round_rate("star", 1, "math") == 0.0
    assert (cfg.pass_rate("full_mesh", "math"), cfg.pass_rate("full_mesh", "coding")) == (0.6, 0.75)
    assert cfg.pass_rate("star") == 0.0


def test_the_paper_category_rates_pool_to_the_topology_rates() -> None:
    """The published per-category rates, weighted by the discussions (iterations) that
    reached each round in each category (workflow.json ``groups.<category>``), give back the
    all-task rate: a check of the hand copy."""
    from agentlab.topology import PAPER_CONSENSUS_RATES, PAPER_PASS_RATES

    cats = ("math", "research", "consulting", "coding")
    reached = {  # consensus.per_round[r].reached per category
        "sequential": ((175, 175, 170), (126, 89, 29), (156, 156, 142), (156, 149, 77)),
        "full_mesh": ((187, 170, 68), (130, 43, 1), (161, 145, 72), (175, 36, 7)),
    }
    for topo, rows in reached.items():
        for r in range(3):
            agreed = sum(
                PAPER_CONSENSUS_RATES[f"{topo}/{c}"][r] * n[r]
                for c, n in zip(cats, rows, strict=True)
            )
            total = sum(n[r] for n in rows)
            assert agreed / total == pytest.approx(PAPER_CONSENSUS_RATES[topo][r], abs=0.002)
    iterations = {"sequential": (175, 126, 156, 156), "star": (144, 148, 147, 214),
                  "full_mesh": (187, 130, 161, 175)}  # fmt: skip
    for topo, its in iterations.items():
        passed = sum(PAPER_PASS_RATES[f"{topo}/{c}"] * n for c, n in zip(cats, its, strict=True))
        assert passed / sum(its) == pytest.approx(PAPER_PASS_RATES[topo], abs=0.001)
