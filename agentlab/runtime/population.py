"""The ``agents=`` argument of ``Society.create``: validated up front, expanded lazily.

:class:`Population` checks every entry (types registered, ids safe and unique) before
anything is written, and keeps only ``(agent_id, type)`` per agent; each agent's config is
built when :meth:`Population.__iter__` reaches it, so a million agents of one group never
exist as a million config dicts at once. :func:`write_population` writes the workspaces:
into a packed store as bulk inserts, one transaction per segment of agents (no per-agent
transaction, existence check or ``mkdir``); into a directory store one agent at a time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from agentlab.agents.base import AgentBase
from agentlab.agents.personas import load_personas
from agentlab.agents.registry import get_agent_class
from agentlab.core.ids import validate_agent_id
from agentlab.errors import ConfigError
from agentlab.store.agent_store import AgentStore
from agentlab.store.packed_store import PackedStore

__all__ = ["CREATE_SEGMENT", "Population", "expand_agents", "write_population"]

#: agents per create transaction of a packed store. Measured at N = 100k (counter agents,
#: 3 keys each, building + inserting the rows, two runs on the loaded 2-core box): 256 per
#: commit 6.9-8.1 s, 4096 5.6-6.4 s, 32768 4.7-5.5 s. 4096 takes most of the gain while
#: the WAL stays a few MB (it holds one transaction's pages until a checkpoint).
CREATE_SEGMENT = 4096


class _Group:
    """``n`` agents of one type and config, ids ``<prefix>-<start + i>`` (zero-padded)."""

    __slots__ = ("config", "n", "prefix", "seed", "start", "type", "width")

    def __init__(
        self, type_name: str, n: int, config: dict[str, Any], prefix: str, seed: int, start: int
    ) -> None:
        if n < 0:
            raise ConfigError(f"agent group {type_name!r}: n must be >= 0, got {n}")
        self.type, self.n, self.config, self.prefix = type_name, n, config, prefix
        self.seed, self.start = seed, start
        self.width = max(5, len(str(start + n)))
        if n:  # the widest and narrowest ids decide validity (same characters otherwise)
            validate_agent_id(self.id(0))
            validate_agent_id(self.id(n - 1))

    def id(self, i: int) -> str:
        return f"{self.prefix}-{self.start + i:0{self.width}d}"

    def configs(self) -> Iterator[dict[str, Any]]:
        """Each agent's config, in id order (a fresh dict each: agents may change theirs)."""
        personas = (
            load_personas(self.n, self.seed)
            if self.type == "llm" and "persona" not in self.config
            else None
        )
        for i in range(self.n):
            cfg = dict(self.config)
            if personas is not None:
                cfg["persona"] = personas[i]
            yield cfg


class Population:
    """The validated population of a society (see ``Society.create`` for the forms).

    Forms: ``200`` (llm persona agents), ``{"counter": 10, "llm": 5}``, a list of
    ``{"type": t, "id": id, "config": {...}}`` or ``{"type": t, "n": k, "config": {...}}``
    dicts, or ``(type, id, config)`` tuples.

    Raises:
        ConfigError: a malformed entry or duplicate ids (``UnknownNameError`` for an
            unregistered type, ``InvalidAgentIdError`` for an unsafe id).
    """

    def __init__(self, agents: Any, seed: int = 0) -> None:
        if isinstance(agents, bool) or agents is None:
            raise ConfigError(f"agents must be an int, a dict or a list, got {agents!r}")
        if isinstance(agents, int):
            agents = [{"type": "llm", "n": agents}]
        elif isinstance(agents, dict):
            agents = [{"type": t, "n": n} for t, n in agents.items()]
        self._parts: list[_Group | tuple[str, str, dict[str, Any]]] = []
        count = 0
        for item in agents:
            if isinstance(item, tuple | list):
                t, agent_id, *rest = item
                get_agent_class(str(t))
                one = (str(t), validate_agent_id(agent_id), dict(rest[0] if rest else {}))
                self._parts.append(one)
                count += 1
                continue
            if not isinstance(item, dict) or "type" not in item:
                raise ConfigError(f"agent entry {item!r}: need a dict with 'type' or a tuple")
            get_agent_class(item["type"])  # fail early with the list of registered types
            cfg = dict(item.get("config") or {})
            if "n" in item:
                prefix = item.get("prefix") or item["type"]
                group = _Group(item["type"], int(item["n"]), cfg, prefix, seed + count, count)
                self._parts.append(group)
                count += group.n
            else:
                self._parts.append((item["type"], validate_agent_id(item["id"]), cfg))
                count += 1
        #: ``[agent_id, type]`` per agent, in creation (= batch) order
        self.pairs: list[list[str]] = []
        for part in self._parts:
            if isinstance(part, _Group):
                self.pairs.extend([part.id(i), part.type] for i in range(part.n))
            else:
                self.pairs.append([part[1], part[0]])
        if len({a for a, _ in self.pairs}) != len(self.pairs):
            counts = Counter(a for a, _ in self.pairs)
            dup = sorted(a for a, c in counts.items() if c > 1)[:5]
            raise ConfigError(f"duplicate agent ids: {dup}")

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """``(type, agent_id, config)`` per agent, configs built one at a time."""
        pairs, at = self.pairs, 0
        for part in self._parts:
            if isinstance(part, _Group):
                for i, cfg in enumerate(part.configs(), at):
                    yield part.type, pairs[i][0], cfg
                at += part.n
            else:
                yield part[0], part[1], dict(part[2])
                at += 1


def expand_agents(agents: Any, seed: int = 0) -> list[tuple[str, str, dict[str, Any]]]:
    """Every ``(type, agent_id, config)`` of ``agents`` as a list (see :class:`Population`)."""
    return list(Population(agents, seed))


def _profile(type_name: str, agent_id: str, config: dict[str, Any], version: int) -> dict[str, Any]:
    persona = config.get("persona") or {}
    return {
        "agent_id": agent_id,
        "type": type_name,
        "name": persona.get("name"),
        "config": config,
        "schema_version": version,
    }


def write_population(
    store: AgentStore, population: Population, sink: Any, *, schema_version: int
) -> None:
    """Write every agent's fresh workspace into ``store`` and its ``agent_profiles`` row.

    A :class:`PackedStore` gets one transaction per :data:`CREATE_SEGMENT` agents (plain
    inserts: an id already stored raises ``StoreError``); any other store goes through
    ``AgentBase.create`` per agent.
    """
    classes: dict[str, type[AgentBase]] = {}
    if not isinstance(store, PackedStore):
        for type_name, agent_id, config in population:
            klass = classes.get(type_name) or classes.setdefault(
                type_name, get_agent_class(type_name)
            )
            agent = klass.create(store, agent_id, config)
            sink.append(
                "agent_profiles", _profile(type_name, agent_id, agent.config, schema_version)
            )
        return
    rows: list[tuple[str, str, bytes]] = []
    profiles: list[dict[str, Any]] = []
    for type_name, agent_id, config in population:
        klass = classes.get(type_name) or classes.setdefault(type_name, get_agent_class(type_name))
        agent, items = klass.new_workspace_items(agent_id, config)
        rows.extend((agent_id, k, v) for k, v in items.items())
        profiles.append(_profile(type_name, agent_id, agent.config, schema_version))
        if len(profiles) >= CREATE_SEGMENT:
            store.insert_new(rows)
            sink.extend("agent_profiles", profiles)
            rows, profiles = [], []
    if profiles:
        store.insert_new(rows)
        sink.extend("agent_profiles", profiles)
