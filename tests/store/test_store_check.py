"""A deleted or damaged agent store is refused when the run opens, naming the file; a
closed packed store holds its states in ``agents.sqlite`` itself (not only the WAL)."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from agentlab.errors import CorruptRecordError, StoreError
from agentlab.runtime import Society
from agentlab.store.agent_store import DirectoryStore

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _copy(src: Path, dst: Path) -> Path:
    """A copy of a run as a crash leaves it (the writer's lock file is not a lock)."""
    shutil.copytree(src, dst)
    return dst


def _society(path: Path, store: str) -> Society:
    return Society.create(path, agents={"counter": 5}, store=store, progress=False)


def _open_fd_paths() -> list[str]:
    return [os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")]


def test_packed_store_damage_is_named_at_open(tmp_path: Path) -> None:
    s = _society(tmp_path / "run", "packed")
    s.run_sync(ticks=1)
    tick1 = _copy(tmp_path / "run", tmp_path / "tick1")  # not closed: ticks live in the WAL
    s.run_sync(ticks=1)
    crash = _copy(tmp_path / "run", tmp_path / "crash")
    s.close()
    wal = "agents.sqlite-wal"
    assert (crash / wal).stat().st_size > 0

    gone = _copy(crash, tmp_path / "no_wal")
    (gone / wal).unlink()
    with pytest.raises(CorruptRecordError, match=rf"{gone / 'agents.sqlite'} holds agent states up to tick 0.*committed tick 2.*{wal}"):  # fmt: skip
        Society.open(gone, progress=False)

    older = _copy(crash, tmp_path / "old_wal")
    shutil.copyfile(tick1 / wal, older / wal)  # an older WAL in its place
    with pytest.raises(CorruptRecordError, match="up to tick 1, but the run committed tick 2"):
        Society.open(older, progress=False)

    junk = _copy(crash, tmp_path / "junk_wal")
    (junk / wal).write_bytes(os.urandom(4096))
    with pytest.raises(CorruptRecordError, match=wal):
        Society.open(junk, progress=False, read_only=True)

    no_db = _copy(crash, tmp_path / "no_db")
    for name in ("agents.sqlite", wal, "agents.sqlite-shm"):
        (no_db / name).unlink(missing_ok=True)
    with pytest.raises(StoreError, match=rf"{no_db / 'agents.sqlite'} is missing"):
        Society.open(no_db, progress=False)


def test_directory_store_damage_is_named_at_open(tmp_path: Path) -> None:
    s = _society(tmp_path / "run", "directory")
    s.run_sync(ticks=1)
    s.close()
    gone = _copy(tmp_path / "run", tmp_path / "no_agents")
    shutil.rmtree(gone / "agents")
    with pytest.raises(StoreError, match=rf"{gone / 'agents'} is missing"):
        Society.open(gone, progress=False)
    one = _copy(tmp_path / "run", tmp_path / "one_gone")
    victim = sorted(os.listdir(one / "agents"))[2]
    shutil.rmtree(one / "agents" / victim)
    with pytest.raises(CorruptRecordError, match=rf"1 of 5 agents have no workspace.*{victim}"):
        Society.open(one, progress=False)
    assert repr(DirectoryStore(one / "agents")) == f"DirectoryStore({str(one / 'agents')!r})"


def test_close_checkpoints_a_small_packed_run_and_closes_sqlite(tmp_path: Path) -> None:
    run = tmp_path / "run"
    s = _society(run, "packed")
    s.run_sync(ticks=2)
    s.close()
    db = str(run / "agents.sqlite")
    assert db not in _open_fd_paths()  # the connection is closed
    wal = run / "agents.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    # the file alone holds every agent's state of the committed tick
    alone = tmp_path / "alone.sqlite"
    shutil.copyfile(db, alone)
    with sqlite3.connect(alone) as con:
        slots = con.execute("SELECT count(*) FROM kv WHERE key LIKE 'state/state.%'").fetchone()
    assert slots[0] >= 5
    again = Society.open(run, progress=False)
    assert again.tick == 2 and again.run_sync(ticks=1)["steps"] == 5
    again.close()
