"""A thread's decoded form kept between its turns (``hot.HotCache``) and the GC set up for a
busy period of local mode: neither changes what the threads store."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

import agentlab.runtime.threads.system as system_module
from agentlab.runtime.gc_tuning import GC_GEN1_THRESHOLD
from agentlab.runtime.threads import (
    AgentSystem,
    MemoryThreadStore,
    ScriptedModel,
    SQLiteThreadStore,
    Tool,
)
from agentlab.runtime.threads.codec import decode_history
from agentlab.runtime.threads.hot import DEFAULT_CACHE_BYTES, Hot, HotCache
from agentlab.runtime.threads.records import ThreadState
from tests.runtime.threads.thread_helpers import CountingTool

TIDS = ["a", "b", "c"]


async def _turns(system: AgentSystem, turns: int, start: int = 0) -> None:
    for turn in range(start, start + turns):
        for t in TIDS:
            system.send_user(t, f"turn {turn} for {t}", f"u{turn}")
        await system.drain()


def _snapshot(system: AgentSystem) -> dict[str, Any]:
    return {t: (system.history(t), system.state(t)) for t in TIDS}


async def _reference(turns: int) -> dict[str, Any]:
    ref = AgentSystem(ScriptedModel(), MemoryThreadStore(), [CountingTool().tool])
    for turn in range(turns):
        for t in TIDS:
            ref.send_user(t, f"turn {turn} for {t}", f"u{turn}")
        while ref.store.queued():  # step mode, one delivery at a time: decodes every slice
            await ref.step(limit=1)
    return _snapshot(ref)


class _ListModel(ScriptedModel):
    """A model of its own type: handed decoded lists (an ``AgentSystem`` hands a
    ``ScriptedModel`` or ``LLMClientModel`` its history still encoded)."""


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    decoded: list[int] = []

    def counting(blob: bytes | None) -> list[dict[str, Any]]:
        out = decode_history(blob)
        decoded.append(len(out))
        return out

    monkeypatch.setattr(system_module, "decode_history", counting)
    return decoded


@pytest.mark.parametrize("limit", [0, 2, 1024])
async def test_later_turns_start_from_the_cached_decoding(
    limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded = _count_decodes(monkeypatch)
    system = AgentSystem(_ListModel(), MemoryThreadStore(), [CountingTool().tool],
                         decoded_cache=limit)  # fmt: skip
    async with system:
        await _turns(system, 4)
        assert len(system._decoded) == min(limit, len(TIDS))
    # a thread's first turn has no history to decode; each later turn decodes it again
    # unless the thread's entry is cached (2 of 3: the cache keeps a and b and refuses c,
    # where dropping the least recently used would make every round-robin turn miss)
    misses = {0: 9, 2: 3, 1024: 0}[limit]
    assert len(decoded) == misses and all(decoded)
    assert _snapshot(system) == await _reference(4)


async def test_a_scripted_model_is_handed_its_history_encoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No turn decodes the history (a chain's first slice would, had it one): the model
    reads the last message of an ``EncodedHistory``; the same histories and states."""
    decoded = _count_decodes(monkeypatch)
    system = AgentSystem(ScriptedModel(), MemoryThreadStore(), [CountingTool().tool])
    async with system:
        await _turns(system, 4)
    assert decoded == []
    assert _snapshot(system) == await _reference(4)


def _hot(size: int) -> Hot:
    return Hot(None, None, b"x" * size, ThreadState("t"), [])


def test_the_cache_keeps_what_fits_its_bounds_and_refuses_the_rest() -> None:
    cache = HotCache(None, max_bytes=100)
    cache.keep("a", _hot(40))
    cache.keep("b", _hot(50))
    cache.keep("c", _hot(20))  # does not fit: refused, a and b stay
    assert sorted(cache._entries) == ["a", "b"] and cache.nbytes == 90
    cache.keep("a", _hot(60))  # a's entry grows past the bound: dropped, not kept stale
    assert sorted(cache._entries) == ["b"] and cache.nbytes == 50
    assert cache.take("b") is not None and cache.nbytes == 0 and cache.take("b") is None
    cache.keep("c", _hot(20))
    cache.keep("d", Hot(None, None, b"", ThreadState("d"), None))  # never decoded: not kept
    assert list(cache._entries) == ["c"]
    counted = HotCache(2, max_bytes=1 << 20)
    for t in "abc":
        counted.keep(t, _hot(1))
    assert sorted(counted._entries) == ["a", "b"]
    counted.forget(["a", "z"])
    assert list(counted._entries) == ["b"] and counted.nbytes == 1
    assert not HotCache(0, MemoryThreadStore()).enabled
    assert not HotCache(None, MemoryThreadStore(), max_bytes=0).enabled


def test_an_entry_not_kept_again_for_stale_s_gives_way_to_a_newcomer() -> None:
    cache = HotCache(2, max_bytes=1 << 20, stale_s=10.0)
    clock = [0.0]
    cache.now = lambda: clock[0]
    cache.keep("a", _hot(1))
    clock[0] = 5.0
    cache.keep("b", _hot(1))
    clock[0] = 10.0
    cache.keep("c", _hot(1))  # a was kept 10 s ago: not stale yet, c refused
    assert list(cache._entries) == ["a", "b"]
    clock[0] = 10.5
    cache.keep("c", _hot(1))  # a is stale now: it makes room, b (5.5 s) stays
    assert list(cache._entries) == ["b", "c"] and cache.nbytes == 2
    cache.keep("b", _hot(3))  # kept again: moves to the end, its size updated
    assert list(cache._entries) == ["c", "b"] and cache.nbytes == 4


def test_the_cache_is_off_unless_asked_for_and_a_thread_count_gets_the_byte_bound(
    tmp_path: Path,
) -> None:
    assert not HotCache(None, MemoryThreadStore()).enabled
    assert not AgentSystem(ScriptedModel(), MemoryThreadStore(), [])._decoded.enabled
    assert HotCache(8, MemoryThreadStore()).max_bytes == DEFAULT_CACHE_BYTES
    sqlite = SQLiteThreadStore(tmp_path / "t.db")
    assert not HotCache(None, sqlite).enabled
    assert HotCache(None, sqlite, max_bytes=1 << 20).enabled
    assert HotCache(8, sqlite).max_bytes == DEFAULT_CACHE_BYTES
    sqlite.close()


async def test_a_compressed_history_drops_its_cached_decoding() -> None:
    store = MemoryThreadStore(hot_limit=None)
    system = AgentSystem(ScriptedModel(), store, [CountingTool().tool], decoded_cache=8)
    async with system:
        await _turns(system, 2)
        assert len(system._decoded) == len(TIDS)
        assert store.compress_cold(keep_hot=1) == 2
        assert len(system._decoded) == 1  # the two cold threads hold only compressed bytes
        await _turns(system, 2, start=2)
    assert not system._decoded  # close() drops the rest
    assert _snapshot(system) == await _reference(4)


class FailingOnce(ScriptedModel):
    """Raises in thread ``a``'s completion of one turn, once (after the delivery has been
    applied to the decoded state: the user message's dedup id is already marked seen)."""

    def __init__(self, fail_turn: int) -> None:
        super().__init__()
        self.fail_turn, self.failed = fail_turn, False

    async def stream(self, messages, tools, *, thread_id, turn):  # type: ignore[override]
        if thread_id == "a" and turn == self.fail_turn and not self.failed:
            self.failed = True
            raise RuntimeError("model down")
        async for x in super().stream(messages, tools, thread_id=thread_id, turn=turn):
            yield x


async def test_a_failed_slice_leaves_no_cached_decoding_behind() -> None:
    system = AgentSystem(
        FailingOnce(fail_turn=2), MemoryThreadStore(), [CountingTool().tool], decoded_cache=8
    )
    async with system:
        await _turns(system, 1)
        system.send_user("a", "turn 1 for a", "u1")
        with pytest.raises(Exception, match="model down"):
            await system.drain()
        assert "a" not in system._decoded._entries
        system.errors.clear()
        await system.recover()  # the failed delivery is still queued: run it again
        await system.drain()
        for t in TIDS[1:]:
            system.send_user(t, f"turn 1 for {t}", "u1")
        await system.drain()
        await _turns(system, 2, start=2)
    assert _snapshot(system) == await _reference(4)


async def test_local_mode_tunes_the_gc_while_threads_run_and_puts_it_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AGENTLAB_GC_FREEZE", raising=False)
    gc.unfreeze()  # another test's litellm import may have frozen its heap
    before = gc.get_threshold()
    seen: list[tuple[tuple[int, int, int], int]] = []

    def probe(ctx: Any, args: dict[str, Any]) -> str:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        return "ok"

    system = AgentSystem(ScriptedModel(), tools=[Tool("work", probe)])
    async with system:
        for turn in range(2):
            await _turns(system, 1, start=turn)
            # idle between bursts: the GC as the process had it
            assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    assert len(seen) == 2 * len(TIDS)
    for thresholds, frozen in seen:
        assert thresholds == (before[0], max(before[1], GC_GEN1_THRESHOLD), before[2])
        assert frozen > 0
    system = AgentSystem(ScriptedModel(), tools=[Tool("work", probe)])
    async with system:  # closed before its driver ever ran: the busy period ends anyway
        system.send_user("a", "hi", "u0")
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
