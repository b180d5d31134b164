"""Seeded vote tie-breaking and the LLM agent inside a hub."""

from __future__ import annotations

import json
import random

from pydantic import BaseModel

from agentlab.core.clock import VirtualClock
from agentlab.messaging import LLMAgent, Msg, MsgHub, majority_vote, tally


def test_majority_and_abstentions() -> None:
    r = majority_vote({"a": "x", "b": "x", "c": "y", "d": None})
    assert r.winner == "x" and r.counts == (("x", 2), ("y", 1)) and r.abstentions == ("d",)
    assert r.tied == ("x",)
    assert majority_vote({"a": None}).winner is None
    assert tally(["x", None, "x"]) == {"x": 2}


def test_ties_are_broken_by_seed_independent_of_order() -> None:
    votes = {"a": "x", "b": "y", "c": "z"}
    rev = dict(reversed(list(votes.items())))
    winners = {majority_vote(votes, seed=s).winner for s in range(30)}
    assert winners == {"x", "y", "z"}  # every tied candidate can win
    for s in range(10):
        assert majority_vote(votes, seed=s) == majority_vote(rev, seed=s)
        assert (
            majority_vote(votes, seed=random.Random(s)).winner
            == majority_vote(votes, seed=s).winner
        )


class Opinion(BaseModel):
    agree: bool


async def test_llm_agent_in_a_hub(scripted) -> None:
    clock = VirtualClock()
    c1 = scripted(["I propose A"], clock=clock, latency=2.0)
    c2 = scripted([json.dumps({"agree": True})], clock=clock, latency=1.0)
    a = LLMAgent("ann", "you are ann", c1, role="expert", labels={"stage": "discussion"})
    b = LLMAgent("bob", "you are bob", c2, role="critic", clock=clock)
    async with MsgHub([a, b], announcement="task: pick") as hub:
        m1 = await a()
        m2 = await b(instruction="do you agree?", response_format=Opinion)
    assert m1.ts == 2.0 and m1.usage is not None and m1.usage.completion_tokens == 5
    assert m2.structured == Opinion(agree=True) and m2.metadata["structured_status"] == "ok"
    # bob saw the announcement and ann's proposal; the instruction was for one call only
    chat = c2.calls[0]["messages"]
    assert chat[0] == {"role": "system", "content": "you are bob"}
    assert [m["content"] for m in chat[1:]] == [
        "system: task: pick",
        "ann: I propose A",
        "do you agree?",
    ]
    assert [m.content for m in b.memory][-1] == m2.content
    assert c1.calls[0]["labels"] == {
        "sender": "ann",
        "sender_role": "expert",
        "stage": "discussion",
    }
    assert c1.calls[0]["agent_id"] == "ann"
    assert a.memory[-1] is m2 or a.memory[-1].content == m2.content
    assert len(hub.history) == 3
    # at the end of a cell: the agent and its memory say what they hold (the memory read
    # "<agentlab.messaging.agent.Memory at 0x...>", an agent without a role "role=''")
    assert repr(a) == "LLMAgent('ann', role='expert', 3 messages in memory)"
    assert repr(LLMAgent("cy", "s", c1)) == "LLMAgent('cy', 0 messages in memory)"
    lines = repr(b.memory).splitlines()
    assert lines[0] == "Memory(3 messages)" and lines[-1] == f"  {m2!r}", lines
    b.memory.add([m1] * 5)
    assert repr(b.memory).splitlines()[:2] == ["Memory(8 messages)", "  ... 3 earlier"]


async def test_llm_agent_abstention_is_visible_in_the_transcript(scripted) -> None:
    a = LLMAgent("ann", "s", scripted(["x", "y"]), policy="abstain")
    m = await a(response_format=Opinion)
    assert m.structured is None and m.content == "[abstained]"
    assert m.metadata == {"structured_status": "abstained", "attempts": 2}
    assert a.last_result is not None and a.last_result.abstained
    assert isinstance(Msg("x", "y"), Msg)


def test_every_exported_name_resolves_and_imports_stay_light() -> None:
    import importlib
    import subprocess
    import sys

    for mod in ("agentlab.messaging", "agentlab.topology", "agentlab.games"):
        m = importlib.import_module(mod)
        assert all(hasattr(m, n) for n in m.__all__), mod
    code = (
        "import sys, agentlab.messaging, agentlab.topology, agentlab.games;"
        "print(sorted(m for m in ('litellm','ray','duckdb','pandas','plotly','scipy') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
