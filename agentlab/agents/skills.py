"""An agent's skills in a step: the catalogue in its prompt, activation (keyword or the
``activate_skill`` tool), reference files and scripts on demand, each use recorded in the
``skill_activations`` dataset.

The skill files themselves (the ``SKILL.md`` format, validation, loading, the catalogue and
the digest) are :mod:`agentlab.agents.skill_files`; their names are re-exported here.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agentlab.agents.skill_files import (
    Skill,
    catalogue,
    load_skill,
    load_skills,
    skills_digest,
)
from agentlab.core.tools import function_tool, object_parameters
from agentlab.errors import AgentlabError, ConfigError

__all__ = [
    "Skill",
    "SkillSet",
    "catalogue",
    "env_script_runner",
    "load_skill",
    "load_skills",
    "skills_digest",
]


# --- an agent's skills ---------------------------------------------------------------------

_LOADED: dict[str, list[Skill]] = {}
_MODES = ("tool", "keyword", "both")
_LOCAL_TOOLS = ("activate_skill", "read_skill_file")


class SkillSet:
    """The skills of one agent and what it did with them in the current step.

    Built from an agent's config (``skills``, ``skill_activation``,
    ``skill_catalogue_tokens``); the loaded skills are shared by every agent of one config
    in a process.
    """

    def __init__(self, skills: list[Skill], *, mode: str = "tool", max_tokens: int = 400) -> None:
        if mode not in _MODES:
            raise ConfigError(f"skill_activation must be one of {_MODES}, got {mode!r}")
        if not isinstance(max_tokens, int) or max_tokens < 20:
            raise ConfigError(f"skill_catalogue_tokens must be an int >= 20, got {max_tokens!r}")
        self.skills = {s.name: s for s in skills}
        self.mode = mode
        self.max_tokens = max_tokens
        self.digest = skills_digest(skills)
        self.active: dict[str, str] = {}  # skill -> how it was chosen, this step
        self._registered: set[int] = set()
        self._sink: Any = None
        self._run_id: str | None = None
        #: ``async runner(skill, path, agent_id)`` that runs a skill script in the sandbox
        #: (``agentlab.env.skill_scripts.script_runner``); set by the runtime or the caller
        self.script_runner: Any = None

    def record_to(self, sink: Any, run_id: str | None = None) -> SkillSet:
        """Write ``skill_activations`` rows to ``sink`` (a run's replay sink: anything with
        ``register`` and ``append``) instead of the agent's ``services.proxy.replay`` -- for
        thread and messaging agents, which have no society services. Returns ``self``."""
        self._sink, self._run_id = sink, run_id
        return self

    def for_agent(self) -> SkillSet:
        """A copy with the same skills, settings and sink but nothing active (one per
        agent or thread: what is active is per agent)."""
        twin = SkillSet(list(self.skills.values()), mode=self.mode, max_tokens=self.max_tokens)
        twin._sink, twin._run_id, twin._registered = self._sink, self._run_id, self._registered
        twin.script_runner = self.script_runner
        return twin

    @classmethod
    def from_config(cls, config: dict[str, Any], agent_id: str = "?") -> SkillSet:
        """The skills named by ``config["skills"]`` (a path, or a list of paths and dicts)."""
        sources = config.get("skills") or []
        if isinstance(sources, str | dict):
            sources = [sources]
        if not isinstance(sources, list):
            raise ConfigError(
                f"agent {agent_id!r}: skills must be a path or a list, got {sources!r:.80}"
            )
        key = json.dumps([sources, _fingerprint(sources)], sort_keys=True, default=str)
        skills = _LOADED.get(key)
        if skills is None:
            if len(_LOADED) >= 64:  # edited skill files make new keys: stay bounded
                _LOADED.clear()
            skills = _LOADED[key] = load_skills(sources)
        return cls(
            skills,
            mode=config.get("skill_activation", "tool"),
            max_tokens=config.get("skill_catalogue_tokens", 400),
        )

    def check(self, recorded: dict[str, str] | None) -> None:
        """Refuse skills that differ from those the run started with (resume, fork).

        Raises:
            ConfigError: naming the skills added, removed or changed.
        """
        if recorded is None or recorded == self.digest:
            return
        changed = sorted(
            n for n in set(recorded) | set(self.digest) if recorded.get(n) != self.digest.get(n)
        )
        raise ConfigError(
            f"skills changed since the run started: {', '.join(changed)} (the run recorded "
            "their sha256; restore the skill files or start a new run)"
        )

    # --- the prompt ------------------------------------------------------------------------

    def system_text(self) -> str:
        """The catalogue for the system prompt."""
        how = (
            "call activate_skill(name) to load one's instructions"
            if self.mode != "keyword"
            else "a skill's instructions appear when your situation names it"
        )
        return f"\n\nSkills ({how}):\n" + catalogue(
            self.skills.values(), max_tokens=self.max_tokens
        )

    def tools(self, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """``tools`` plus the skill tools (``activate_skill`` unless keyword-only, and
        ``run_skill_script`` while :meth:`script_tool` offers it)."""
        names = sorted(self.skills)
        local = [
            _fn("read_skill_file", "Read a reference file an active skill's instructions name.",
                {"skill": {"type": "string", "enum": names},
                 "path": {"type": "string", "description": "e.g. references/guide.md"}}),
        ]  # fmt: skip
        if self.mode != "keyword":
            local.insert(0, _fn(
                "activate_skill", "Load a skill's instructions (see the skills list).",
                {"name": {"type": "string", "enum": names}},
            ))  # fmt: skip
        script = self.script_tool()
        return [*(tools or []), *local, *([script] if script else [])]

    # --- a step ----------------------------------------------------------------------------

    def begin_step(
        self, agent: Any, tick: int, observation: str, messages: list[dict[str, Any]]
    ) -> None:
        """Forget last step's activations; activate by keyword (unless tool-only)."""
        self.active = {}
        for text in self.activate_matching(agent, tick, observation):
            messages[0]["content"] += "\n\n" + text

    def activate_matching(self, agent: Any, tick: int | None, text: str) -> list[str]:
        """Activate, by keyword, the skills ``text`` names (none when tool-only); returns
        the instructions of each, for the prompt."""
        if self.mode == "tool":
            return []
        return [
            self._activate(agent, tick, s, "keyword")
            for s in self.skills.values()
            if s.matches(text)
        ]

    def handles(self, tool: str) -> bool:
        """Whether ``tool`` is one of the skill tools."""
        return tool in _LOCAL_TOOLS or tool == "run_skill_script"

    def scripts(self) -> dict[str, list[str]]:
        """``{skill: [scripts/...]}`` of the active skills that have scripts."""
        out = {}
        for name in self.active:
            found = sorted(f for f in self.skills[name].files if f.startswith("scripts/"))
            if found:
                out[name] = found
        return out

    def script_tool(self, *, always: bool = False) -> dict[str, Any] | None:
        """The ``run_skill_script`` tool schema, while an active skill has scripts and a
        :attr:`script_runner` is set (the runtime's hook into the sandbox); else ``None``.
        ``always``: listing every skill with scripts, active or not (a fixed tool list)."""
        if always:
            scripts = {
                n: sorted(f for f in s.files if f.startswith("scripts/"))
                for n, s in self.skills.items()
            }
            scripts = {n: v for n, v in scripts.items() if v}
        else:
            scripts = self.scripts()
        if not scripts or self.script_runner is None:
            return None
        listed = "; ".join(f"{k}: {', '.join(v)}" for k, v in scripts.items())
        paths = sorted({p for v in scripts.values() for p in v})
        return _fn(
            "run_skill_script",
            f"Run a script of an active skill in the sandbox ({listed}).",
            {"skill": {"type": "string", "enum": sorted(scripts)},
             "path": {"type": "string", "enum": paths}},
        )  # fmt: skip

    async def acall(self, agent: Any, tick: int | None, tool: str, arguments: Any) -> str:
        """:meth:`call`, plus ``run_skill_script``: the script runs through
        :attr:`script_runner` only (the sandbox, with the skill's ``allowed-tools``).

        Raises:
            ConfigError: unknown skill or script, skill not active, no runner.
            AgentlabError: the runner refused the script (``UnsafeCodeError``: it breaks
                the sandbox's rules) -- recorded as a ``run_script`` row with ``ok`` false.
        """
        if tool != "run_skill_script":
            return self.call(agent, tick, tool, arguments)
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments or {})
        name, path = str(args.get("skill", args.get("name", ""))), str(args.get("path", ""))
        skill = self.skills.get(name)
        how = self.active.get(name, "tool")
        if skill is None or name not in self.active or self.script_runner is None:
            self._record(agent, tick, name, how, "run_script", path, False)
            if skill is None:
                raise ConfigError(f"no skill {name!r}; skills: {', '.join(sorted(self.skills))}")
            if name not in self.active:
                raise ConfigError(f"activate skill {name!r} before running its scripts")
            raise ConfigError("skill scripts cannot run here: no sandbox runner is set")
        try:
            skill.script(path)  # ConfigError naming the scripts it has
            out = await self.script_runner(skill, path, _agent_id(agent))
        except AgentlabError:
            self._record(agent, tick, name, how, "run_script", path, False)
            raise
        if isinstance(out, dict):  # RouteResult.to_dict(): from the env's process
            ok, text = bool(out.get("ok", True)), out.get("observation")
        else:
            ok, text = bool(getattr(out, "ok", True)), getattr(out, "observation", None)
        self._record(agent, tick, name, how, "run_script", path, ok)
        return str(out if text is None else text)

    def call(self, agent: Any, tick: int | None, tool: str, arguments: Any) -> str:
        """Run a skill tool call; its result is the tool message's text.

        Raises:
            ConfigError: unknown skill, a file of a skill not active, no such reference.
        """
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments or {})
        name = str(args.get("name", args.get("skill", "")))
        skill = self.skills.get(name)
        if skill is None:
            raise ConfigError(f"no skill {name!r}; skills: {', '.join(sorted(self.skills))}")
        if tool == "activate_skill":
            return self._activate(agent, tick, skill, "tool")
        if name not in self.active:
            self._record(agent, tick, name, "tool", "read_reference", args.get("path"), False)
            raise ConfigError(f"activate skill {name!r} before reading its files")
        path = str(args.get("path", ""))
        try:
            text = skill.read_reference(path)
        except ConfigError:
            self._record(agent, tick, name, self.active[name], "read_reference", path, False)
            raise
        self._record(agent, tick, name, self.active[name], "read_reference", path, True)
        return text

    def _activate(self, agent: Any, tick: int | None, skill: Skill, how: str) -> str:
        if skill.name not in self.active:
            self.active[skill.name] = how
            self._record(agent, tick, skill.name, how, "activate", None, True)
        refs = skill.references()
        tail = f"\n(Reference files, read with read_skill_file: {', '.join(refs)})" if refs else ""
        return f"Active skill {skill.name}:\n{skill.body}{tail}"

    def _record(
        self, agent: Any, tick: int | None, skill: str, how: str, action: str, path: Any, ok: bool
    ) -> None:
        state = getattr(agent, "state", None)
        if isinstance(state, dict):
            used = state.setdefault("skills_used", {})
            used[skill] = used.get(skill, 0) + (action == "activate")
        if self._sink is not None:
            replay, run_id = self._sink, self._run_id
        else:
            proxy = getattr(getattr(agent, "services", None), "proxy", None)
            replay, run_id = getattr(proxy, "replay", None), getattr(proxy, "run_id", None)
        if replay is None:
            return
        if id(replay) not in self._registered:
            from agentlab.store import catalog

            catalog.register(replay, ["skill_activations"], module="agentlab.agents")
            self._registered.add(id(replay))
        replay.append(
            "skill_activations",
            {
                "run_id": run_id,
                "agent_id": _agent_id(agent),
                "tick": tick,
                "skill": skill,
                "how": how,
                "action": action,
                "path": None if path is None else str(path),
                "ok": ok,
            },
        )


def env_script_runner(env: Any) -> Callable[[Skill, str, str | None], Awaitable[Any]]:
    """The ``SkillSet.script_runner`` of a society agent: the script's text goes to
    ``env.run_skill_script`` (the agent's ``services.env``), which runs it where the env
    lives -- in this process or in the Ray env actor -- through the sandbox with the skill's
    ``allowed-tools`` (``agentlab.env.skill_scripts.run_skill_script``). The runner returns
    ``RouteResult.to_dict()``; a refused script raises ``UnsafeCodeError``."""

    async def run(skill: Skill, path: str, agent_id: str | None) -> Any:
        return await env.run_skill_script(
            skill.script(path),
            path=skill.script_label(path),
            allowed_tools=list(skill.allowed_tools),
        )

    return run


def _agent_id(agent: Any) -> str | None:
    return getattr(agent, "agent_id", None) or getattr(agent, "name", None)


def _fingerprint(sources: list[Any]) -> list[Any]:
    # directories may change between loads (an edited SKILL.md): key the cache on their files
    out: list[Any] = []
    for src in sources:
        if isinstance(src, str | Path) and Path(src).exists():
            p = Path(src)
            files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
            out.append([(str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files])
    return out


def _fn(name: str, description: str, props: dict[str, Any]) -> dict[str, Any]:
    return function_tool(name, description, object_parameters(props))
