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
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentlab.errors import ConfigError

__all__ = ["Skill", "catalogue", "load_skill", "load_skills", "skills_digest"]

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


def load_skills(sources: Iterable[Skill | dict[str, Any] | str | Path]) -> list[Skill]:
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
