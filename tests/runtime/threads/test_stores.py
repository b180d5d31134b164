"""Thread stores and codec: protocol, atomic commit+ack, partitions, cold compression."""

from __future__ import annotations

import pickle
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentlab.errors import ConfigError
from agentlab.runtime.threads import Delivery, ThreadState
from agentlab.runtime.threads.codec import (
    append_frames,
    compress_history,
    decode_history,
    encode_history,
    history_len,
    is_compressed,
    raw_history,
)
from agentlab.runtime.threads.stores import (
    MemoryThreadStore,
    SQLiteThreadStore,
    ThreadStore,
    commit_frames,
    partition_of,
)
from agentlab.store.agent_store import AgentStore

MSGS = [
    {"role": "user", "content": "line one\nline two"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]},
    {"role": "tool", "tool_call_id": "c", "content": "ünïcode ok"},
]


def test_codec_round_trip_hot_and_cold() -> None:
    blob = encode_history(MSGS[:1])
    blob = append_frames(blob, MSGS[1:])
    assert decode_history(blob) == MSGS
    cold = compress_history(blob * 20)
    assert is_compressed(cold) and len(cold) < len(blob * 20)
    assert decode_history(cold) == MSGS * 20
    assert history_len(cold) == 60
    assert decode_history(append_frames(cold, MSGS[:1]))[-1] == MSGS[0]
    assert decode_history(None) == [] and decode_history(b"") == []


def test_cold_histories_are_raw_deflate_and_older_zlib_ones_still_read() -> None:
    """``compress_history`` writes raw deflate (no adler32 pass); a ``b"z"`` zlib history
    compressed before reads back the same, and neither is compressed twice."""
    blob = encode_history(MSGS * 30)
    cold = compress_history(blob)
    assert cold[:1] == b"d" and zlib.decompress(cold[1:], -15) == blob
    legacy = b"z" + zlib.compress(blob, 3)
    for c in (cold, legacy):
        assert is_compressed(c) and raw_history(c) == blob and compress_history(c) is c
        assert decode_history(c) == MSGS * 30 and history_len(c) == 90
        assert decode_history(append_frames(c, MSGS[:1])) == MSGS * 30 + MSGS[:1]
    assert not is_compressed(blob) and not is_compressed(b"")


def test_records_round_trip() -> None:
    d = Delivery("t1", "tool_result", {"x": [1, 2]}, call_id="c1", final=False, chunk=3)
    assert d.dedup_id == "tr:c1:3"
    assert Delivery.decode(d.encode()) == d
    st = ThreadState("t1", pending={"c": {"name": "w", "arguments": {}}}, seen=["a"])
    assert ThreadState.from_dict(st.to_dict()) == st
    decoded = orjson.loads(orjson.dumps(st.to_dict()))  # keys as a stored state's are
    assert ThreadState.from_dict(decoded) == st
    # as many keys as fields, one unknown and one missing: the unknown ignored, a default
    renamed = {("later_field" if k == "slices" else k): v for k, v in decoded.items()}
    assert ThreadState.from_dict(renamed) == st
    older = {k: v for k, v in decoded.items() if k != "call_counter"}  # a field added later
    assert ThreadState.from_dict(older) == st
    assert st.to_dict()["schema_version"] == 1
    with pytest.raises(ConfigError, match="unknown delivery kind 'nope'"):
        Delivery("t1", "nope", dedup_id="x")
    with pytest.raises(ConfigError, match="needs a dedup_id"):
        Delivery("t1", "user", "hi")


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path) -> ThreadStore:
    if request.param == "memory":
        return MemoryThreadStore(hot_limit=2)
    return SQLiteThreadStore(tmp_path / "t.db")


def test_store_protocol_and_commit(store: ThreadStore) -> None:
    assert isinstance(store, AgentStore) and isinstance(store, ThreadStore)
    s1 = store.enqueue("a", b"one")
    s2 = store.enqueue("b", b"two")
    s3 = store.enqueue("a", b"three")
    assert [r[0] for r in store.claim()] == [s1, s2, s3]
    store.commit("a", {"state": b"{}", "history": encode_history(MSGS)}, ack=[s1])
    assert store.queued() == 2
    assert store.keys("a") == ["history", "state"] and store.agents() == ["a"]
    assert decode_history(store.read("a", "history")) == MSGS
    store.ack([s2, s3])
    assert store.queued() == 0
    store.delete("a")
    assert store.read("a", "state") is None and store.agents() == []


def test_claim_partitions_cover_queue_once(store: ThreadStore) -> None:
    tids = [f"t{i}" for i in range(40)]
    for t in tids:
        store.enqueue(t, t.encode())
    seen: list[str] = []
    for p in range(3):
        rows = store.claim(partition=p, partitions=3)
        assert all(partition_of(t) % 3 == p for _, t, _ in rows)
        seen += [t for _, t, _ in rows]
    assert sorted(seen) == sorted(tids)
    with pytest.raises(ConfigError, match="invalid partition 3 of 3"):
        store.claim(partition=3, partitions=3)


def test_memory_store_compresses_cold_histories() -> None:
    store = MemoryThreadStore(hot_limit=2)
    big = encode_history(MSGS * 50)
    for t in ("a", "b", "c"):
        store.write_many(t, {"history": big})
    # past hot_limit the older half is compressed; the newest stays hot
    assert is_compressed(store.read("a", "history") or b"")
    assert not is_compressed(store.read("c", "history") or b"")
    assert store.compress_cold() >= 1
    assert all(is_compressed(store.read(t, "history") or b"") for t in "abc")
    assert decode_history(store.read("b", "history")) == MSGS * 50
    assert store.stored_bytes() < 3 * len(big)


def test_commit_append_extends_the_held_history_in_place() -> None:
    s = MemoryThreadStore(hot_limit=None)
    one, two = encode_history(MSGS[:1]), encode_history(MSGS[1:])
    s.commit("t", {"state": b"s0", "history": one})
    held = s.read_history("t")
    snapshot = s.read("t", "history")
    s.enqueue("t", b"d")
    # the first append copies once into a growable buffer, later ones extend it in place
    buf = commit_frames(s, "t", b"s1", held, held, two, 1)  # type: ignore[arg-type]
    assert type(buf) is bytearray and s.read_history("t") is buf and s.queued() == 0
    assert commit_frames(s, "t", b"s2", buf, buf, one, 2) is buf
    assert decode_history(s.read("t", "history")) == MSGS + MSGS[:1]
    assert s.read("t", "state") == b"s2"
    # read() is a snapshot: what a reader got earlier does not grow under it
    assert snapshot == one and type(s.read("t", "history")) is bytes
    # a base the store no longer holds writes nothing (commit_frames then replaces)
    assert s.commit_append("t", b"s3", snapshot, snapshot, two) is None  # type: ignore[arg-type]
    assert s.read("t", "state") == b"s2"
    assert commit_frames(s, "t", b"s3", snapshot, snapshot, two, 3) == one + two  # type: ignore[arg-type]
    assert s.read("t", "history") == one + two
    # compression replaces the buffer with the cold bytes (its slack freed)
    buf = commit_frames(s, "t", b"s4", s.read_history("t"), one + two, one, 4)  # type: ignore[arg-type]
    assert type(buf) is bytearray and s.compress_cold() == 1
    cold = s.read_history("t")
    assert type(cold) is bytes and is_compressed(cold)
    assert raw_history(cold) == one + two + one


def test_sqlite_store_reopens_and_pickles(tmp_path) -> None:
    s = SQLiteThreadStore(tmp_path / "t.db")
    s.commit("a", {"state": b"1"})
    s.enqueue("a", b"x")
    s2 = pickle.loads(pickle.dumps(s))
    assert s2.read("a", "state") == b"1" and s2.queued() == 1
    with pytest.raises(ConfigError, match="unknown synchronous mode"):
        SQLiteThreadStore(tmp_path / "u.db", synchronous="sometimes")


async def test_an_agent_system_says_what_it_is_in_a_notebook(tmp_path: Path) -> None:
    """A notebook cell ending in the system showed ``<...AgentSystem object at 0x7f...>``."""
    from agentlab.runtime.threads import AgentSystem, ScriptedModel, Tool

    async def work(ctx: Any, args: dict[str, Any]) -> str:
        return "done"

    system = AgentSystem(ScriptedModel(), tools=[Tool("work", work)], run_dir=tmp_path / "run")
    async with system:
        system.send_user("t0", "hello", dedup_id="u0")
        await system.drain()
    text = repr(system)
    assert text.startswith("AgentSystem(model=ScriptedModel, tools=[work], threads=1, ")
    assert f"completions={system.completions}" in text and str(tmp_path / "run") in text
