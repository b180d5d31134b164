"""Agent Skills for thread agents: the society agent's :class:`~agentlab.agents.skills.SkillSet`
offered as asynchronous thread tools.

``AgentSystem(model, skills=[...])`` appends the skills catalogue to every new thread's
system prompt and offers ``activate_skill`` and ``read_skill_file`` (and
``run_skill_script`` when a skill has scripts) as :class:`~agentlab.runtime.threads.tools.Tool`
objects. What is active is per thread (a thread reads a skill's files or runs its scripts
only after activating it; kept in memory for the last :data:`MAX_THREADS` threads that used
a skill -- after a restart a thread activates again). Activations land in the run's
``skill_activations`` dataset (``agent_id`` = thread id, ``tick`` null). The skills' sha256
are in ``run.json`` (``config.skills``): an ``AgentSystem`` on the same run directory with
different skills is refused.

Scripts run only through :func:`agentlab.env.skill_scripts.script_runner` (the sandbox,
with the skill's ``allowed-tools`` of ``skill_env``).
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.agents.skills import SkillSet, load_skills
from agentlab.errors import ConfigError
from agentlab.runtime.threads.shapes import RUNTIME_TOOLS
from agentlab.runtime.threads.tools import Tool, ToolContext

if TYPE_CHECKING:
    from agentlab.env.base import EnvBase

__all__ = ["MAX_THREADS", "ThreadSkills"]

#: threads whose active skills are kept in memory
MAX_THREADS = 4096


class _Thread:
    """What ``SkillSet`` records an activation against: the thread as an agent."""

    __slots__ = ("agent_id", "state")

    def __init__(self, thread_id: str) -> None:
        self.agent_id = thread_id
        self.state: dict[str, Any] = {}


class ThreadSkills:
    """The skills of an :class:`~agentlab.runtime.threads.system.AgentSystem`.

    Args:
        skills: :class:`~agentlab.agents.skills.Skill` objects, their dicts, skill
            directories or directories of them (as for ``load_skills``).
        run_dir: the system's run directory (records and the skills' hashes), or ``None``.
        env: the env whose tools a skill's scripts may call (``allowed-tools``).
        max_tokens: the catalogue's budget in the system prompt.

    Raises:
        ConfigError: a bad skill, or skills that differ from those the run recorded.
    """

    def __init__(
        self,
        skills: Any,
        *,
        run_dir: str | Path | None = None,
        env: EnvBase | None = None,
        max_tokens: int = 400,
    ) -> None:
        from agentlab.env.skill_scripts import script_runner

        sources = [skills] if isinstance(skills, str | Path | dict) else list(skills)
        self.base = SkillSet(load_skills(sources), mode="tool", max_tokens=max_tokens)
        self.base.script_runner = script_runner(env)
        if run_dir is not None:
            from agentlab.store.manifest import read_manifest
            from agentlab.store.replay import get_replay_sink

            recorded = (read_manifest(run_dir).get("config") or {}).get("skills")
            self.base.check(recorded)
            self.base.record_to(get_replay_sink(run_dir))
        self.digest = self.base.digest
        self._threads: OrderedDict[str, tuple[_Thread, SkillSet]] = OrderedDict()

    @classmethod
    def attach(cls, system: Any, skills: Any, env: EnvBase | None = None) -> ThreadSkills:
        """Give ``system`` (an ``AgentSystem`` being built) its skills: the skill tools
        join its tools and schemas, the catalogue its system prompt.

        Raises:
            ConfigError: a tool of ``system`` already has a skill tool's name.
        """
        self = cls(skills, run_dir=system.run_dir, env=env)
        for t in self.tools():
            if t.name in system.tools:
                raise ConfigError(f"tool name {t.name!r} is reserved by Agent Skills")
            system.tools[t.name] = t
        runtime = system._schemas[len(system._schemas) - len(RUNTIME_TOOLS) * system.agent_tools :]
        system._schemas = [t.schema() for t in system.tools.values()] + runtime
        system.system_prompt = (system.system_prompt or "") + self.system_text()
        return self

    def system_text(self) -> str:
        """The catalogue, for the system prompt."""
        return self.base.system_text()

    def _of(self, thread_id: str) -> tuple[_Thread, SkillSet]:
        got = self._threads.pop(thread_id, None)
        if got is None:
            got = (_Thread(thread_id), self.base.for_agent())
            if len(self._threads) >= MAX_THREADS:
                self._threads.popitem(last=False)
        self._threads[thread_id] = got
        return got

    def tools(self) -> list[Tool]:
        """``activate_skill``, ``read_skill_file`` and, if a skill has scripts,
        ``run_skill_script`` as thread tools (a refusal is an ``error: ...`` result)."""
        schemas = self.base.tools(None)  # activate_skill, read_skill_file
        script = self.base.script_tool(always=True)
        if script is not None:
            schemas.append(script)
        out = []
        for schema in schemas:
            fn = schema["function"]
            out.append(Tool(fn["name"], self._start, fn["description"], fn["parameters"]))
        return out

    def _start(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        thread, skills = self._of(ctx.thread_id)
        if ctx.name == "run_skill_script":
            return skills.acall(thread, None, ctx.name, args)
        return skills.call(thread, None, ctx.name, args)
