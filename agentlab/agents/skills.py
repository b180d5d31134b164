"""Agent Skills: ``SKILL.md`` directories (the open Agent Skills format), loaded by
progressive disclosure.

A skill is a directory::

    invoice-helper/
        SKILL.md           # YAML front matter + Markdown body
        references/*.md    # read only when the body asks for them
        scripts/*.py       # run only through the sandbox (agentlab.env.skill_scripts)
        assets/...

Front matter: ``name`` (1-64 chars, lower-case letters, digits and single hyphens; equal to
the directory's name), ``description`` (1-1024 chars), optional ``allowed-tools`` (a
space-separated string or a list), ``metadata`` (a mapping of strings; ``keywords`` there
adds trigger words), ``license``, ``compatibility``. Anything else is refused with a
:class:`~agentlab.errors.ConfigError` naming the file and the field.

Disclosure: :func:`catalogue` is the names and descriptions within a token budget (the
agent's system prompt); a skill's body is loaded only on activation
(:meth:`Skill.matches` — a keyword match — or the model's ``activate_skill`` tool call);
a reference file only through :meth:`Skill.read_reference` (the ``read_skill_file`` tool).
:func:`skills_digest` hashes every file of every skill, so a resumed or forked run can
check it uses the same skills.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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

_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_FIELDS = frozenset(
    {"name", "description", "allowed-tools", "metadata", "license", "compatibility"}
)
_WORD = re.compile(r"[a-z0-9]+")
_MAX_FILE = 256 * 1024


@dataclass(frozen=True)
class Skill:
    """One skill. Build it in a notebook cell, or load it with :func:`load_skill`.

    Attributes:
        name, description: the catalogue entry.
        body: the Markdown instructions (shown only once the skill is active).
        allowed_tools: tools the skill's scripts may call (empty: none).
        metadata: free string pairs (``keywords``: extra trigger words, space-separated).
        files: ``{"references/x.md": text, "scripts/y.py": text}`` (loaded from the
            directory, or given inline).
        source: the ``SKILL.md`` path (``None`` for inline skills).
    """

    name: str
    description: str
    body: str = ""
    allowed_tools: tuple[str, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    source: str | None = None

    def __post_init__(self) -> None:
        where = self.source or f"skill {self.name!r}"
        _check_name(self.name, where)
        _check_description(self.description, where)
        for f in self.files:
            p = Path(f)
            if p.is_absolute() or ".." in p.parts or p.parts[0] not in (
                "references", "scripts", "assets",
            ):  # fmt: skip
                raise ConfigError(
                    f"{where}: file {f!r} must lie under references/, scripts/ or assets/"
                )

    # --- disclosure ------------------------------------------------------------------------

    def triggers(self) -> set[str]:
        """Words whose presence in a request activates the skill by keyword."""
        words = {w for w in self.name.split("-") if len(w) >= 4}
        words |= set(_WORD.findall(self.metadata.get("keywords", "").lower()))
        return words

    def matches(self, text: str) -> bool:
        """Whether ``text`` names one of :meth:`triggers` (whole words, case-insensitive)."""
        return bool(self.triggers() & set(_WORD.findall(text.lower())))

    def references(self) -> list[str]:
        """The reference files' paths (``references/...``)."""
        return sorted(f for f in self.files if f.startswith("references/"))

    def read_reference(self, path: str) -> str:
        """One reference file's text.

        Raises:
            ConfigError: no such reference (the message lists them).
        """
        key = path if path.startswith("references/") else f"references/{path}"
        if key not in self.files:
            raise ConfigError(
                f"skill {self.name!r} has no reference {path!r}; it has: "
                f"{', '.join(self.references()) or '(none)'}"
            )
        return self.files[key]

    def script(self, path: str) -> str:
        """One script's source (``scripts/...``)."""
        key = path if path.startswith("scripts/") else f"scripts/{path}"
        if key not in self.files:
            scripts = sorted(f for f in self.files if f.startswith("scripts/"))
            raise ConfigError(
                f"skill {self.name!r} has no script {path!r}; it has: "
                f"{', '.join(scripts) or '(none)'}"
            )
        return self.files[key]

    def script_label(self, path: str) -> str:
        """``<skill>/scripts/<file>``: how a script run is named in errors and records."""
        return f"{self.name}/{path if path.startswith('scripts/') else f'scripts/{path}'}"

    # --- record ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON form (an agent's config can carry it: the run keeps the skill)."""
        return {
            "name": self.name,
            "description": self.description,
            "body": self.body,
            "allowed-tools": list(self.allowed_tools),
            "metadata": dict(self.metadata),
            "files": dict(self.files),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, where: str = "skill") -> Skill:
        """Rebuild from :meth:`to_dict` (validated like a ``SKILL.md``)."""
        if not isinstance(d, dict):
            raise ConfigError(f"{where}: a skill must be a mapping, got {type(d).__name__}")
        front = {k: v for k, v in d.items() if k not in ("body", "files")}
        meta = _front_matter(front, where)
        files = d.get("files") or {}
        if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()
        ):
            raise ConfigError(f"{where}: field 'files' must map paths to text")
        return cls(body=str(d.get("body") or ""), files=dict(files), source=None, **meta)

    def digest(self) -> str:
        """sha256 of the skill's front matter, body and files."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def _check_name(name: Any, where: str) -> None:
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: field 'name' is required (a non-empty string)")
    if len(name) > 64 or not _NAME.match(name):
        raise ConfigError(
            f"{where}: field 'name' {name!r} must be 1-64 lower-case letters, digits and "
            "single hyphens (not at the start or end)"
        )


def _check_description(desc: Any, where: str) -> None:
    if not isinstance(desc, str) or not desc.strip():
        raise ConfigError(f"{where}: field 'description' is required (a non-empty string)")
    if len(desc) > 1024:
        raise ConfigError(f"{where}: field 'description' is {len(desc)} chars; at most 1024")


def _front_matter(front: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(front) - _FIELDS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; allowed: "
            f"{', '.join(sorted(_FIELDS))}"
        )
    _check_name(front.get("name"), where)
    _check_description(front.get("description"), where)
    tools = front.get("allowed-tools") or ()
    if isinstance(tools, str):
        tools = tools.split()
    if not isinstance(tools, list | tuple) or not all(isinstance(t, str) for t in tools):
        raise ConfigError(
            f"{where}: field 'allowed-tools' must be a space-separated string or a list of "
            f"tool names, got {front.get('allowed-tools')!r:.80}"
        )
    meta = front.get("metadata") or {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) for k in meta):
        raise ConfigError(f"{where}: field 'metadata' must be a mapping of strings")
    return {
        "name": front["name"],
        "description": front["description"].strip(),
        "allowed_tools": tuple(tools),
        "metadata": {k: str(v) for k, v in meta.items()},
    }


def load_skill(path: str | Path) -> Skill:
    """Load one skill directory (or its ``SKILL.md``).

    Raises:
        ConfigError: missing ``SKILL.md``, no front matter, bad YAML, a missing or invalid
            field, a name that differs from the directory's — naming the file and field.
    """
    p = Path(path)
    md = p if p.name == "SKILL.md" else p / "SKILL.md"
    if not md.is_file():
        raise ConfigError(f"{md}: no SKILL.md (a skill is a directory holding one)")
    text = md.read_text(encoding="utf-8")
    m = re.match(r"^---[ \t]*\n(.*?)\n---[ \t]*(?:\n|$)(.*)", text, re.DOTALL)
    if m is None:
        raise ConfigError(f"{md}: no YAML front matter (the file must start with '---')")
    try:
        front = yaml.safe_load(m.group(1))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{md}: front matter is not valid YAML: {exc}") from None
    if not isinstance(front, dict):
        raise ConfigError(f"{md}: front matter must be a mapping of fields")
    meta = _front_matter(front, str(md))
    if meta["name"] != md.parent.name:
        raise ConfigError(
            f"{md}: field 'name' {meta['name']!r} must equal the directory name {md.parent.name!r}"
        )
    files: dict[str, str] = {}
    for sub in ("references", "scripts", "assets"):
        for f in sorted((md.parent / sub).rglob("*")) if (md.parent / sub).is_dir() else []:
            if f.is_file() and f.stat().st_size <= _MAX_FILE:
                try:
                    files[f.relative_to(md.parent).as_posix()] = f.read_text(encoding="utf-8")
                except UnicodeDecodeError:
                    continue  # binary assets are not shown to models
    return Skill(body=m.group(2).strip(), files=files, source=str(md), **meta)


def load_skills(sources: Iterable[Any]) -> list[Skill]:
    """Skills from a mix of :class:`Skill` objects, their :meth:`Skill.to_dict` form,
    single skill directories and directories of skill directories.

    Raises:
        ConfigError: a bad skill (see :func:`load_skill`), or two skills with one name.
    """
    out: dict[str, Skill] = {}
    for src in sources:
        if isinstance(src, Skill):
            found = [src]
        elif isinstance(src, dict):
            found = [Skill.from_dict(src)]
        elif isinstance(src, str | Path):
            p = Path(src)
            if (p / "SKILL.md").is_file() or p.name == "SKILL.md":
                found = [load_skill(p)]
            elif p.is_dir():
                found = [load_skill(d) for d in sorted(p.iterdir()) if (d / "SKILL.md").is_file()]
            else:
                raise ConfigError(f"skills: {p} is not a skill directory")
        else:
            raise ConfigError(f"skills: expected a path, a Skill or a dict, got {src!r:.80}")
        for s in found:
            if s.name in out:
                raise ConfigError(f"skills: two skills are named {s.name!r}")
            out[s.name] = s
    return list(out.values())


def catalogue(skills: Iterable[Skill], *, max_tokens: int = 400) -> str:
    """The names and descriptions, within ``max_tokens`` (≈ 4 characters a token); skills
    that do not fit are counted in a last line."""
    lines: list[str] = []
    budget = max_tokens * 4
    items = list(skills)
    for i, s in enumerate(items):
        line = f"- {s.name}: {s.description}"
        if len(line) + sum(map(len, lines)) > budget:
            lines.append(f"- ({len(items) - i} more skills not listed)")
            break
        lines.append(line)
    return "\n".join(lines)


def skills_digest(skills: Iterable[Skill]) -> dict[str, str]:
    """``{name: sha256}`` of every skill (what a run records)."""
    return {s.name: s.digest() for s in skills}


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
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": list(props)},
        },
    }
