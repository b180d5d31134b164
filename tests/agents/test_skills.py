"""Agent Skills on the society ``LLMAgent``: catalogue, activation, references, validation,
sandboxed scripts, and the run's record of its skills (resume, fork)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlab.agents import LLMAgent
from agentlab.agents.skills import Skill, SkillSet, catalogue, load_skill, load_skills
from agentlab.env import EnvBase, create_env, tool
from agentlab.env.skill_scripts import run_skill_script
from agentlab.errors import ConfigError, UnsafeCodeError
from agentlab.llm import LLMClient

SKILL_MD = """---
name: invoice-helper
description: Pay and check invoices on the feed's market.
allowed-tools: read_feed post
metadata:
  keywords: bill payment
---
# Invoices
Check the amount first. For late fees, read references/fees.md.
"""


def _write_skill(root: Path, text: str = SKILL_MD, name: str = "invoice-helper") -> Path:
    d = root / name
    (d / "references").mkdir(parents=True)
    (d / "scripts").mkdir()
    (d / "SKILL.md").write_text(text)
    (d / "references" / "fees.md").write_text("LATE FEE TABLE: 5% after 30 days")
    (d / "scripts" / "summary.py").write_text("posts = read_feed()\nlen(posts)")
    (d / "scripts" / "evil.py").write_text("import os\nos.system('rm -rf /')")
    return d


class Town(EnvBase):
    """A town square: agent a0 has an invoice waiting; the others see the weather."""

    def observe(self, agent_id: str) -> str:
        return "An invoice arrived: 30 euros." if agent_id.endswith("0") else "A sunny day."

    @tool
    def wave(self, agent_id: str = "") -> str:
        """Wave at the neighbours."""
        return "waved"


def test_load_and_catalogue(tmp_path: Path) -> None:
    skill = load_skill(_write_skill(tmp_path))
    assert skill.name == "invoice-helper" and skill.allowed_tools == ("read_feed", "post")
    assert skill.references() == ["references/fees.md"] and skill.metadata["keywords"]
    inline = Skill("haiku", "Write posts as haiku.", body="5-7-5 syllables.")  # a notebook cell
    skills = load_skills([tmp_path, inline.to_dict()])
    assert [s.name for s in skills] == ["invoice-helper", "haiku"]
    text = catalogue(skills)
    assert "- invoice-helper: Pay and check" in text and "- haiku: Write posts" in text
    many = [Skill(f"s{i}", "x" * 200) for i in range(20)]
    short = catalogue(many, max_tokens=100)
    assert len(short) <= 100 * 4 + 40 and "more skills not listed" in short


def test_system_prompt_lists_skills_but_not_bodies(tmp_path: Path) -> None:
    agent = LLMAgent("a0", {"skills": [str(_write_skill(tmp_path))]})
    system = agent._messages(0, "hello")[0]["content"]
    assert "invoice-helper: Pay and check invoices" in system
    assert "Check the amount first" not in system and "LATE FEE" not in system
    assert agent.state["skills"] == {
        "invoice-helper": load_skill(tmp_path / "invoice-helper").digest()
    }


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("no front matter", "no YAML front matter"),
        ("---\nname: [unclosed\n---\nbody", "not valid YAML"),
        ("---\ndescription: d\n---\n", "field 'name' is required"),
        ("---\nname: invoice-helper\n---\n", "field 'description' is required"),
        ("---\nname: Invoice_Helper\ndescription: d\n---\n", "field 'name' 'Invoice_Helper'"),
        ("---\nname: other-name\ndescription: d\n---\n", "must equal the directory name"),
        (
            "---\nname: invoice-helper\ndescription: d\ncolour: red\n---\n",
            "unknown field.*'colour'",
        ),
        (
            "---\nname: invoice-helper\ndescription: d\nallowed-tools: {a: 1}\n---\n",
            "'allowed-tools'",
        ),
    ],
)
def test_malformed_skill_md_names_file_and_field(tmp_path: Path, text: str, match: str) -> None:
    d = _write_skill(tmp_path, text)
    with pytest.raises(ConfigError, match=match) as err:
        load_skill(d)
    assert str(d / "SKILL.md") in str(err.value)


def test_reference_read_only_when_asked(tmp_path: Path) -> None:
    agent = LLMAgent("a0", {"skills": [str(_write_skill(tmp_path))]})
    skills = agent.skillset
    messages = agent._messages(3, "A sunny day.")
    skills.begin_step(agent, 3, "A sunny day.", messages)  # tool mode: nothing by keyword
    assert skills.active == {}
    names = [t["function"]["name"] for t in skills.tools(None)]
    assert names == ["activate_skill", "read_skill_file"]
    with pytest.raises(ConfigError, match="activate skill 'invoice-helper' before"):
        skills.call(
            agent, 3, "read_skill_file", {"skill": "invoice-helper", "path": "references/fees.md"}
        )
    body = skills.call(agent, 3, "activate_skill", {"name": "invoice-helper"})
    assert "Check the amount first" in body and "references/fees.md" in body
    assert "LATE FEE" not in body  # the body names the file; its text is not loaded
    ref = skills.call(agent, 3, "read_skill_file", '{"skill": "invoice-helper", "path": "fees.md"}')
    assert ref.startswith("LATE FEE TABLE")
    with pytest.raises(ConfigError, match=r"no reference 'nope\.md'"):
        skills.call(agent, 3, "read_skill_file", {"skill": "invoice-helper", "path": "nope.md"})
    with pytest.raises(ConfigError, match="no skill 'ghost'"):
        skills.call(agent, 3, "activate_skill", {"name": "ghost"})
    assert agent.state["skills_used"] == {"invoice-helper": 1}


async def test_skill_scripts_run_only_through_the_sandbox(tmp_path: Path) -> None:
    skill = load_skill(_write_skill(tmp_path))
    feed = create_env("social_feed", seed=0)
    ok = await run_skill_script(
        skill.script("summary.py"), path="scripts/summary.py",
        allowed_tools=skill.allowed_tools, env=feed, agent_id="alice",
    )  # fmt: skip
    assert ok.ok and ok.value == 0 and ok.router == "skill_script"
    with pytest.raises(
        UnsafeCodeError, match=r"scripts/evil\.py breaks the sandbox's rules.*Import"
    ):
        await run_skill_script(skill.script("evil.py"), path="scripts/evil.py",
                               allowed_tools=skill.allowed_tools, env=feed)  # fmt: skip
    with pytest.raises(UnsafeCodeError, match="function 'follow' is not available"):
        await run_skill_script("follow('bob')", path="scripts/f.py",
                               allowed_tools=skill.allowed_tools, env=feed)  # fmt: skip
    with pytest.raises(UnsafeCodeError, match="only Python scripts"):
        await run_skill_script("rm -rf /", path="scripts/clean.sh", env=feed)
    budget = await run_skill_script(
        "x = 0\nwhile True:\n    x = x + 1", path="scripts/loop.py", env=feed
    )  # the sandbox's step budget applies
    assert not budget.ok and "budget" in (budget.error or "")


def _society(path: Path, skills: Any, **config: Any) -> Any:
    from agentlab.runtime import Society

    return Society.create(
        path,
        agents=[{"type": "llm", "n": 3, "config": {"skills": skills, **config}}],
        env=[Town()],
        llm=LLMClient("sim/instant", seed=0),
        seed=1,
        progress=False,
    )


async def test_keyword_activation_matches_only_its_requests(tmp_path: Path) -> None:
    from agentlab import open_run

    root = tmp_path / "skills"
    _write_skill(root)
    society = _society(tmp_path / "run", [str(root)], skill_activation="keyword")
    try:
        await society.run(ticks=2)
    finally:
        society.close()
    rows = open_run(tmp_path / "run").sql(
        "select agent_id, tick, skill, how, action, ok from skill_activations order by tick"
    )
    acts = rows[rows.action == "activate"]
    assert len(acts) == 2 and set(acts.skill) == {"invoice-helper"} and set(acts.how) == {"keyword"}
    assert all(a.endswith("0") for a in acts.agent_id)  # only the agent with an invoice
    assert acts.tick.nunique() == 2  # once per tick: the invoice is seen each tick


async def test_tool_mode_reads_follow_activation(tmp_path: Path) -> None:
    from agentlab import open_run

    root = tmp_path / "skills"
    _write_skill(root)
    society = _society(tmp_path / "run", [str(root)])
    try:
        await society.run(ticks=4)
    finally:
        society.close()
    rows = open_run(tmp_path / "run").sql(
        "select agent_id, tick, skill, how, action, ok from skill_activations"
    )
    assert len(rows) > 0 and set(rows.how) == {"tool"}  # the simulated model used the tools
    acts = {(r.agent_id, r.tick) for r in rows[rows.action == "activate"].itertuples()}
    for r in rows[(rows.action == "read_reference") & rows.ok].itertuples():
        assert (r.agent_id, r.tick) in acts  # a file is read only after its skill's body


async def test_resume_and_fork_keep_skills(tmp_path: Path) -> None:
    from agentlab.runtime import Society

    root = tmp_path / "skills"
    d = _write_skill(root)
    run = tmp_path / "run"
    society = _society(run, [str(root)], skill_activation="keyword")
    try:
        await society.run(ticks=1)
    finally:
        society.close()
    original = (d / "SKILL.md").read_text()
    (d / "SKILL.md").write_text(original.replace("Check the amount first.", "Pay at once!!"))
    again = Society.open(run, progress=False)
    try:
        with pytest.raises(Exception, match="skills changed since the run started: invoice-helper"):
            await again.run(ticks=1)
    finally:
        again.close()
    (d / "SKILL.md").write_text(original)
    again = Society.open(run, progress=False)
    try:
        await again.run(ticks=1)
        fork = again.fork(tmp_path / "fork", progress=False)
        try:
            await fork.run(ticks=1)
        finally:
            fork.close()
    finally:
        again.close()
    from agentlab import open_run

    forked = open_run(tmp_path / "fork").sql("select tick, skill from skill_activations")
    assert len(forked) >= 1 and set(forked.skill) == {"invoice-helper"}


def test_skillset_config_errors() -> None:
    with pytest.raises(ConfigError, match="skill_activation must be one of"):
        SkillSet([], mode="sometimes")
    with pytest.raises(ConfigError, match="is not a skill directory"):
        load_skills(["/nonexistent/skills"])
    with pytest.raises(ConfigError, match="two skills are named 'a'"):
        load_skills([Skill("a", "x"), Skill("a", "y")])
    with pytest.raises(ConfigError, match="must lie under references/"):
        Skill("a", "x", files={"../../etc/passwd": ""})


class Hall(EnvBase):
    """A town hall: agents 0 and 1 have letters to answer; ``shout`` is no skill's tool."""

    def observe(self, agent_id: str) -> str:
        if agent_id.endswith("2"):
            return "A quiet hall."
        return "A letter arrived: run a script to greet the sender."

    @tool
    def wave(self, agent_id: str = "") -> str:
        """Wave at the neighbours."""
        return f"{agent_id} waved"

    @tool
    def shout(self, agent_id: str = "") -> str:
        """Shout across the hall."""
        return "SHOUTED"


def _letter_skill() -> Skill:
    return Skill(
        "letter-helper", "Answer letters politely.", body="Wave, then answer.",
        allowed_tools=("wave",), metadata={"keywords": "letter"},
        files={"scripts/greet.py": "wave()", "scripts/evil.py": "import os",
               "scripts/loud.py": "shout()"},
    )  # fmt: skip


async def _script_society(run: Path, executor: str = "local") -> Any:
    from agentlab import open_run
    from agentlab.runtime import Society

    society = Society.create(
        run,
        agents=[{"type": "llm", "n": 3, "config": {
            "skills": [_letter_skill().to_dict()], "skill_activation": "keyword",
            "max_iterations": 4}}],
        env=[Hall()], llm=LLMClient("sim/instant", seed=0), seed=3, progress=False,
        executor=executor,
    )  # fmt: skip
    try:
        await society.run(ticks=8)
    finally:
        society.close()
    return open_run(run)


async def test_society_agent_runs_skill_scripts_where_the_env_lives(tmp_path: Path) -> None:
    run = await _script_society(tmp_path / "run")
    rows = run.sql("select agent_id, path, ok from skill_activations where action = 'run_script'")
    assert "llm-00002" not in set(rows.agent_id)  # its skill is never active
    ran = {(r.path, bool(r.ok)) for r in rows.itertuples()}
    assert ("scripts/greet.py", True) in ran  # through the env's sandbox, with wave allowed
    assert ("scripts/evil.py", False) in ran  # an import: refused before running
    assert ("scripts/loud.py", False) in ran  # shout is outside allowed-tools: refused
    reqs = run.sql(
        "select agent_id, request, ok, outcome, error, n_tool_calls from env_requests "
        "where router = 'skill_script'"
    )
    greet = reqs[reqs.request == "letter-helper/scripts/greet.py"]
    assert len(greet) >= 1 and greet.ok.all() and (greet.n_tool_calls == 1).all()
    evil = reqs[reqs.request == "letter-helper/scripts/evil.py"]
    assert len(evil) >= 1 and set(evil.outcome) == {"rejected"}
    assert evil.error.str.contains("breaks the sandbox's rules").all()
    routers = run.sql("select routers from timeline")["routers"]
    counted = [r.get("by_kind", {}).get("skill_script") for r in routers if r]
    assert sum(c["requests"] for c in counted if c) == len(reqs)


@pytest.mark.ray
@pytest.mark.slow
async def test_skill_scripts_run_in_the_ray_env_actor(ray_session: Any, tmp_path: Path) -> None:
    local = await _script_society(tmp_path / "local")
    ray_run = await _script_society(tmp_path / "ray", executor="ray")
    query = (
        "select agent_id, tick, path, ok from skill_activations where action = 'run_script' "
        "order by agent_id, tick, path"
    )
    ran = ray_run.sql(query)
    assert {("scripts/greet.py", True), ("scripts/evil.py", False)} <= {
        (r.path, bool(r.ok)) for r in ran.itertuples()
    }
    assert ran.values.tolist() == local.sql(query).values.tolist()  # same as in-process
    reqs = ray_run.sql(
        "select request, outcome, n_tool_calls from env_requests where router = 'skill_script' "
        "order by agent_id, tick, request"
    )  # written by the env actor (staged, committed with its checkpoint)
    assert len(reqs) == len(ran) and set(reqs.outcome) == {"ok", "rejected"}
