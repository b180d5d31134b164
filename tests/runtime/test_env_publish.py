"""The env's published state file (``env/ENV_STATE.json``) after a tick: the same bytes as the
tick's checkpoint, copied rather than encoded twice, and a module's own ``to_workspace``
still used where it has one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentlab.env import EnvBase, tool
from agentlab.runtime import Society
from agentlab.runtime.envhost import EnvHost


class _Counted(EnvBase):
    """A count, its state written by the base class (no tools: each subclass names its own,
    since one host refuses a tool offered twice)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n = state["n"]


class _Tally(_Counted):
    @tool
    def bump(self, agent_id: str = "?") -> int:
        """Add one."""
        self.n += 1
        return self.n


class _OwnWriter(_Counted):
    """Writes its default state file itself (a notebook user's override), elsewhere."""

    state_path = "env/OWN.json"

    @tool
    def poke(self, agent_id: str = "?") -> int:
        """Add one."""
        self.n += 1
        return self.n

    def to_workspace(
        self, run_dir: str | os.PathLike[str], *, path: str | None = None, fsync: bool = True
    ) -> Path:
        target = super().to_workspace(run_dir, path=path, fsync=fsync)
        if path is None:  # the published file only: a marker of its own
            doc = json.loads(target.read_bytes())
            doc["own"] = True
            target.write_text(json.dumps(doc))
        return target


def test_published_state_is_the_tick_checkpoint_byte_for_byte(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    s = Society.create(
        run_dir, agents=20, env=["social_feed"], llm="sim/instant", seed=3, progress=False
    )
    s.run_sync(ticks=2)
    step = json.loads((run_dir / "SOCIETY_STEP.json").read_bytes())
    (rel,) = step["env"]
    published = (run_dir / "env" / "ENV_STATE.json").read_bytes()
    assert published == (run_dir / rel).read_bytes()
    doc = json.loads(published)
    live = s.env_state()[0]  # the env as it stands after the last tick
    assert doc["tick"] == live["tick"] and doc["state"] == live["state"] and doc["state"]["posts"]
    s.close()


def test_publish_copies_base_writers_and_calls_own_writers(tmp_path: Path) -> None:
    base, own = _Tally(), _OwnWriter()
    base.init(1)
    own.init(2)
    host = EnvHost([base, own])
    base.n, own.n = 5, 7
    paths = host.checkpoint(str(tmp_path), 4)
    written = host.publish(str(tmp_path), paths)
    assert written == [tmp_path / "env" / "ENV_STATE.json", tmp_path / "env" / "OWN.json"]
    assert written[0].read_bytes() == (tmp_path / paths[0]).read_bytes()
    doc = json.loads(written[1].read_bytes())
    assert doc["own"] is True and doc["state"] == {"n": 7}
    assert "own" not in json.loads((tmp_path / paths[1]).read_bytes())  # its tick file
