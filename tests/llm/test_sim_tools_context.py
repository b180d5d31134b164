"""The simulator's tool-call context (``sim_tools._Context``): incremental, same values.

Issue 26: ``_Context`` ran its regexes over the whole concatenated conversation on every
call. It now scans only the messages added since a cached prefix; these tests hold it to
the old whole-text scan on fixed-seed conversations, call after call.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from agentlab.llm import sim_tools
from agentlab.llm.sim_content import Rng
from agentlab.llm.sim_slots import PrefixSlots
from agentlab.llm.sim_tools import _Context, play_along
from agentlab.llm.tokens import dumps_acyclic


def _reference(messages: list[dict[str, Any]]) -> tuple[Any, list[str], list[str], str]:
    """The whole-text scan ``_Context`` did before issue 26, verbatim."""
    text = "\n".join(
        m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
        for m in messages
    )
    me = sim_tools._SELF.findall(text)
    me = me[0] if me else None
    written = set(sim_tools._WRITTEN.findall(text))
    ids = sim_tools._unique(sim_tools._ID_FIELD.findall(text)) or [
        i for i in sim_tools._unique(sim_tools._ID.findall(text)) if i not in written
    ]
    users = sim_tools._unique(sim_tools._AUTHOR.findall(text) + sim_tools._MENTION.findall(text))
    request = next(
        (m["content"] for m in reversed(messages)
         if m.get("role") == "user" and isinstance(m.get("content"), str)), "",
    )  # fmt: skip
    return me, ids, [u for u in users if u != me], request


def _message(r: random.Random, k: int) -> dict[str, Any]:
    names = ["alice", "bob", "carol", "dan", "eve"]
    kind = r.randrange(7)
    if kind == 0:
        posts = [{"id": f"p{r.randrange(50)}.{r.choice(names)}.{r.randrange(9)}",
                  "author": r.choice(names), "text": f"hi @{r.choice(names)}"}
                 for _ in range(r.randrange(4))]  # fmt: skip
        return {"role": "tool", "tool_call_id": f"c{k}", "content": json.dumps(posts)}
    if kind == 1:
        return {"role": "tool", "content": json.dumps({"post_id": f"p{r.randrange(50)}.x.1"})}
    if kind == 2:
        return {"role": "user", "content": f"turn {k}: look at q{k}.{r.choice(names)}.{k % 5}"}
    if kind == 3:
        return {"role": "assistant", "content": None, "tool_calls": []}
    if kind == 4:
        return {"role": "user", "content": [{"type": "text", "text": f"@{r.choice(names)}"}]}
    if kind == 5:
        return {"role": "assistant", "content": f"ok {r.random():.3f} v1.2 @{r.choice(names)}"}
    return {"role": "user", "content": json.dumps({"from": r.choice(names), "to": "eve"})}


@pytest.mark.parametrize("seed", range(6))
def test_context_equals_the_whole_text_scan_call_after_call(seed: int) -> None:
    r = random.Random(seed)
    sys_msg = {"role": "system", "content": f"You are @{['alice', 'zed'][seed % 2]}. Be kind."}
    convo: list[dict[str, Any]] = [sys_msg] if seed % 3 else []
    for k in range(40):
        convo.extend(_message(r, k) for _ in range(r.randrange(1, 3)))
        # a fresh list of fresh dicts each call, as a store that decodes a history would give
        msgs = json.loads(json.dumps(convo))
        ctx = _Context(msgs)
        assert (ctx.me, ctx.ids, ctx.users, ctx.request) == _reference(msgs), k


def test_context_scans_only_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    scanned: list[str] = []
    real = sim_tools._extend

    def counting(scan: Any, text: str) -> Any:
        scanned.append(text)
        return real(scan, text)

    monkeypatch.setattr(sim_tools, "_extend", counting)
    convo = [{"role": "user", "content": f"unique-{id(scanned)} look at p1.a.1"}]
    _Context(convo)
    assert len(scanned) == 1
    for k in range(2, 30):
        convo.append({"role": "assistant", "content": f"reply {k} to @bob"})
        scanned.clear()
        _Context(list(convo))
        assert len(scanned) == 1, k  # the new message only, not the history


def _filled() -> int:
    return len(sim_tools._scans)


def test_scan_cache_is_bounded() -> None:
    slots = PrefixSlots(64)
    for k in range(3 * slots.size):
        slots.put(hash(f"bounded {k}"), str(k))
    assert len(slots) <= slots.size == 64
    assert slots.get(hash(f"bounded {3 * slots.size - 1}")) == str(3 * slots.size - 1)


def test_many_interleaved_conversations_keep_their_prefixes() -> None:
    """Agents taking turns round-robin (as a society or suspended_agents does) all find
    their conversation's prefix: thousands of live conversations fit the table."""
    scanned: list[int] = []
    real = sim_tools._extend
    convos = [[{"role": "user", "content": f"agent {a} {id(scanned)}"}] for a in range(3000)]
    try:
        sim_tools._extend = lambda scan, text: scanned.append(1) or real(scan, text)  # type: ignore[assignment]
        for turn in range(3):
            for c in convos:
                c.append({"role": "assistant", "content": f"turn {turn}"})
                _Context(list(c))
    finally:
        sim_tools._extend = real  # type: ignore[assignment]
    # the first call of each scans its 2 messages; later ones the new message only
    assert len(scanned) <= 3000 * 2 + 3000 * 2 * 1.02


def test_scan_cache_entries_live_outside_pymalloc_arenas() -> None:
    """Each cached scan is one string above pymalloc's 512-byte limit (issue 26: small
    entry objects, allocated among a call's transient ones, each pinned a 1 MiB arena:
    RSS per idle suspended agent doubled)."""
    convo = [{"role": "system", "content": "You are @zed."}]
    for k in range(12):
        convo.append({"role": "user", "content": f'{{"author": "u{k}", "id": "p{k}.x.1"}}'})
        _Context(list(convo))
    key = hash(tuple(m["content"] for m in convo))
    payload = sim_tools._scans.get(key)
    assert payload is not None
    assert min(sim_tools._scans.slot_sizes()) > 512
    scan = sim_tools._decode(payload)
    assert scan.me == "zed" and scan.authors == tuple(f"u{k}" for k in range(12))
    assert scan.id_fields == tuple(f"p{k}.x.1" for k in range(12))


def test_texts_holding_the_separators_are_scanned_but_not_cached() -> None:
    convo = [{"role": "user", "content": "odd \x1f@ann \x1e text p9.q.1"}]
    first = _Context(list(convo))
    assert first.users == ["ann"] and first.ids == ["p9.q.1"]
    again = _Context(list(convo))  # scanned afresh: same values
    assert (again.users, again.ids) == (first.users, first.ids)


def test_play_along_tool_arguments_unchanged_on_fixed_seeds() -> None:
    """Same tool calls from ``play_along`` as with the whole-text context."""
    tools = [{"type": "function", "function": {
        "name": "like", "parameters": {"type": "object", "properties": {
            "post_id": {"type": "string"}, "user": {"type": "string"}},
            "required": ["post_id"]}}}]  # fmt: skip
    r = random.Random(7)
    convo: list[dict[str, Any]] = [{"role": "system", "content": "You are @alice."}]
    got = []
    for k in range(25):
        convo.append(_message(r, k))
        calls = [("c1", "like", "{}")]
        _, out, _ = play_along(list(convo), tools, {}, Rng(k), "", calls, 1, False)
        got.append(out)
    # the same, with the whole-text scan substituted for the incremental one
    ref_ctx = sim_tools._Context

    class Ref(ref_ctx):  # type: ignore[valid-type, misc]
        def _load(self) -> None:
            messages, self._messages = self._messages, None
            if messages is not None:
                self._me, self._ids, self._users, request = _reference(messages)
                assert request == self.request

    sim_tools._Context = Ref  # type: ignore[misc]
    try:
        want = []
        for k in range(25):
            calls = [("c1", "like", "{}")]
            _, out, _ = play_along(convo[: k + 2], tools, {}, Rng(k), "", calls, 1, False)
            want.append(out)
    finally:
        sim_tools._Context = ref_ctx  # type: ignore[misc]
    assert got == want


def test_a_tool_without_id_or_user_arguments_scans_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The context is scanned only when an argument takes a value from it: a search tool's
    ``query`` is generated text, so its calls run no regex over the conversation, and the
    calls are the same as with a scan (the scan consumes no draws)."""
    search = [{"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}},
        "required": ["query"]}}}]  # fmt: skip
    like = [{"type": "function", "function": {"name": "like", "parameters": {
        "type": "object", "properties": {"post_id": {"type": "string"}},
        "required": ["post_id"]}}}]  # fmt: skip
    convo = [{"role": "user", "content": f"look at p1.a.1 @bob {id(search)}"}]
    scanned: list[str] = []
    real = sim_tools._extend
    monkeypatch.setattr(sim_tools, "_extend", lambda s, t: scanned.append(t) or real(s, t))
    calls = [("c1", "search", "{}")]
    lazy = play_along(convo, search, {}, Rng(3), "", calls, 1, False)
    assert scanned == []
    ctx = _Context(convo)  # eager: scans now
    assert scanned and ctx.ids == ["p1.a.1"] and ctx.users == ["bob"]
    monkeypatch.setattr(sim_tools, "_Context", lambda m, lazy: _Context(m))
    assert play_along(convo, search, {}, Rng(3), "", calls, 1, False) == lazy
    monkeypatch.setattr(sim_tools, "_Context", _Context)
    scanned.clear()
    calls = [("c1", "like", "{}")]
    more = [*convo, {"role": "user", "content": "and more"}]
    _, out, _ = play_along(more, like, {}, Rng(3), "", calls, 1, False)
    assert scanned and json.loads(out[0][2]) == {"post_id": "p1.a.1"}


def test_a_growing_conversation_keeps_one_cache_entry() -> None:
    convo: list[dict[str, Any]] = [{"role": "user", "content": "one entry please"}]
    convo[0]["content"] += str(id(convo))
    before = _filled()
    for k in range(20):
        convo.append({"role": "assistant", "content": f"step {k}"})
        _Context(list(convo))
    assert _filled() <= before + 1


@pytest.mark.parametrize("seed", range(4))
def test_prefix_digest_equals_the_whole_join_call_after_call(seed: int) -> None:
    """``_digest``'s incremental request hash and prompt-token count equal the CRC of the
    whole join and ``CharsTokenizer.prompt_tokens`` of the whole conversation on every
    call (tool calls, content parts, two extras taking turns as tools come and go)."""
    import zlib

    from agentlab.llm.sim_slots import prefix_digest
    from agentlab.llm.tokens import CharsTokenizer

    tok = CharsTokenizer(3.7)
    r = random.Random(seed)
    convo: list[dict[str, Any]] = []
    for k in range(40):
        m = _message(r, k)
        if m["role"] == "assistant" and "tool_calls" in m:
            m["tool_calls"] = [{"id": f"c{k}", "type": "function", "function": {
                "name": "f", "arguments": json.dumps({"q": "x" * r.randrange(40)})}}]  # fmt: skip
        convo.append(m)
        extra = "|f" if k % 2 else ""
        parts = [f"s{seed}", extra]
        for x in convo:
            c = x.get("content")
            parts += [x.get("role", ""), c if isinstance(c, str) else repr(c)]
        want = zlib.crc32("\x1f".join(parts).encode("utf-8", "surrogatepass"))
        assert prefix_digest(f"s{seed}", extra, list(convo), tok) == (
            want,
            tok.prompt_tokens(convo),
        ), k
    # same messages, different tool-call arguments: a different count, not the stored one
    other = [dict(m) for m in convo]
    for m in other:
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {"function": {"name": "f", "arguments": '{"q": "' + "y" * 90 + '"}'}}
            ]
    assert prefix_digest(f"s{seed}", "", other, tok)[1] == tok.prompt_tokens(other)


def test_a_conversation_that_jumps_past_the_lookback_is_scanned_whole() -> None:
    from agentlab.llm.sim_slots import LOOKBACK

    convo = [{"role": "system", "content": "You are @kim."}, {"role": "user", "content": "@lee"}]
    _Context(list(convo))
    convo += [{"role": "user", "content": f"p{k}.z.1 @m{k}"} for k in range(LOOKBACK + 3)]
    got = _Context(list(convo))
    me, ids, users, request = _reference(convo)
    assert (got.me, got.ids, got.users, got.request) == (me, ids, users, request)


def test_count_slots_hold_counts_without_objects() -> None:
    from agentlab.llm.sim_slots import CountSlots

    slots = CountSlots(64)
    assert slots.get(hash("a")) is None
    slots.put(hash("a"), (7,))
    slots.put(hash("ab"), (9,), replaces=hash("a"))  # the conversation moved on
    assert slots.get(hash("a")) is None and slots.get(hash("ab")) == (9,)
    for k in range(500):  # bounded: old entries give way
        slots.put(hash(f"c{k}"), (k,))
    assert slots.get(hash("c499")) == (499,)
    assert len(slots._keys) == len(slots._vals) == 64  # one int64 each, no dict or tuple
    pairs = CountSlots(64, width=2)
    pairs.put(5, (2**32 - 1, 0))
    assert pairs.get(5) == (2**32 - 1, 0) and len(pairs._vals) == 128


def test_prefix_digest_of_messages_that_are_not_dicts_equals_the_whole_join() -> None:
    """Messages that are mappings but not dicts (and content parts) take the row-keyed
    path of ``prefix_digest``; the hash and count are the same as for plain dicts."""
    from collections import UserDict

    from agentlab.llm.sim_slots import prefix_digest
    from agentlab.llm.tokens import CharsTokenizer

    tok = CharsTokenizer(4.0)
    convo: list[dict[str, Any]] = [
        {"role": "system", "content": "You are @kim."},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]  # fmt: skip
    for k in range(1, len(convo) + 1):
        plain = prefix_digest("s", "|f", convo[:k], tok)
        wrapped = prefix_digest("s", "|f", [UserDict(m) for m in convo[:k]], tok)  # type: ignore[misc]
        assert plain == wrapped
        assert plain[1] == tok.prompt_tokens(convo[:k])


@pytest.mark.parametrize(
    "value",
    [
        {"query": "plain"},
        {"t": "caf\u00e9 \U0001f600", "n": -3, "f": 0.1, "big": 2**70, "inf": float("inf")},
        [{"tool": "like", "arguments": {"post_id": "p1.a.1", "tags": ["x", None, False]}}],
        {},
    ],
)
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_dumps_acyclic_writes_what_json_dumps_writes(value: Any, ensure_ascii: bool) -> None:
    got = dumps_acyclic(value, ensure_ascii=ensure_ascii)
    assert got == json.dumps(value, ensure_ascii=ensure_ascii)
