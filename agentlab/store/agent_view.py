"""``AgentView``: one agent's workspace and rows, as returned by ``Run.agent(agent_id)``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agentlab.core.ids import validate_agent_id
from agentlab.store.packed_store import open_agent_store

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["AgentView"]


class _RunReader(Protocol):
    """What a view reads of its :class:`~agentlab.store.run.Run` (declared here: ``run``
    imports this module to build views)."""

    @property
    def path(self) -> Path: ...
    def _catalog(self) -> dict[str, Any]: ...
    def df(self, dataset: str, where: Any = None) -> pd.DataFrame: ...


class AgentView:
    """Read-only view of one agent in a run.

    Attributes:
        agent_id: the agent.
        path: its workspace directory ``<run>/agents/<agent_id>`` (may not exist).
    """

    def __init__(self, run: _RunReader, agent_id: str) -> None:
        self.agent_id = validate_agent_id(agent_id)
        self._run = run
        # packed runs (``<run>/agents.sqlite``) read through the same protocol
        self._store = open_agent_store(run.path)
        self.path: Path = run.path / "agents" / self.agent_id

    @property
    def files(self) -> list[str]:
        """Workspace keys (relative paths), sorted."""
        return self._store.keys(self.agent_id)

    def read(self, key: str) -> bytes | None:
        """Bytes of one workspace file (``None`` if absent)."""
        return self._store.read(self.agent_id, key)

    def json(self, key: str) -> Any:
        """One workspace file parsed as JSON (``None`` if absent)."""
        data = self.read(key)
        return None if data is None else json.loads(data)

    @property
    def datasets(self) -> list[str]:
        """Datasets that have an ``agent_id`` column."""
        catalog = self._run._catalog()
        return [n for n in sorted(catalog) if "agent_id" in catalog[n].get("columns", {})]

    def df(self, dataset: str) -> pd.DataFrame:
        """This agent's rows of ``dataset``."""
        return self._run.df(dataset, where={"agent_id": self.agent_id})

    def rows(self) -> dict[str, pd.DataFrame]:
        """This agent's rows in every dataset with an ``agent_id`` column."""
        return {name: self.df(name) for name in self.datasets}

    def __repr__(self) -> str:
        return f"AgentView({self.agent_id!r}, files={len(self.files)})"
