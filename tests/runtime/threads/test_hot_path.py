"""The slice's decoded-history reuse (consecutive slices of one thread) is invisible.

A driver hands the decoded state and history of one slice to the next slice of the same
thread, and reuses them only if the store still holds exactly the bytes it committed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlab.runtime.threads import (
    AgentSystem,
    Delivery,
    MemoryThreadStore,
    ScriptedModel,
    SQLiteThreadStore,
    Tool,
    validate_openai_messages,
)
from agentlab.runtime.threads.codec import decode_state, encode_state
from tests.runtime.threads.thread_helpers import CountingTool

TIDS = ["a", "b", "c", "d"]


async def _feed(system: AgentSystem, turns: int = 4) -> None:
    for turn in range(turns):
        for t in TIDS:
            system.send_user(t, f"turn {turn} for {t}", f"u{turn}")
            if turn == 2:  # an event while the tool call is pending: deferred, then a pair
                system.send(Delivery(t, "event", {"n": turn}, f"e{turn}", sender="env"))
        await system.drain()


def _snapshot(system: AgentSystem) -> dict[str, Any]:
    return {t: (system.history(t), system.state(t)) for t in TIDS}


@pytest.mark.parametrize("kind", ["compress-between-slices", "sqlite"])
async def test_reuse_equals_decoding_every_slice(kind: str, tmp_path: Path) -> None:
    # reference: step mode one delivery at a time never carries a decoded form over
    ref_store = MemoryThreadStore()
    ref = AgentSystem(ScriptedModel(), ref_store, [CountingTool().tool])
    for turn in range(4):
        for t in TIDS:
            ref.send_user(t, f"turn {turn} for {t}", f"u{turn}")
            if turn == 2:
                ref.send(Delivery(t, "event", {"n": turn}, f"e{turn}", sender="env"))
        while ref.store.queued():
            await ref.step(limit=1)
    # hot_limit=1 compresses other threads' histories between their slices, so the stored
    # bytes change under the driver; SQLite hands back equal copies, never the same object
    store: Any = (
        MemoryThreadStore(hot_limit=1) if kind != "sqlite" else SQLiteThreadStore(tmp_path / "t.db")
    )
    system = AgentSystem(ScriptedModel(), store, [CountingTool().tool])
    async with system:
        await _feed(system)
    got = _snapshot(system)
    assert got == _snapshot(ref)
    for h, _ in got.values():
        validate_openai_messages(h)


async def test_a_write_between_slices_invalidates_the_reused_state() -> None:
    store = MemoryThreadStore()

    def start(ctx: Any, args: dict[str, Any]) -> str:
        # someone else (another worker, an admin tool) rewrites the thread's state after
        # the commit and before the next slice of the same driver
        st = decode_state(store.read(ctx.thread_id, "state"))
        assert st is not None
        st["children"] = ["external"]
        store.write_many(ctx.thread_id, {"state": encode_state(st)})
        return "done"

    system = AgentSystem(ScriptedModel(), store, [Tool("work", start)])
    async with system:
        system.send_user("a", "hi", "u0")
        await system.drain()
    st = system.state("a")
    assert st is not None and st.children == ["external"] and st.completions == 2


class KeepingModel(ScriptedModel):
    """Keeps every message list it is given (as a logging model might)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.seen: list[tuple[list[dict[str, Any]], int]] = []

    async def stream(self, messages, tools, *, thread_id, turn):  # type: ignore[override]
        self.seen.append((messages, len(messages)))
        async for x in super().stream(messages, tools, thread_id=thread_id, turn=turn):
            yield x


async def test_model_gets_full_history_it_may_keep() -> None:
    model = KeepingModel()
    system = AgentSystem(model, tools=[CountingTool().tool])
    async with system:
        for turn in range(3):
            system.send_user("a", f"turn {turn}", f"u{turn}")
            await system.drain()
    final = system.history("a")
    assert [n for _, n in model.seen] == [1, 3, 5, 7, 9, 11]
    for msgs, n in model.seen:  # later slices did not append to a list the model kept
        assert len(msgs) == n and msgs == final[:n]
