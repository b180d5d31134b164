"""Agent workspaces: round trip for every type, tick versioning, atomicity, ids, registry."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from agentlab.agents import (
    AgentBase,
    CounterAgent,
    LLMAgent,
    agent_types,
    get_agent_class,
    portable_classes,
    register_agent,
)
from agentlab.agents import registry as reg
from agentlab.agents.workspace import SLOT_KEYS, decode_slot, encode_slot, pick_version
from agentlab.errors import (
    AgentError,
    ConfigError,
    CorruptRecordError,
    InvalidAgentIdError,
    UnknownNameError,
)
from agentlab.store.agent_store import DirectoryStore

CONFIGS: dict[str, dict[str, Any]] = {
    "counter": {"llm_calls": 1},
    "llm": {"persona": {"name": "Ada", "bio": "A baker."}, "memory_size": 3},
}


@pytest.mark.parametrize("type_name", sorted(CONFIGS))
def test_round_trip_every_builtin_type(run_dir: Path, type_name: str) -> None:
    assert set(CONFIGS) <= set(agent_types())
    cls = get_agent_class(type_name)
    agent = cls.create(run_dir, "a-1", CONFIGS[type_name])
    ws = run_dir / "agents" / "a-1"
    assert {"config.json", "AGENT.json", SLOT_KEYS[0]} <= {
        p.relative_to(ws).as_posix() for p in ws.rglob("*") if p.is_file()
    }
    ident = orjson.loads((ws / "AGENT.json").read_bytes())
    assert ident["type"] == type_name and ident["schema_version"] == 1
    # mutate, persist as tick 1, rebuild: same class, config and state
    agent.state["extra"] = [1, 2, 3]
    agent.to_workspace(1)
    back = AgentBase.from_workspace(ws)
    assert type(back) is cls
    assert back.config == agent.config
    assert back.state == agent.state
    assert back.base_tick == 1


def test_every_registered_type_round_trips(run_dir: Path) -> None:
    # Any type another module registers must survive create -> from_workspace too.
    for i, name in enumerate(agent_types()):
        cls = get_agent_class(name)
        a = cls.create(run_dir, f"t{i}", CONFIGS.get(name, {}))
        b = AgentBase.from_workspace((DirectoryStore(run_dir / "agents"), f"t{i}"))
        assert type(b) is cls and b.get_state() == a.get_state()


def test_committed_tick_selects_version(run_dir: Path) -> None:
    a = CounterAgent.create(run_dir, "c")
    a.state["total"] = 10
    a.to_workspace(1)  # tick 1, derived from tick 0
    b = AgentBase.from_workspace(run_dir / "agents" / "c", committed_tick=1)
    b.state["total"] = 20
    b.to_workspace(2)  # tick 2 written, not yet committed
    assert AgentBase.from_workspace(run_dir / "agents" / "c", committed_tick=1).state["total"] == 10
    assert AgentBase.from_workspace(run_dir / "agents" / "c", committed_tick=2).state["total"] == 20
    # re-stepping the uncommitted tick 2 from the committed version keeps tick 1 as prev
    c = AgentBase.from_workspace(run_dir / "agents" / "c", committed_tick=1)
    c.state["total"] = 30
    c.to_workspace(2)
    assert AgentBase.from_workspace(run_dir / "agents" / "c", committed_tick=1).state["total"] == 10
    assert AgentBase.from_workspace(run_dir / "agents" / "c").state["total"] == 30


def test_slots_pick_the_newest_committed_version() -> None:
    s0, s1 = encode_slot(4, {"x": 0}), encode_slot(5, {"x": 1})
    assert pick_version([s0, s1], 4)[1:] == (4, {"x": 0})
    assert pick_version([s0, s1], None)[1:] == (5, {"x": 1})
    assert pick_version([s1, s0], 9) == (0, 5, {"x": 1})
    with pytest.raises(CorruptRecordError, match="at or before tick 3"):
        pick_version([s0, s1], 3)
    bad = orjson.dumps({"schema_version": 99, "tick": 0, "len": 1, "crc": 0, "value": 1})
    with pytest.raises(CorruptRecordError, match="schema_version"):
        decode_slot(bad)


def test_torn_slot_is_detected_and_skipped() -> None:
    old = encode_slot(1, {"total": 123, "pad": "a" * 50})
    new = encode_slot(2, {"total": 456, "pad": "b" * 50})
    # A write cut anywhere over an older slot decodes as that old version (the cut only
    # touched bytes that were equal) or fails its check; never a new tick with a mixed value.
    for cut in range(1, len(new)):
        torn = new[:cut] + old[cut:]
        if torn == new:
            continue
        try:
            got = decode_slot(torn)
        except CorruptRecordError:
            assert pick_version([encode_slot(0, {"t": 7}), torn], None)[1:] == (0, {"t": 7})
        else:
            assert got == (1, {"total": 123, "pad": "a" * 50})


def test_crash_mid_write_keeps_the_committed_version(run_dir: Path, monkeypatch) -> None:
    a = CounterAgent.create(run_dir, "c")
    a.state["total"] = 1
    a.to_workspace(1)  # slot 1 = tick 1
    b = AgentBase.from_workspace(run_dir / "agents" / "c", committed_tick=1)
    import os

    real = os.pwrite

    def torn(fd: int, data, offset: int) -> int:
        real(fd, bytes(data[: len(data) // 2]), offset)
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(os, "pwrite", torn)
    b.state["total"] = 2
    with pytest.raises(KeyboardInterrupt):
        b.to_workspace(2)  # goes to slot 0 (tick 0 was there), torn
    monkeypatch.undo()
    for committed in (1, None):
        back = AgentBase.from_workspace(run_dir / "agents" / "c", committed_tick=committed)
        assert back.state["total"] == 1 and back.base_tick == 1
    assert not list((run_dir / "agents" / "c").rglob("*.tmp"))


def test_half_created_workspace_is_not_an_agent(run_dir: Path) -> None:
    store = DirectoryStore(run_dir / "agents")
    store.write("x", "config.json", b"{}")  # AGENT.json (written last) is missing
    with pytest.raises(AgentError, match="no agent workspace"):
        AgentBase.from_workspace((store, "x"))


@pytest.mark.parametrize("bad", ["", "..", ".hidden", "a/b", "../escape", "-x", "a" * 200, "é"])
def test_invalid_ids_are_rejected(run_dir: Path, bad: str) -> None:
    with pytest.raises(InvalidAgentIdError):
        CounterAgent.create(run_dir, bad)
    assert not (run_dir.parent / "escape").exists()


def test_duplicate_create_fails(run_dir: Path) -> None:
    CounterAgent.create(run_dir, "dup")
    with pytest.raises(AgentError, match="already exists"):
        CounterAgent.create(run_dir, "dup")


def test_unknown_type_lists_registered() -> None:
    with pytest.raises(UnknownNameError) as ei:
        get_agent_class("no-such-type")
    msg = str(ei.value)
    assert "no-such-type" in msg and "counter" in msg and "llm" in msg


def test_register_rejects_non_agents_and_unregistered_create(run_dir: Path) -> None:
    with pytest.raises(ConfigError):
        register_agent("x")(dict)  # type: ignore[arg-type]

    class Loose(AgentBase):
        pass

    with pytest.raises(ConfigError, match="register_agent"):
        Loose.create(run_dir, "l")


def test_from_workspace_checks_the_requested_class(run_dir: Path) -> None:
    CounterAgent.create(run_dir, "c")
    with pytest.raises(AgentError, match="not a LLMAgent"):
        LLMAgent.from_workspace(run_dir / "agents" / "c")


def test_entry_points_register_types(monkeypatch) -> None:
    class Plugged(CounterAgent):
        pass

    ep = SimpleNamespace(name="plugged-type", load=lambda: Plugged)
    monkeypatch.setattr(
        reg.metadata, "entry_points", lambda group: [ep] if group == reg.ENTRY_POINT_GROUP else []
    )
    monkeypatch.setattr(reg, "_entry_points_loaded", False)
    assert get_agent_class("plugged-type") is Plugged
    assert "plugged-type" in agent_types()
    reg._REGISTRY.pop("plugged-type", None)


def test_main_module_classes_are_portable() -> None:
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(
        "from agentlab.agents import AgentBase, register_agent\n"
        "@register_agent('nb-agent')\n"
        "class NB(AgentBase):\n"
        "    async def step(self, tick):\n"
        "        self.state['n'] = self.state.get('n', 0) + 1\n",
        ns,
    )
    try:
        assert set(portable_classes(["nb-agent", "counter"])) == {"nb-agent"}
    finally:
        reg._REGISTRY.pop("nb-agent", None)


def test_llm_agent_validates_config() -> None:
    with pytest.raises(ConfigError, match="max_iterations"):
        LLMAgent("x", {"max_iterations": 0})


def test_counter_step_without_services_uses_own_rng() -> None:
    a = CounterAgent("c")
    a.rng = random.Random(3)
    asyncio.run(a.step(1))
    assert a.state["total"] == random.Random(3).randint(0, 999)
