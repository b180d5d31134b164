"""The society hook and the public surface of agentlab.runtime.threads."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import agentlab.runtime.threads as threads
from agentlab.errors import UnknownNameError
from agentlab.runtime.threads import LongToolHook, SQLiteThreadStore, Tool


def test_every_exported_name_exists() -> None:
    for name in threads.__all__:
        assert getattr(threads, name) is not None


async def test_long_tool_result_collected_in_a_later_tick(tmp_path: Path) -> None:
    async def build(ctx, args):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.01)
        return f"built {args['target']}"

    store = SQLiteThreadStore(tmp_path / "t.db")
    hook = LongToolHook(store, [Tool("build", build)])
    call = hook.start("agent-1", "build", {"target": "x"}, dedup_id="agent-1:tick3")
    assert hook.collect("agent-1") == []  # tick 3: nothing yet, nothing held
    await hook.wait_idle()
    # tick 4, possibly another process: the result is in the durable queue
    later = LongToolHook(SQLiteThreadStore(tmp_path / "t.db"), [])
    got = later.collect("agent-1")
    assert [(d.call_id, d.payload, d.final) for d in got] == [(call, "built x", True)]
    assert later.collect("agent-1") == []  # delivered once
    with pytest.raises(UnknownNameError, match="unknown tool 'nope'"):
        hook.start("agent-1", "nope", {}, dedup_id="z")
