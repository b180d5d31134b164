"""Lineages: a thread's model calls name the messages the simulator saw before (issue 26).

The simulator's request hash, prompt-token count and context scan of a ``KnownPrefix`` must
equal the whole-conversation computation on every call, and read only what was added; the
runtime must vouch only for histories that continue what it committed."""

from __future__ import annotations

import copy
import json
import pickle
import random
import zlib
from pathlib import Path
from typing import Any

import pytest

from agentlab.llm import LLMClient, sim_tools
from agentlab.llm.sim_backend import SimServer
from agentlab.llm.sim_slots import KnownPrefix, prefix_digest, vouched
from agentlab.llm.sim_tools import _Context
from agentlab.llm.tokens import CharsTokenizer
from agentlab.runtime.threads import (
    AgentSystem,
    LLMClientModel,
    MemoryThreadStore,
    ScriptedModel,
    SQLiteThreadStore,
    Tool,
)
from agentlab.runtime.threads.lineage import Lineages
from tests.llm.test_sim_tools_context import _message, _reference
from tests.runtime.threads.thread_helpers import CountingTool

PARAMS = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


def _whole_digest(seed: str, extra: str, convo: list[dict[str, Any]], tok: Any) -> tuple[int, int]:
    parts = [seed, extra]
    for m in convo:
        c = m.get("content")
        parts += [m.get("role", ""), c if isinstance(c, str) else repr(c)]
    return zlib.crc32("\x1f".join(parts).encode("utf-8", "surrogatepass")), tok.prompt_tokens(convo)


@pytest.mark.parametrize("seed", range(4))
def test_known_prefix_digest_and_context_equal_the_whole_conversation(seed: int) -> None:
    """Call after call on one lineage, each a fresh decode of the history (new strings)
    with 1-3 new messages, some calls with a message the model appended itself (not
    vouched for): the same hash, count and context as the whole conversation's."""
    r = random.Random(seed)
    tok = CharsTokenizer(3.9)
    lineage = Lineages(MemoryThreadStore()).fresh()
    convo: list[dict[str, Any]] = [{"role": "system", "content": "You are @alice."}]
    for k in range(40):
        convo.extend(_message(r, k) for _ in range(r.randrange(1, 4)))
        msgs = KnownPrefix(json.loads(json.dumps(convo)), lineage)  # as a decoded history
        assert vouched(msgs) == (lineage, len(convo))
        whole = convo
        if k % 3 == 2:  # a model's own addition (e.g. a reminder), after the vouched ones
            msgs.append({"role": "user", "content": f"mind p{k}.b.2 @zed"})
            whole = [*convo, msgs[-1]]
        assert prefix_digest(f"s{seed}", "|f", msgs, tok) == _whole_digest(
            f"s{seed}", "|f", whole, tok
        ), k
        ctx = _Context(msgs)
        assert (ctx.me, ctx.ids, ctx.users, ctx.request) == _reference(whole), k


def test_a_model_that_edits_its_list_loses_the_key() -> None:
    """An item replaced in the handed list: no key (the content path answers, with the
    edited conversation's values)."""
    tok = CharsTokenizer(4.0)
    lineage = Lineages(MemoryThreadStore()).fresh()
    ref = [{"role": "user", "content": f"look at p{k}.a.1 @bob"} for k in range(6)]
    msgs = KnownPrefix(ref, lineage)
    prefix_digest("s", "", msgs, tok)
    _Context(msgs)
    msgs[2] = {"role": "user", "content": "look at q9.z.9 @zed"}
    assert vouched(msgs) is None
    assert prefix_digest("s", "", msgs, tok) == _whole_digest("s", "", list(msgs), tok)
    ctx = _Context(msgs)
    assert "q9.z.9" in ctx.ids and "zed" in ctx.users
    assert vouched(list(msgs)) is None and vouched(msgs[:4]) is None  # copies carry no key
    # nor does a pickled one (lineage numbers are per process) or a copy.copy
    for copied in (pickle.loads(pickle.dumps(msgs)), copy.copy(msgs)):
        assert type(copied) is list and copied == list(msgs)


def test_a_lineage_call_reads_only_what_was_added(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan reads each new message once however long the history."""
    scanned: list[str] = []
    real = sim_tools._extend

    def counting(scan: Any, text: str) -> Any:
        scanned.append(text)
        return real(scan, text)

    monkeypatch.setattr(sim_tools, "_extend", counting)
    lineage = Lineages(MemoryThreadStore()).fresh()
    convo = [{"role": "user", "content": f"unique-{lineage} look at p1.a.1"}]
    _Context(KnownPrefix(convo, lineage))
    for k in range(60):
        convo.append({"role": "user", "content": f"turn {k} @bob"})
        scanned.clear()
        _Context(KnownPrefix(json.loads(json.dumps(convo)), lineage))
        assert scanned == [f"turn {k} @bob"], k


def test_a_chain_goes_on_only_after_a_commit_of_the_object_handed_back(tmp_path: Path) -> None:
    chains = Lineages(MemoryThreadStore())
    msgs = [{"role": "user", "content": "hi"}]
    first = chains.of("a", None)
    assert isinstance(chains.hand("a", msgs, first), KnownPrefix)
    state = b'{"slices": 1}'
    chains.committed("a", first, state, b"", 0)
    assert chains.of("a", state) == first  # the store holds what this system committed
    assert chains.continued("a", first) and not chains.continued("a", first + 1)
    # a state whose message count is not the history's starts no chain (an EncodedHistory
    # would take its count)
    other = chains.of("b", None)
    chains.committed("b", other, state, b'{"role": "user"}\n', 2)
    assert chains.of("b", state) != other and not chains.continued("b", other)
    assert chains.of("a", bytes(bytearray(state))) != first  # an equal copy: not proven
    chains.hand("a", msgs, first)  # handed, then the slice failed: no commit
    assert chains.of("a", state) not in (first, 0)
    sq = SQLiteThreadStore(tmp_path / "t.db")
    copies = Lineages(sq)  # returns copies: never vouched for
    assert copies.of("a", state) == 0 and type(copies.hand("a", msgs, 0)) is list
    sq.close()


def test_chains_stay_bounded_and_a_dropped_thread_starts_a_new_lineage() -> None:
    chains = Lineages(MemoryThreadStore(), limit=4)
    states = {t: f"{{{t!r}}}".encode() for t in "abcde"}
    numbers = {t: chains.of(t, None) for t in states}
    for t, st in states.items():
        chains.hand(t, [{"role": "user", "content": t}], numbers[t])
        chains.committed(t, numbers[t], st, b"", 0)
    # past 4 threads the older half (a, b) went, in one pass; the rest go on
    assert chains.of("a", states["a"]) != numbers["a"]
    assert all(chains.of(t, states[t]) == numbers[t] for t in "cde")


class _Spy(ScriptedModel):
    """A scripted model that notes the list type and lineage of every call."""

    def __init__(self) -> None:
        super().__init__(tool="work", chunks=2, chunk_chars=10)
        self.seen: list[tuple[str, int, int, int]] = []

    def stream(self, messages: list[dict[str, Any]], tools: Any, **kw: Any) -> Any:
        v = vouched(messages)
        self.seen.append((kw["thread_id"], len(messages), *(v or (0, 0))))
        return super().stream(messages, tools, **kw)


async def _turns(system: AgentSystem, tids: list[str], turns: int, start: int = 0) -> None:
    async with system:
        for t in range(start, start + turns):
            for tid in tids:
                system.send_user(tid, f"turn {t}: look into {t}", f"u{t}")
            await system.drain()


async def test_threads_hand_the_model_their_lineage(tmp_path: Path) -> None:
    tool = CountingTool()
    spy = _Spy()
    store = MemoryThreadStore(hot_limit=None)
    await _turns(AgentSystem(spy, store, [tool.tool], agent_tools=False), ["a", "b"], 3)
    by_thread: dict[str, list[tuple[int, int, int]]] = {"a": [], "b": []}
    for tid, n, lineage, committed in spy.seen:
        by_thread[tid].append((n, lineage, committed))
    for calls in by_thread.values():
        lineages = {lin for _, lin, _ in calls}
        assert len(lineages) == 1 and 0 not in lineages  # one chain across turns
        assert all(committed == n for n, _, committed in calls)  # every handed message
    assert by_thread["a"][1][1] != by_thread["b"][1][1]
    # another system's commits break the chain: the next system starts a new lineage
    spy2 = _Spy()
    await _turns(AgentSystem(spy2, store, [tool.tool], agent_tools=False), ["a"], 1, start=3)
    new = {s[2] for s in spy2.seen}
    assert len(new) == 1 and not new & {0, by_thread["a"][1][1]}
    # a store that returns copies: never vouched for
    spy3 = _Spy()
    sq = SQLiteThreadStore(tmp_path / "t.db")
    await _turns(AgentSystem(spy3, sq, [tool.tool], agent_tools=False), ["a"], 3)
    sq.close()
    assert all(s[2] == 0 for s in spy3.seen)


async def test_compaction_starts_a_new_lineage() -> None:
    tool = CountingTool()
    spy = _Spy()
    system = AgentSystem(spy, None, [tool.tool], agent_tools=False)
    system.token_budget = 60  # compacts every few turns
    await _turns(system, ["a"], 8)
    lineages = [lin for _, _, lin, _ in spy.seen if lin]
    assert system.state("a").compactions >= 1  # type: ignore[union-attr]
    assert len(set(lineages)) >= 2


def _sim_parts(seed: int) -> tuple[LLMClient, LLMClientModel, Tool]:
    """A ``sim/instant`` model that calls the tool after user text, and that tool."""
    client = LLMClient("sim/instant", seed=seed)
    model = LLMClientModel(
        client,
        per_call=lambda m: {"sim_tool_call_p": 1.0 if m[-1]["role"] == "user" else 0.0},
        sim_completion_tokens=40,
    )
    tool = CountingTool()
    tool.tool.parameters = PARAMS
    return client, model, tool.tool


async def test_sim_histories_equal_with_and_without_lineages() -> None:
    """The same sim conversations keyed by lineage and by content give the same replies
    (tool calls with context-filled arguments, texts, prompt-token counts)."""

    async def run(keep: bool) -> tuple[dict[str, Any], int]:
        client, model, tool = _sim_parts(11)
        system = AgentSystem(model, MemoryThreadStore(hot_limit=None), [tool])
        if not keep:
            system._lineages.limit = 0
        tokens0 = client.usage.prompt_tokens
        await _turns(system, ["x", "y", "z"], 6)
        return {t: system.history(t) for t in system.threads()}, client.usage.prompt_tokens - (
            tokens0
        )

    keyed = await run(True)
    plain = await run(False)
    assert keyed == plain
    # the runtime tools are offered too: children spawned, events received, reports
    assert len(keyed[0]) > 3 and all(len(keyed[0][t]) >= 20 for t in ("x", "y", "z"))


async def test_an_llm_model_is_handed_its_history_still_encoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a thread's first call the simulator gets an ``EncodedHistory`` (the runtime
    decodes nothing); replies, histories and token counts equal those of the decoded lists
    the bounded cache hands (``KnownPrefix``)."""
    seen: list[str] = []
    plan = SimServer.plan

    def spy(self: SimServer, messages: Any, **kw: Any) -> Any:
        seen.append(type(messages).__name__)
        return plan(self, messages, **kw)

    monkeypatch.setattr(SimServer, "plan", spy)

    async def run(**kw: Any) -> tuple[dict[str, Any], int]:
        client, model, tool = _sim_parts(5)
        store = MemoryThreadStore(hot_limit=None)
        system = AgentSystem(model, store, [tool], agent_tools=False, **kw)
        tokens0 = client.usage.prompt_tokens
        await _turns(system, ["x", "y"], 5)
        store.compress_cold()  # a cold history: read back from its deflated bytes
        await _turns(system, ["x", "y"], 2, start=5)
        histories = {t: system.history(t) for t in system.threads()}
        return histories, client.usage.prompt_tokens - tokens0

    encoded = await run()
    # all but the two calls of each thread's first turn (decoded at the chain's start)
    assert seen.count("EncodedHistory") == len(seen) - 4
    seen.clear()
    # the cache's decoded lists until compress_cold drops them
    assert encoded == await run(decoded_cache=100) and set(seen[:20]) == {"KnownPrefix"}


def test_count_slots_put_at_the_slot_found_equals_a_put_that_searches() -> None:
    """``prefix_digest`` finds a lineage's slot once (``get_at``) and writes its next values
    there (``put(..., at=)``): the table ends as a put that searches again would leave it,
    also when another key took that slot in between (one bucket of 4 ways, full)."""
    from agentlab.llm.sim_slots import CountSlots

    def run(use_at: bool) -> tuple[list[int], list[int]]:
        slots = CountSlots(4, width=2)
        for key in (1, 2, 3, 4):
            slots.put(key, (key, 0))
        at, got = slots.get_at(3)
        assert got == (3, 0) and at >= 0
        slots.put(3, (3 << 32 | 9, 5), at=at if use_at else -1)  # its own slot
        at, got = slots.get_at(1)
        slots.put(5, (5, 0))  # the bucket is full: replaces a slot, maybe key 1's
        slots.put(1, (1 << 32 | 7, 2), at=at if use_at else -1)
        assert slots.get(1) == (1 << 32 | 7, 2) and slots.get(3) == (3 << 32 | 9, 5)
        assert slots.get_at(6) == (-1, None)
        return list(slots._keys), list(slots._vals)

    assert run(use_at=True) == run(use_at=False)
