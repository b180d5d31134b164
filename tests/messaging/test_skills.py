"""Agent Skills on messaging agents: the society agent's SkillSet, handed in (messaging
does not import agents: one implementation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlab import open_run
from agentlab.agents.skills import Skill, SkillSet
from agentlab.errors import ConfigError
from agentlab.llm import LLMClient
from agentlab.messaging import LLMAgent, Msg

SKILL = Skill(
    "invoice-helper",
    "Pay and check invoices.",
    body="Check the amount first.",
    metadata={"keywords": "invoice bill"},
    files={"references/fees.md": "LATE FEE TABLE"},
)


class Spy:
    """Wraps the simulated LLM and keeps what each call was sent."""

    def __init__(self, llm: LLMClient) -> None:
        self.llm = llm
        self.calls: list[dict[str, Any]] = []

    async def complete(self, messages: list[dict[str, Any]], **kw: Any) -> Any:
        self.calls.append({"system": messages[0]["content"], "tools": kw.get("tools")})
        return await self.llm.complete(messages, **kw)


async def test_keyword_activation_on_matching_messages_only() -> None:
    spy = Spy(LLMClient("sim/instant", seed=1))
    skills = SkillSet([SKILL], mode="keyword")
    agent = LLMAgent("alice", "You are Alice.", spy, skills=skills)
    await agent(Msg("bob", "the weather is nice"))
    first = spy.calls[-1]["system"]
    assert "- invoice-helper: Pay and check invoices." in first  # listed
    assert "Check the amount first" not in first and not skills.active
    await agent(Msg("bob", "can you pay the invoice for me?"))
    assert "Active skill invoice-helper:\nCheck the amount first." in spy.calls[-1]["system"]
    assert skills.active == {"invoice-helper": "keyword"}
    await agent(Msg("bob", "thanks"))
    assert not skills.active  # a reply is a step


async def test_tool_activation_is_recorded(tmp_path: Path) -> None:
    from agentlab.store.manifest import write_manifest
    from agentlab.store.replay import get_replay_sink

    write_manifest(tmp_path, kind="messaging", config={}, seed=None)
    sink = get_replay_sink(tmp_path)
    skills = SkillSet([SKILL], mode="tool").record_to(sink, run_id="r1")
    spy = Spy(LLMClient("sim/instant", seed=2, sim_tool_call_p=1.0))  # always calls a tool
    agent = LLMAgent("alice", "You are Alice.", spy, skills=skills, skill_rounds=2)
    out = await agent(Msg("bob", "hello"))
    assert out.content  # the last round offered no tools: the model answered
    assert [c["tools"] is not None for c in spy.calls] == [True, True, False]
    sink.flush()
    rows = open_run(tmp_path).sql(
        "select run_id, agent_id, skill, how, action from skill_activations"
    )
    assert len(rows) >= 1 and set(rows.agent_id) == {"alice"} and set(rows.run_id) == {"r1"}
    assert set(rows.how) == {"tool"}
    with pytest.raises(ConfigError, match="skill_rounds"):
        LLMAgent("x", "s", spy, skills=skills, skill_rounds=-1)
