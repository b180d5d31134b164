"""The agent-store protocol: where an agent's (or agent thread's) state lives between steps.

A store maps ``(agent_id, key) -> bytes``. Keys are relative POSIX paths inside the agent's
workspace (``config.json``, ``AGENT.json``, ``state/memory.json``, ``.runtime/logs/x``), so
the directory store is a human-readable workspace and a packed store (SQLite, in-memory)
holds the same keys as rows. ``write_many`` is atomic per agent: after a crash a reader sees
either all of the batch or none of it (the directory store gets this by writing each file
atomically and committing the set through a manifest-free rename per file; the packed
stores use a transaction).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from agentlab.core.ids import validate_agent_id
from agentlab.errors import StoreError
from agentlab.store.atomic import atomic_write_bytes

__all__ = ["AgentStore", "DirectoryStore", "validate_key"]


_VALID_KEYS: set[str] = set()  # keys already checked (a few constants in practice)


def validate_key(key: str) -> str:
    """Reject keys that could leave the agent's workspace."""
    if key in _VALID_KEYS:  # every agent-step writes the same slot keys: check them once
        return key
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in {"", ".", ".."} for p in parts) or "\\" in key:
        raise StoreError(f"invalid workspace key {key!r}: use a relative path like 'state/x.json'")
    if len(_VALID_KEYS) < 4096 and type(key) is str:
        _VALID_KEYS.add(key)
    return key


@runtime_checkable
class AgentStore(Protocol):
    """Bytes per (agent id, key). Implementations: directory, SQLite, in-memory."""

    def read(self, agent_id: str, key: str) -> bytes | None:
        """The stored bytes, or ``None`` if absent."""
        ...

    def write_many(self, agent_id: str, items: Mapping[str, bytes]) -> None:
        """Store several keys of one agent; each key is replaced atomically."""
        ...

    def delete(self, agent_id: str) -> None:
        """Remove an agent and all its keys."""
        ...

    def agents(self) -> list[str]:
        """Ids of every stored agent, sorted."""
        ...

    def keys(self, agent_id: str) -> list[str]:
        """Keys of one agent, sorted."""
        ...


class DirectoryStore:
    """One directory per agent under ``root`` (the human-readable workspace layout).

    Args:
        root: usually ``<run>/agents``.
        fsync: flush each file to disk before rename (off by default: rename is already
            atomic against process crashes; turn on for power-loss safety).
    """

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.root = Path(root)
        self.fsync = fsync

    def path(self, agent_id: str) -> Path:
        """The workspace directory of ``agent_id`` (validated)."""
        return self.root / validate_agent_id(agent_id)

    def read(self, agent_id: str, key: str) -> bytes | None:
        try:
            return (self.path(agent_id) / validate_key(key)).read_bytes()
        except FileNotFoundError:
            return None

    def write(self, agent_id: str, key: str, data: bytes) -> None:
        """Store one key atomically."""
        atomic_write_bytes(self.path(agent_id) / validate_key(key), data, fsync=self.fsync)

    def write_many(self, agent_id: str, items: Mapping[str, bytes]) -> None:
        base = self.path(agent_id)
        for key, data in items.items():
            atomic_write_bytes(base / validate_key(key), data, fsync=self.fsync)

    def delete(self, agent_id: str) -> None:
        shutil.rmtree(self.path(agent_id), ignore_errors=True)

    def agents(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def keys(self, agent_id: str) -> list[str]:
        base = self.path(agent_id)
        if not base.is_dir():
            return []
        return sorted(
            p.relative_to(base).as_posix()
            for p in base.rglob("*")
            if p.is_file() and not p.name.endswith(".tmp")
        )

    def exists(self, agent_id: str) -> bool:
        """Whether the agent has a workspace."""
        return self.path(agent_id).is_dir()

    def __reduce__(self) -> tuple[type, tuple[str, bool]]:
        return (DirectoryStore, (str(self.root), self.fsync))

    def __repr__(self) -> str:
        # errors name the store (``no agent workspace for 'a1' in DirectoryStore('/run/agents')``)
        return f"DirectoryStore({str(self.root)!r})"


def iter_bytes(store: AgentStore, agent_id: str, keys: Iterable[str]) -> dict[str, bytes]:
    """Read several keys at once (missing keys are left out)."""
    out: dict[str, bytes] = {}
    for k in keys:
        data = store.read(agent_id, k)
        if data is not None:
            out[k] = data
    return out
