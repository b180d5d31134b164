"""The simulator's shortcuts on the realistic path (issue 22) equal what they replace.

Each shortcut skips work the longer form did (a regex over the whole text, a list of every
word, stepping the generator one call at a time, rendering the prompt twice); these tests
hold each to that longer form on fixed-seed inputs, including the awkward characters
(non-ASCII letters and digits, Unicode spaces, separators) where the two could part.
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from agentlab.llm import sim_content, sim_tools
from agentlab.llm.sim_content import Rng
from agentlab.llm.tokens import get_tokenizer

_PIECES = [
    "post", "read", "feed", "like", "follow", "un", "a", "z", "LIKE", "Read", "_", "-", ".",
    "..", "@", " ", "  ", "\n", "\t", "\u00a0", "\u2003", "\x1f", "\x85", ",", '"', "'",
    "1", "42", "\u0663", "\u00b2", "\u00e9", "\u0130", "\u00dc", "llm-00042", "2.llm-7.0",
    '{"id": "', '"}', "x.y", "v1.2", "(", ")", ";",
]  # fmt: skip


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 14))) for _ in range(n)]


def test_ids_equal_the_regex_over_the_whole_text() -> None:
    feed = (
        'Posts: [{"id": "3.llm-00012.1", "author": "llm-00012"}] see 2.llm-00004.0, '
        "v2.1 and a.b. Ends. 1.5.x @llm-7.2 x1.y\u00a02.z \u0663.a"
    )
    for text in [feed, *_texts(20_000, 1)]:
        assert sim_tools._ids(text) == sim_tools._ID.findall(text), repr(text)


def test_ids_word_cache_is_bounded_and_answers_as_the_regex(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sim_tools, "_WORD_IDS", {})
    monkeypatch.setattr(sim_tools, "_WORD_IDS_MAX", 8)
    texts = _texts(2_000, 3)
    most = max(len(t.split()) for t in texts)  # one text's words may come after a clear
    for _ in range(2):  # the second pass answers from the kept words
        for text in texts:
            assert sim_tools._ids(text) == sim_tools._ID.findall(text), repr(text)
            assert len(sim_tools._WORD_IDS) <= 8 + most


def _named_by_word_set(fns: list[dict[str, Any]], request: str) -> list[dict[str, Any]]:
    """What ``_pick`` did before: the set of the request's words, intersected per tool."""
    words = set(re.findall(r"[a-z]+", request.lower()))
    return [f for f in fns if set(str(f.get("name", "")).lower().split("_")) & words]


def test_named_tools_equal_the_word_set_intersection() -> None:
    names = "post reply like follow unfollow read_feed Read_Feed2 a__b x-y_z \u00fcn\u00ef_like"
    fns: list[dict[str, Any]] = [{"name": n} for n in [*names.split(), ""]]
    fns += [{"name": None}, {}]
    for request in ["Tick 3. You could like or follow; read the feed.", *_texts(20_000, 2)]:
        assert sim_tools._named(fns, request) == _named_by_word_set(fns, request), repr(request)


def _corpus_by_stepping(level: int) -> tuple[str, list[int]]:
    """``sim_content._corpus_at`` as it was: the generator stepped once per call."""
    cpt = min(max(level * sim_content._CPT_STEP, sim_content._CPT_LO), sim_content._CPT_HI)
    if cpt < sim_content._CPT_MID:
        other = sim_content._SHORT_WORDS
        p = (sim_content._CPT_MID - cpt) / (sim_content._CPT_MID - sim_content._CPT_LO)
    else:
        other = sim_content._LONG_WORDS
        p = (cpt - sim_content._CPT_MID) / (sim_content._CPT_HI - sim_content._CPT_MID)
    rng = Rng(12345 + level)
    words = []
    for _ in range(sim_content._CORPUS_WORDS):
        if rng.random() < p:
            words.append(other[rng.randint(len(other))])
        else:
            words.append(sim_content._WORDS[rng.randint(sim_content._NW)])
    starts, pos = [], 0
    for w in words:
        starts.append(pos)
        pos += len(w) + 1
    starts.append(pos)
    return " ".join(words) + " ", starts


@pytest.mark.parametrize("level", [0, 11, 17, 19, 26, 39, 64])
def test_corpus_equals_stepping_the_generator(level: int) -> None:
    sim_content._CORPORA.pop(level, None)
    assert sim_content._corpus_at(level) == _corpus_by_stepping(level)


def test_llama3_tools_delta_equals_rendering_twice() -> None:
    tok = get_tokenizer("llama3")
    tools = [
        {"type": "function", "function": {"name": "like", "description": "Like a post.",
         "parameters": {"type": "object", "properties": {"post_id": {"type": "string"}},
                        "required": ["post_id"]}}},
    ]  # fmt: skip
    system = {"role": "system", "content": " You are @a. "}
    call = {"function": {"name": "like", "arguments": "{}"}}
    shapes: list[list[dict[str, Any]]] = [
        [],
        [system],
        [system, {"role": "user", "content": "  hi there \n"}],
        [{"role": "user", "content": "hi"}],
        [{"role": "user", "content": ""}, {"role": "assistant", "content": "ok"}],
        [system, {"role": "assistant", "content": "first"}],
        [system, {"role": "user", "content": [{"type": "text", "text": "parts"}]}],
        [system, {"role": "user", "content": None}],
        [system, {"role": "tool", "content": " result"}],
        [system, {"role": "user", "content": "x", "tool_calls": [call]}],
    ]
    for messages in shapes:
        head = messages[: 2 if messages and messages[0].get("role") == "system" else 1]
        want = tok.prompt_tokens(head, tools) - tok.prompt_tokens(head)
        assert tok.tools_delta(messages, tools) == want, messages  # type: ignore[attr-defined]


def test_leaves_equal_the_general_branches() -> None:
    """``gen_value`` draws a leaf (a type, an enum, annotations) directly; the same schema
    with a key the general branches ignore (``$comment``) goes the long way: same values,
    same types, same draws."""
    leaves: list[dict[str, Any]] = [
        {"type": "string"},
        {"type": "string", "description": "x", "title": "T", "default": "d"},
        {"type": "integer", "default": 10, "description": "how many"},
        {"type": "integer"},
        {"enum": ["a", "b", "c"], "type": "string", "default": "a"},
        {"enum": [1]},
        {"type": "boolean", "description": "not a leaf shortcut"},
        {"type": ["string", "null"]},
        {"description": "no type"},
    ]
    for leaf in leaves:
        for seed in range(200):
            a, b = Rng(seed), Rng(seed)
            got = sim_content.gen_value(leaf, a)
            want = sim_content.gen_value({**leaf, "$comment": "long way"}, b)
            assert got == want and type(got) is type(want) and a.s == b.s, (leaf, seed)
    schema = {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}
    long = {"type": "object", "properties": {"q": {"type": "string", "$comment": "Q"},
                                             "n": {"type": "integer", "$comment": ""}}}  # fmt: skip
    a, b = Rng(7), Rng(7)
    assert sim_content.gen_value(schema, a) == sim_content.gen_value(long, b) and a.s == b.s


@pytest.mark.parametrize("seed", range(3))
def test_holds_separator_equals_the_character_class(seed: int) -> None:
    from agentlab.llm.sim_slots import holds_separator

    for text in [*_texts(300, seed), "a\x1db", "\x1e", "x\x1f", "\x1c "]:
        assert holds_separator(text) == (re.search("[\x1d-\x1f]", text) is not None), text


def _pick_before(
    ctx: Any, fns: list[dict[str, Any]], rng: Rng, invalid_p: float, *, reads: bool = False
) -> dict[str, Any]:
    """``sim_tools._pick`` as it was: ``_fillable`` by ``all`` over ``can_fill``, the named
    tools by ``any`` over every pattern, ``in ok`` by value."""

    def fillable(f: dict[str, Any]) -> bool:
        props, required = sim_tools._params(f)
        return all(ctx.can_fill(p, props.get(p, {})) for p in required)

    low = ctx.request.lower()
    named = [
        f
        for f in fns
        if any(p.search(low) is not None for _, p in sim_tools._name_words(str(f.get("name", ""))))
    ]
    if rng.random() < invalid_p:
        pool = named or fns
    else:
        ok = [f for f in fns if reads or fillable(f)]
        pool = [f for f in named if f in ok] or ok or named or fns
    return pool[rng.randint(len(pool))]


def test_pick_equals_the_long_form() -> None:
    """Same tool (the same object) and the same draws as the long form, for contexts with
    and without ids and users, tools whose required arguments need either, equal-valued
    duplicates (the `in ok` value comparison) and requests that name tools in passing."""
    schemas = [
        {"properties": {"post_id": {"type": "string"}}, "required": ["post_id"]},
        {"properties": {"user": {"type": "string"}}, "required": ["user"]},
        {"properties": {"user": {"enum": ["a"]}, "n": {"type": "integer"}}, "required": ["user"]},
        {"properties": {"content": {"type": "string"}}, "required": ["content"]},
        {"properties": {}},
    ]
    names = ["post", "reply", "like", "follow", "unfollow", "read_feed", "Like_2", "x"]
    rng = random.Random(9)
    requests = [*_texts(60, 4), "Please like 1.a.2 or follow @bob; read the feed", ""]
    for i, request in enumerate(requests):
        fns = [
            {"name": rng.choice(names), "parameters": rng.choice(schemas)}
            for _ in range(rng.randint(1, 6))
        ]
        fns.append(dict(fns[0]))  # equal to fns[0], not the same object
        feed = rng.choice(["", '[{"id": "1.u.2", "author": "u"}]', "@bob says hi"])
        messages = [{"role": "system", "content": "You are @me."},
                    {"role": "user", "content": request + " " + feed}]  # fmt: skip
        ctx = sim_tools._Context(messages)
        for invalid_p in (0.0, 0.5):
            for reads in (False, True):
                a, b = Rng(i), Rng(i)
                got = sim_tools._pick(ctx, fns, a, invalid_p, reads=reads)
                want = _pick_before(ctx, fns, b, invalid_p, reads=reads)
                assert got is want and a.s == b.s, (i, invalid_p, reads)


def test_prefix_slots_get_returns_what_was_put() -> None:
    """``PrefixSlots.get`` finds the fill by two C scans; payloads holding the fill
    character before their end, long ones (no fill) and empty ones come back whole."""
    from agentlab.llm.sim_slots import PrefixSlots

    slots = PrefixSlots(slots=64)
    payloads = ["", "a", "x\x1dy", "\x1d\x1dz", "p" * 600, "q\x1d" * 300 + "r", *_texts(50, 6)]
    for key, payload in enumerate(p.rstrip("\x1d") for p in payloads):
        slots.put(key * 4, payload)
        assert slots.get(key * 4) == payload, repr(payload)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chain_blocks_equals_the_per_block_loop(seed: int) -> None:
    """``sim_kv.chain_blocks`` zips precomputed offsets and index bits in; the loop it
    replaced (multiply, slice, shift per block) gives the same hashes, including chains that
    start past the precomputed index bits (grown on demand) and non-ASCII bytes."""
    import zlib

    from agentlab.llm import sim_kv

    def loop(data: bytes, w: int, count: int, start: int, crc: int) -> list[int]:
        out = []
        for j in range(count):
            crc = zlib.crc32(data[j * w : (j + 1) * w], crc)
            out.append(crc | ((start + j) << 32))
        return out

    rng = random.Random(seed)
    texts = _texts(200, seed)
    for i in range(len(texts)):
        data = "".join(texts[i : i + 20]).encode("utf-8", "surrogatepass")
        w = rng.choice([1, 3, 64])
        count = rng.randint(0, len(data) // w)
        start = rng.choice([0, 1, 37, 1023, 1024, 5000 + i])
        crc = rng.choice([0, rng.getrandbits(32)])
        assert sim_kv.chain_blocks(data, w, count, start, crc) == loop(data, w, count, start, crc)
