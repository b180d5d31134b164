"""Lineages: a thread's model calls name the messages the simulator saw before (issue 26).

The simulator's request hash, prompt-token count and context scan of a ``KnownPrefix`` must
equal the whole-conversation computation on every call, and read only what was added; the
runtime must vouch only for histories that continue what it committed."""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path
from typing import Any

import pytest

from agentlab.llm import LLMClient, sim_tools
from agentlab.llm.sim_slots import KnownPrefix, prefix_digest, vouched
from agentlab.llm.sim_tools import _Context
from agentlab.llm.tokens import CharsTokenizer
from agentlab.runtime.threads import (
    AgentSystem,
    LLMClientModel,
    MemoryThreadStore,
    ScriptedModel,
    SQLiteThreadStore,
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
    """Call after call on one lineage, each a fresh decode of the history (new strings),
    committed up to the previous call's messages and a new tail of 1-3: the same hash,
    count and context as the whole conversation's."""
    r = random.Random(seed)
    tok = CharsTokenizer(3.9)
    lineage = Lineages(MemoryThreadStore()).fresh()
    convo: list[dict[str, Any]] = [{"role": "system", "content": "You are @alice."}]
    for k in range(40):
        committed = len(convo)
        convo.extend(_message(r, k) for _ in range(r.randrange(1, 4)))
        ref = json.loads(json.dumps(convo))  # as a store that decodes a history gives
        msgs = KnownPrefix(ref, lineage, committed)
        assert vouched(msgs) == (lineage, committed)
        assert prefix_digest(f"s{seed}", "|f", msgs, tok) == _whole_digest(
            f"s{seed}", "|f", convo, tok
        ), k
        ctx = _Context(msgs)
        assert (ctx.me, ctx.ids, ctx.users, ctx.request) == _reference(convo), k


def test_a_model_that_edits_its_list_loses_the_key() -> None:
    """An item before the committed ones replaced in the handed list: no key (the content
    path answers, with the edited conversation's values)."""
    tok = CharsTokenizer(4.0)
    lineage = Lineages(MemoryThreadStore()).fresh()
    ref = [{"role": "user", "content": f"look at p{k}.a.1 @bob"} for k in range(6)]
    msgs = KnownPrefix(ref, lineage, 6)
    prefix_digest("s", "", msgs, tok)
    _Context(msgs)
    msgs[2] = {"role": "user", "content": "look at q9.z.9 @zed"}
    assert vouched(msgs) is None
    assert prefix_digest("s", "", msgs, tok) == _whole_digest("s", "", list(msgs), tok)
    ctx = _Context(msgs)
    assert "q9.z.9" in ctx.ids and "zed" in ctx.users
    assert vouched(list(msgs)) is None and vouched(msgs[:4]) is None  # copies carry no key


def test_a_lineage_call_reads_only_what_was_added(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan reads a bounded number of messages per call however long the history:
    the committed ones since the lineage's last call and the uncommitted tail."""
    scanned: list[str] = []
    real = sim_tools._extend

    def counting(scan: Any, text: str) -> Any:
        scanned.append(text)
        return real(scan, text)

    monkeypatch.setattr(sim_tools, "_extend", counting)
    lineage = Lineages(MemoryThreadStore()).fresh()
    convo = [{"role": "user", "content": f"unique-{lineage} look at p1.a.1"}]
    for k in range(60):
        committed = len(convo)
        convo.append({"role": "user", "content": f"turn {k} @bob"})
        scanned.clear()
        _Context(KnownPrefix(json.loads(json.dumps(convo)), lineage, committed))
        assert len(scanned) <= (committed + 1 if k == 0 else 2), k


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
        assert calls[0][1:] == (0, 0)  # a new thread: nothing stored to vouch for
        lineages = {lin for _, lin, _ in calls[1:]}
        assert len(lineages) == 1 and 0 not in lineages  # one chain across turns
        # the stored messages are vouched for; the delivery's new message is not
        assert all(committed == n - 1 for n, _, committed in calls[1:])
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


async def test_sim_histories_equal_with_and_without_lineages() -> None:
    """The same sim conversations keyed by lineage and by content give the same replies
    (tool calls with context-filled arguments, texts, prompt-token counts)."""

    async def run(keep: bool) -> tuple[dict[str, Any], int]:
        client = LLMClient("sim/instant", seed=11)
        model = LLMClientModel(
            client,
            per_call=lambda m: {"sim_tool_call_p": 1.0 if m[-1]["role"] == "user" else 0.0},
            sim_completion_tokens=40,
        )
        tool = CountingTool()
        tool.tool.parameters = PARAMS
        system = AgentSystem(model, MemoryThreadStore(hot_limit=None), [tool.tool])
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
