"""Agent workspaces on an :class:`~agentlab.store.agent_store.AgentStore`, versioned by tick.

Layout of one workspace (keys of the store)::

    config.json          the agent's configuration (written once, at create)
    AGENT.json           identity: id, type, class, schema_version (written last at create)
    state/state.json     the agent's state, as a tick-versioned envelope (below)
    .runtime/logs/*      diagnostics (step errors); not state, may hold rows of aborted ticks

Why an envelope: a tick must be atomic across thousands of agents, but agents persist one
by one. Each state file therefore keeps the new value *and* the value it was derived from::

    {"schema_version": 1, "tick": t, "value": ..., "prev_tick": p, "prev": ...}

A reader that knows the last committed tick ``C`` (from ``SOCIETY_STEP.json``) takes
``value`` if ``tick <= C`` and ``prev`` otherwise. ``prev`` was loaded under a committed
tick, so it is always ``<= C``. Killing the process anywhere (mid-batch, mid-write, between
the agent writes and the commit) therefore leaves every agent restorable to exactly the
committed tick, with one file write per agent-step and no promotion pass.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from agentlab.core.ids import validate_agent_id
from agentlab.errors import CorruptRecordError, StoreError
from agentlab.store.agent_store import AgentStore, DirectoryStore

__all__ = [
    "ENVELOPE_SCHEMA_VERSION",
    "Workspace",
    "decode_versioned",
    "encode_versioned",
    "workspace_of",
]

ENVELOPE_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Workspace:
    """A handle on one agent's workspace: a store plus an agent id (picklable)."""

    store: AgentStore
    agent_id: str

    def __post_init__(self) -> None:
        validate_agent_id(self.agent_id)

    @property
    def path(self) -> Path | None:
        """The directory of the workspace for a directory store, else ``None``."""
        if isinstance(self.store, DirectoryStore):
            return self.store.path(self.agent_id)
        return None

    def read_json(self, key: str) -> Any:
        """Decode one JSON key; ``None`` when absent."""
        data = self.store.read(self.agent_id, key)
        if data is None:
            return None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise CorruptRecordError(
                f"workspace key {key!r} of agent {self.agent_id!r} is not valid JSON: {exc}"
            ) from exc

    def write_json(self, items: dict[str, Any]) -> None:
        """Write several JSON keys (each one atomically)."""
        self.store.write_many(
            self.agent_id,
            {k: orjson.dumps(v, option=orjson.OPT_SORT_KEYS) for k, v in items.items()},
        )

    def exists(self) -> bool:
        """Whether ``AGENT.json`` is there (it is written last at create)."""
        return self.store.read(self.agent_id, "AGENT.json") is not None


def workspace_of(
    target: Workspace | str | os.PathLike[str] | tuple[AgentStore, str],
) -> Workspace:
    """Normalise a workspace path, a ``(store, agent_id)`` pair or a handle to a handle.

    A path is the agent's directory (``<run>/agents/<agent_id>``); its parent becomes a
    :class:`DirectoryStore`.
    """
    if isinstance(target, Workspace):
        return target
    if isinstance(target, tuple):
        store, agent_id = target
        return Workspace(store, agent_id)
    if isinstance(target, str | os.PathLike):
        p = Path(target)
        return Workspace(DirectoryStore(p.parent), p.name)
    raise StoreError(
        f"cannot open a workspace from {target!r}; pass a path, (store, agent_id) or Workspace"
    )


def encode_versioned(tick: int, value: Any, prev_tick: int | None, prev: Any) -> bytes:
    """The envelope bytes for ``value`` at ``tick``, derived from ``prev`` at ``prev_tick``."""
    env = {
        "schema_version": ENVELOPE_SCHEMA_VERSION,
        "tick": tick,
        "value": value,
        "prev_tick": prev_tick,
        "prev": prev,
    }
    return orjson.dumps(env, option=orjson.OPT_SORT_KEYS)


def decode_versioned(data: bytes, committed: int | None, *, where: str = "") -> tuple[int, Any]:
    """``(tick, value)`` of the newest version not after ``committed`` (``None``: newest)."""
    try:
        env = orjson.loads(data)
        tick = int(env["tick"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptRecordError(f"bad state envelope {where}: {exc}") from exc
    if env.get("schema_version") != ENVELOPE_SCHEMA_VERSION:
        raise CorruptRecordError(
            f"state envelope {where} has schema_version {env.get('schema_version')!r}; "
            f"expected {ENVELOPE_SCHEMA_VERSION}"
        )
    if committed is None or tick <= committed:
        return tick, env["value"]
    prev_tick = env.get("prev_tick")
    if prev_tick is None or prev_tick > committed:
        raise CorruptRecordError(
            f"state {where} has no version at or before committed tick {committed} "
            f"(versions: {tick}, {prev_tick})"
        )
    return int(prev_tick), env["prev"]
