"""``recorded_run``: a workflow of your own (a hub of LLM agents) recorded as a run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import agentlab
from agentlab import LLMAgent, Msg, MsgHub, open_run, recorded_run, sequential
from agentlab.errors import ConfigError
from agentlab.store.lifecycle import read_status


async def test_a_hub_of_llm_agents_is_recorded_as_a_run(tmp_path: Path) -> None:
    """A debate of three ``LLMAgent``s in a ``MsgHub`` (AgentScope's shape) lands in the
    run directory through the one recording path: its calls in ``llm_calls`` (each
    attempt, span), its messages in ``messages``, ``run.json`` a run of kind "debate"
    that ``agentlab runs`` lists. Before, this took ``writing_run``, ``RunServices``, its
    clock, its sinks and a flush assembled by hand (werewolf's private code)."""
    out = tmp_path / "debate"
    t0 = time.perf_counter()
    with recorded_run(out, "sim/vllm-3b", kind="debate", seed=3, config={"rounds": 2}) as rec:
        agents = [LLMAgent(n, f"You are {n}.", rec.llm) for n in ("alice", "bob", "carol")]
        async with MsgHub(agents, announcement=Msg("host", "Ship on Friday?", role="user"),
                          name="friday", sink=rec.messages("debate")):  # fmt: skip
            for _ in range(2):
                await sequential(agents)
        assert read_status(out) == "running"
    wall = time.perf_counter() - t0
    run = open_run(out)
    calls, msgs = run.llm_calls_df(), run.messages_df()
    assert len(calls) == 6 and set(calls.agent_id) == {"alice", "bob", "carol"}
    assert (calls.latency > 0.2).all() and wall < calls.latency.sum()  # virtual: no waiting
    assert len(msgs) == 7  # the announcement and 6 replies
    assert set(msgs.hub) == {"friday"} and set(msgs.run_id) == {"debate"}
    assert (run.spans_df().name == "llm.call").sum() == 6
    assert run.manifest["kind"] == "debate" and run.manifest["config"]["rounds"] == 2
    assert run.manifest["config"]["llm"] == "sim/vllm-3b" and read_status(out) == "done"
    rows = {r["run"]: r for r in agentlab.view.runs_rows(tmp_path)}
    assert rows["debate"]["llm_calls"] == 6 and rows["debate"]["status"] == "done"
    # a workflow has no ticks or steps of its own: "–", not "0 steps" (as before)
    assert rows["debate"]["ticks"] is None and rows["debate"]["steps"] is None
    line = agentlab.view.format_runs([rows["debate"]]).splitlines()[-1].split()
    assert line[5:8] == ["–", "–", "6"]  # ticks, steps, llm_calls
    run.close()


async def test_a_block_that_raises_marks_the_run_failed_and_keeps_what_ran(
    tmp_path: Path,
) -> None:
    out = tmp_path / "w"
    with pytest.raises(RuntimeError, match="boom"), recorded_run(out, "sim/instant") as rec:
        await rec.llm.complete([{"role": "user", "content": "hi"}], agent_id="a")
        raise RuntimeError("boom")
    assert read_status(out) == "failed" and len(open_run(out).llm_calls_df()) == 1
    with pytest.raises(ConfigError, match="already holds a run"), recorded_run(out, "sim/instant"):
        pass
    with recorded_run(out, "sim/instant", exist_ok="replace"):
        pass
    assert read_status(out) == "done" and "llm_calls" not in open_run(out).dataset_names()


def test_a_virtual_clock_needs_a_simulated_model(tmp_path: Path) -> None:
    bad = recorded_run(tmp_path / "x", "openai/gpt-4o-mini", clock="virtual")
    with pytest.raises(ConfigError, match="clock='virtual' needs a simulated model"), bad:
        pass
