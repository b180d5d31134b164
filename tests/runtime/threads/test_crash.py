"""No lost or duplicated deliveries under redelivery, injected crashes and kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from agentlab.runtime.threads import (
    AgentSystem,
    Delivery,
    MemoryThreadStore,
    ScriptedModel,
    SimulatedCrash,
    SQLiteThreadStore,
    validate_openai_messages,
)
from agentlab.runtime.threads.system import FAULT_POINTS
from tests.runtime.threads.thread_helpers import CountingTool

TIDS = ["a", "b", "c"]


async def _reference() -> dict[str, list[dict[str, Any]]]:
    system = AgentSystem(ScriptedModel(), tools=[CountingTool().tool])
    async with system:
        for t in TIDS:
            system.send_user(t, f"hello {t}", "u0")
        await system.drain()
    return {t: system.history(t) for t in TIDS}


def _make_store(kind: str, tmp_path: Path) -> Any:
    return MemoryThreadStore() if kind == "memory" else SQLiteThreadStore(tmp_path / "t.db")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("point", FAULT_POINTS)
async def test_crash_at_injection_point_then_recover(kind: str, point: str, tmp_path: Path) -> None:
    store = _make_store(kind, tmp_path)
    tool = CountingTool()
    crashed: list[str] = []

    def fault(p: str, tid: str) -> None:
        if p == point and tid == "b" and not crashed:
            crashed.append(tid)
            raise SimulatedCrash(f"crash at {p}")

    first = AgentSystem(ScriptedModel(), store, [tool.tool], fault=fault)
    async with first:
        for t in TIDS:
            first.send_user(t, f"hello {t}", "u0")
        with pytest.raises(Exception, match="crash at"):
            await first.drain()
    assert crashed == ["b"]
    # A new process over the same store: recover() re-dispatches, queue is replayed.
    second = AgentSystem(ScriptedModel(), store, [tool.tool])
    async with second:
        await second.drain()
    got = {t: second.history(t) for t in TIDS}
    assert got == await _reference()  # nothing lost, nothing applied twice
    for h in got.values():
        validate_openai_messages(h)
    assert store.queued() == 0
    # at-least-once dispatch: a tool may be restarted, its duplicate result is dropped
    assert all(n >= 1 for n in tool.starts.values()) and len(tool.starts) == 3


async def test_redelivered_messages_are_deduplicated() -> None:
    tool = CountingTool()
    system = AgentSystem(ScriptedModel(), tools=[tool.tool])
    async with system:
        for _ in range(3):
            system.send_user("a", "hello a", "u0")
            system.send(Delivery("a", "event", "ping", "e0"))
            system.send(Delivery("a", "tool_result", "forged copy", call_id="call_0"))
        await system.drain()
    h = system.history("a")
    validate_openai_messages(h)
    assert sum(m["role"] == "user" for m in h) == 1
    assert sum(m["role"] == "tool" and "ping" in m["content"] for m in h) == 1
    assert sum(m["role"] == "tool" and m.get("tool_call_id") == "call_0" for m in h) == 1


def _state(store: Any, tid: str) -> Any:
    from agentlab.runtime.threads import ThreadState
    from agentlab.runtime.threads.codec import decode_state

    d = decode_state(store.read(tid, "state"))
    return None if d is None else ThreadState.from_dict(d)


CHILD = textwrap.dedent(
    """
    import asyncio, random, sys
    sys.path.insert(0, {root!r})
    from agentlab.runtime.threads import AgentSystem, ScriptedModel, SQLiteThreadStore, Tool

    async def slow(ctx, args):
        # long enough that the parent's SIGKILL lands mid-run even on a loaded machine
        # (with 20 ms the whole run could finish before the parent got to kill it)
        await asyncio.sleep(0.5 + random.random() * 0.5)
        return "done " + ctx.call_id

    async def main():
        store = SQLiteThreadStore({db!r})
        system = AgentSystem(ScriptedModel(delay_s=0.002), store, [Tool("work", slow)])
        async with system:
            for i in range({n}):
                system.send_user(f"t{{i}}", "go", "u0")
            print("ready", flush=True)
            await system.drain()
            print("finished", flush=True)

    asyncio.run(main())
    """
)


async def test_durable_store_survives_kill_9(tmp_path: Path) -> None:
    db, n = tmp_path / "threads.db", 150
    root = str(Path(__file__).resolve().parents[3])
    code = CHILD.format(root=root, db=str(db), n=n)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    store = SQLiteThreadStore(db)
    deadline = time.monotonic() + 20
    while len(store.agents()) < n // 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    unfinished = [
        i for i in range(n) if (st := _state(store, f"t{i}")) is None or st.completions < 2
    ]
    # killed mid-run: threads had started and some were unfinished (all of them, when the
    # kill lands while every thread waits on its tool, with nothing queued)
    assert len(store.agents()) > 0 and (len(unfinished) > 0 or store.queued() > 0)

    async def slow(ctx: Any, args: dict[str, Any]) -> str:
        return "done " + ctx.call_id

    from agentlab.runtime.threads import Tool

    system = AgentSystem(ScriptedModel(), store, [Tool("work", slow)])
    async with system:
        await system.drain(timeout=60)
    assert store.queued() == 0
    for i in range(n):
        h = system.history(f"t{i}")
        validate_openai_messages(h)
        assert [m["role"] for m in h] == ["user", "assistant", "tool", "assistant"], (i, h)
        assert h[2]["content"] == "done call_0"
