"""``Society.create(store="auto")``: packed from ``PACKED_THRESHOLD`` agents up, directories
below; an explicit store wins; kill -9 mid-tick then resume equals a straight run on both
sides of the threshold; the bulk create writes the same workspaces as per-agent create."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from pathlib import Path
from typing import Any

import pytest

import agentlab.runtime  # noqa: F401  (imported once here; forked children inherit it)
from agentlab.agents.workspace import SLOT_KEYS, decode_slot
from agentlab.errors import ConfigError, StoreError
from agentlab.runtime import Society
from agentlab.store.agent_store import DirectoryStore
from agentlab.store.packed_store import (
    PACKED_FILE,
    PACKED_THRESHOLD,
    PackedStore,
    store_kind,
)
from tests.runtime.society_helpers import final_state, log_rows

UNTIL = 2
# batches of 100, 8 in flight: the child dies after agent write 900 of tick 2, when the first
# 8 batches have finished (a packed store commits a batch's writes at its end) and the last
# 2 are half-way
BATCH, KILL_AT = 100, 900


def _create(run: Path, n: int, **kw: Any) -> Society:
    return Society.create(
        run,
        agents=[{"type": "counter", "n": n, "config": {"llm_calls": 1}}],
        llm="sim/instant",
        seed=3,
        progress=False,
        **kw,
    )


def test_store_kind_by_size_and_explicit_choice_wins(tmp_path: Path) -> None:
    assert store_kind("auto", PACKED_THRESHOLD - 1) == "directory"
    assert store_kind("auto", PACKED_THRESHOLD) == "packed"
    assert store_kind("directory", 10**6) == "directory"
    assert store_kind("packed", 1) == "packed"
    with pytest.raises(ConfigError, match=r"unknown store 'zip'; valid: auto, directory, packed"):
        Society.create(tmp_path / "bad", agents=1, store="zip")
    assert not (tmp_path / "bad" / "SOCIETY.json").exists()

    small, big = (
        _create(tmp_path / "s", PACKED_THRESHOLD - 1),
        _create(tmp_path / "b", PACKED_THRESHOLD),
    )
    try:
        assert (
            isinstance(small.store, DirectoryStore) and not (small.run_dir / PACKED_FILE).exists()
        )
        assert len(small.store.agents()) == PACKED_THRESHOLD - 1
        assert isinstance(big.store, PackedStore) and not (big.run_dir / "agents").exists()
        assert len(big.store.agents()) == PACKED_THRESHOLD
    finally:
        small.close()
        big.close()
    forced = _create(tmp_path / "d", PACKED_THRESHOLD, store="directory")
    forced.close()
    assert isinstance(Society.open(tmp_path / "d", read_only=True).store, DirectoryStore)


def test_bulk_create_writes_the_per_agent_layout(tmp_path: Path) -> None:
    packed, dirs = (
        _create(tmp_path / "p", 300, store="packed"),
        _create(tmp_path / "d", 300, store="directory"),
    )
    ps, ds = packed.store, dirs.store
    packed.close()
    dirs.close()
    assert ps.agents() == ds.agents() and len(ps.agents()) == 300
    for a in ps.agents():
        assert ps.keys(a) == ds.keys(a) == ["AGENT.json", "config.json", "state/state.0.json"]
        assert all(ps.read(a, k) == ds.read(a, k) for k in ps.keys(a))
    # the bulk insert never replaces: an id already stored is refused as a whole
    assert isinstance(ps, PackedStore)
    with pytest.raises(StoreError, match="already exists"):
        ps.insert_new(
            [("counter-99999", "AGENT.json", b"{}"), (ps.agents()[0], "AGENT.json", b"{}")]
        )
    assert "counter-99999" not in ps.agents()


def _child(run: str, n: int, kill_at: int) -> None:
    # Forked child: run to the end, or SIGKILL itself after the kill_at-th agent write of
    # tick 2 (tick 1 committed; part of tick 2's agents persisted, part not).
    from agentlab.agents.base import AgentBase

    real = AgentBase.to_workspace
    count = [0]

    def to_workspace(self: AgentBase, tick: int | None = None) -> None:
        real(self, tick)
        if tick == 2:
            count[0] += 1
            if count[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    AgentBase.to_workspace = to_workspace  # type: ignore[method-assign]
    path = Path(run)
    s = (
        Society.open(path, progress=False)
        if (path / "SOCIETY_STEP.json").exists()
        else _create(path, n, batch_size=BATCH)
    )
    s.run_sync(until=UNTIL)
    s.close()
    os._exit(0)


def _run_child(run: Path, n: int, kill_at: int = 0) -> int:
    p = mp.get_context("fork").Process(target=_child, args=(str(run), n, kill_at))
    p.start()
    p.join(120)
    assert p.exitcode is not None, "society child hung"
    return p.exitcode


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    ("n", "kind"), [(PACKED_THRESHOLD - 1, DirectoryStore), (PACKED_THRESHOLD, PackedStore)]
)
def test_kill9_mid_tick_then_resume_equals_straight_on_both_stores(
    tmp_path: Path, n: int, kind: type
) -> None:
    straight, killed = tmp_path / "a" / "run", tmp_path / "b" / "run"
    assert _run_child(straight, n) == 0
    assert _run_child(killed, n, KILL_AT) == -signal.SIGKILL
    s = Society.open(killed, read_only=True)
    store = s.store
    s.close()
    assert s.tick == 1 and isinstance(store, kind)
    # the kill landed inside tick 2: some agents had persisted their tick-2 version
    written = sum(
        any(
            raw is not None and decode_slot(raw)[0] == 2
            for raw in (store.read(a, k) for k in SLOT_KEYS)
        )
        for a in store.agents()
    )
    assert 0 < written < n
    assert _run_child(killed, n) == 0
    got, ref = final_state(killed), final_state(straight)
    assert got["tick"] == ref["tick"] == UNTIL
    assert got["agents"] == ref["agents"]
    assert log_rows(killed) == log_rows(straight)


def test_agent_create_and_open_by_run_path_use_a_packed_runs_store(tmp_path: Path) -> None:
    from agentlab.agents.registry import get_agent_class

    run = tmp_path / "r"
    _create(run, 3, store="packed").close()
    cls = get_agent_class("counter")
    cls.create(run, "late", {"llm_calls": 0})  # a path, not the store: must not write dirs
    assert not (run / "agents" / "late").exists()
    assert PackedStore(run / PACKED_FILE).read("late", "AGENT.json") is not None
