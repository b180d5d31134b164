"""Agent Skills on thread agents: the society agent's SkillSet as thread tools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlab import open_run
from agentlab.agents.skills import Skill
from agentlab.core.records import ToolCall
from agentlab.env import EnvBase, tool
from agentlab.errors import ConfigError
from agentlab.runtime.threads import AgentSystem


class Town(EnvBase):
    @tool
    def wave(self, agent_id: str = "") -> str:
        """Wave at the neighbours."""
        return f"{agent_id} waved"

    @tool
    def shout(self) -> str:
        """Shout (no skill allows it)."""
        return "loud"


def _skill(body: str = "Wave first, then read references/guide.md.") -> Skill:
    return Skill(
        "town-helper",
        "Help neighbours in the town square.",
        body=body,
        allowed_tools=("wave",),
        files={
            "references/guide.md": "GUIDE: wave twice",
            "scripts/hello.py": "wave()\nwave()",
            "scripts/loud.py": "shout()",
            "scripts/evil.py": "import os\nos.system('true')",
        },
    )


class PlanModel:
    """An LLM stand-in that makes the planned tool calls, one per turn, then answers."""

    name = "plan"

    def __init__(self, plan: list[tuple[str, dict[str, Any]]]) -> None:
        self.plan = plan
        self.seen: list[tuple[str, list[str]]] = []

    async def stream(self, messages, tools, *, thread_id, turn):  # type: ignore[no-untyped-def]
        self.seen.append((messages[0]["content"], [t["function"]["name"] for t in tools]))
        if turn < len(self.plan):
            name, args = self.plan[turn]
            yield ToolCall(id=f"c{turn}", name=name, arguments=args)
        else:
            yield "done"


PLAN = [
    ("read_skill_file", {"skill": "town-helper", "path": "references/guide.md"}),
    ("activate_skill", {"name": "town-helper"}),
    ("read_skill_file", {"skill": "town-helper", "path": "references/guide.md"}),
    ("run_skill_script", {"skill": "town-helper", "path": "scripts/hello.py"}),
    ("run_skill_script", {"skill": "town-helper", "path": "scripts/evil.py"}),
    ("run_skill_script", {"skill": "town-helper", "path": "scripts/loud.py"}),
]


async def _run(run_dir: Path, skill: Skill, plan: list[Any] = PLAN) -> tuple[Any, PlanModel]:
    env = Town()
    env.init(0)
    model = PlanModel(plan)
    system = AgentSystem(
        model, run_dir=run_dir, skills=[skill], skill_env=env, agent_tools=False,
        system_prompt="You live in a town.",
    )  # fmt: skip
    async with system:
        system.send_user("t1", "help the neighbours", "d1")
        await system.drain()
    return system, model


async def test_thread_agent_lists_activates_reads_and_runs_scripts(tmp_path: Path) -> None:
    system, model = await _run(tmp_path / "run", _skill())
    prompt, offered = model.seen[0]
    assert prompt.startswith("You live in a town.") and "- town-helper: Help neighbours" in prompt
    assert "Wave first" not in prompt and "GUIDE" not in prompt  # body and files on demand
    assert {"activate_skill", "read_skill_file", "run_skill_script"} <= set(offered)
    results = [m["content"] for m in system.history("t1") if m["role"] == "tool"]
    assert "activate skill 'town-helper' before reading" in results[0]  # refused: not active
    assert "Active skill town-helper:\nWave first" in results[1]
    assert results[2] == "GUIDE: wave twice"
    assert "waved" in results[3]  # ran in the sandbox, with the allowed tool
    assert "error" in results[4] and "breaks the sandbox's rules" in results[4]
    assert "error" in results[5] and "shout" in results[5]  # a tool outside allowed-tools
    run = open_run(tmp_path / "run")
    rows = run.sql("select agent_id, skill, how, action, path, ok from skill_activations")
    assert list(rows.agent_id.unique()) == ["t1"]
    assert list(zip(rows.action, rows.ok, strict=True)) == [
        ("read_reference", False),
        ("activate", True),
        ("read_reference", True),
        ("run_script", True),
        ("run_script", False),
        ("run_script", False),
    ]
    assert run.manifest["config"]["skills"] == {"town-helper": _skill().digest()}


async def test_thread_resume_keeps_skills_and_refuses_changed_ones(tmp_path: Path) -> None:
    await _run(tmp_path / "run", _skill(), plan=[])
    await _run(tmp_path / "run", _skill(), plan=[])  # same skills: resumes
    with pytest.raises(ConfigError, match="skills changed since the run started: town-helper"):
        await _run(tmp_path / "run", _skill(body="Shout instead."), plan=[])


def test_skill_tool_names_are_reserved() -> None:
    from agentlab.runtime.threads import Tool

    clash = Tool("activate_skill", lambda ctx, args: "mine")
    with pytest.raises(ConfigError, match="reserved by Agent Skills"):
        AgentSystem(PlanModel([]), tools=[clash], skills=[_skill()])
