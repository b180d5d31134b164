"""Turning the ``agents=`` argument of ``Society.create`` into ``(type, id, config)``."""

from __future__ import annotations

from typing import Any

from agentlab.agents.personas import load_personas
from agentlab.agents.registry import get_agent_class
from agentlab.core.ids import validate_agent_id
from agentlab.errors import ConfigError

__all__ = ["expand_agents"]


def _group(
    type_name: str, n: int, config: dict[str, Any], prefix: str, seed: int, start: int
) -> list[tuple[str, str, dict[str, Any]]]:
    get_agent_class(type_name)  # fail early with the list of registered types
    personas = load_personas(n, seed) if type_name == "llm" and "persona" not in config else None
    width = max(5, len(str(start + n)))
    out = []
    for i in range(n):
        cfg = dict(config)
        if personas is not None:
            cfg["persona"] = personas[i]
        out.append((type_name, f"{prefix}-{start + i:0{width}d}", cfg))
    return out


def expand_agents(agents: Any, seed: int = 0) -> list[tuple[str, str, dict[str, Any]]]:
    """Normalise ``agents`` (see ``Society.create``) and validate ids (unique, safe).

    Forms: ``200`` (llm persona agents), ``{"counter": 10, "llm": 5}``, a list of
    ``{"type": t, "id": id, "config": {...}}`` or ``{"type": t, "n": k, "config": {...}}``
    dicts, or ``(type, id, config)`` tuples.
    """
    out: list[tuple[str, str, dict[str, Any]]] = []
    if isinstance(agents, bool) or agents is None:
        raise ConfigError(f"agents must be an int, a dict or a list, got {agents!r}")
    if isinstance(agents, int):
        agents = [{"type": "llm", "n": agents}]
    elif isinstance(agents, dict):
        agents = [{"type": t, "n": n} for t, n in agents.items()]
    for item in agents:
        if isinstance(item, tuple | list):
            t, agent_id, *rest = item
            out.append((str(t), validate_agent_id(agent_id), dict(rest[0] if rest else {})))
            continue
        if not isinstance(item, dict) or "type" not in item:
            raise ConfigError(f"agent entry {item!r}: need a dict with 'type' or a tuple")
        cfg = dict(item.get("config") or {})
        if "n" in item:
            prefix = item.get("prefix") or item["type"]
            group_seed = seed + len(out)
            out.extend(_group(item["type"], int(item["n"]), cfg, prefix, group_seed, len(out)))
        else:
            get_agent_class(item["type"])
            out.append((item["type"], validate_agent_id(item["id"]), cfg))
    ids = [a for _, a, _ in out]
    if len(set(ids)) != len(ids):
        dup = sorted({a for a in ids if ids.count(a) > 1})[:5]
        raise ConfigError(f"duplicate agent ids: {dup}")
    for a in ids:
        validate_agent_id(a)
    return out
