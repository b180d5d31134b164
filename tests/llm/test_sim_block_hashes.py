"""The prefix cache's block layout (``sim_result._block_hashes``, ``sim_kv.chain_segments``):
blocks end where the tokenizer's counts put them, in the chat template's order, so the
cached tokens are those vLLM would find (issue 22's prefix caching, checked by hand)."""

from __future__ import annotations

import asyncio
import random
import zlib
from typing import Any

import pytest

from agentlab.core.clock import VirtualClock
from agentlab.llm import LLMClient
from agentlab.llm.sim_kv import chain_segments
from agentlab.llm.sim_profiles import get_profile
from agentlab.llm.sim_result import _block_hashes, _tools_text
from agentlab.llm.tokens import get_tokenizer

TOOLS = [
    {"type": "function", "function": {"name": "post", "description": "Post to the feed.",
     "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                    "required": ["text"]}}},
    {"type": "function", "function": {"name": "like", "parameters": {"type": "object"}}},
]  # fmt: skip

FIRSTS: list[dict[str, Any]] = [
    {"role": "system", "content": "You are Ada, a nurse in Riverside. " * 9},
    {"role": "system", "content": "short"},
    {"role": "system", "content": ""},
    {"role": "user", "content": None},
    {
        "role": "system",
        "content": [{"type": "text", "text": "parts"}, {"type": "text", "text": "é"}],
    },
    {"content": "no role " * 30},
]
LATER: list[dict[str, Any]] = [
    {"role": "user", "content": "Tick 2. What do you do? é \ud83d " * 20},
    {"role": "assistant", "content": None,
     "tool_calls": [{"function": {"name": "post", "arguments": '{"text": "hi"}'}}]},
    {"role": "tool", "content": '{"post_id": "2.a.0"}'},
    {"role": "tool", "content": "\n  leading space"},
    {"role": "assistant", "content": "Done."},
]  # fmt: skip


def test_chain_segments_by_hand() -> None:
    # pieces of 2 and 3 tokens, blocks of 2, 1.5 bytes a token: block 0 ends with the first
    # piece (its cut, byte min(4, 3) = 3: "d" joins block 1); block 1 two tokens into the
    # second, at byte min(6, 3) of it ("efg"); "hij" only reaches later blocks
    crc = zlib.crc32
    hashes, state = chain_segments([(b"abcd", 2), (b"efghij", 3)], 2, 10, (0, 0, 0), 1.5)
    assert hashes == [crc(b"abc"), crc(b"abcdefg") | 1 << 32]
    assert state == (5, 2, crc(b"abcdefghij"))
    # a dense piece (more tokens than bytes / ratio): its cuts stop at its end
    assert chain_segments([(b"ab", 4)], 2, 2, (0, 0, 0), 1.5)[0] == [
        crc(b"ab"),
        crc(b"ab") | 1 << 32,
    ]
    # continued from a state: the same chain as in one go
    first, mid = chain_segments([(b"abcd", 2)], 2, 10, (0, 0, 0), 1.5)
    rest, end = chain_segments([(b"efghij", 3)], 2, 10, mid, 1.5)
    assert first + rest == hashes and end == state
    # at most ``count`` hashes; a piece of no tokens joins the next block
    assert chain_segments([(b"abcd", 2), (b"efghij", 3)], 2, 1, (0, 0, 0), 1.5)[0] == hashes[:1]
    assert chain_segments([(b"x", 0), (b"ab", 2)], 2, 5)[0] == [crc(b"xab")]
    # a cut depends on the bytes before it only: a piece that grows keeps its blocks
    short, _ = chain_segments([(b"a" * 40, 8)], 2, 4)
    long, _ = chain_segments([(b"a" * 40 + b"b" * 80, 30)], 2, 4)
    assert short == long


def _reference(segments: list[tuple[bytes, int]], bs: int, count: int, r: float) -> tuple[int, ...]:
    """Each block's hash as the CRC of the whole stream up to its cut, cuts found per block
    end by walking the pieces (no chained state)."""
    stream = b"".join(d for d, _ in segments)
    out = []
    for j in range(count):
        end, pos, start = (j + 1) * bs, 0, 0
        for data, t in segments:
            if t > 0 and pos < end <= pos + t:
                cut = start + min(len(data), int((end - pos) * r))
                out.append(zlib.crc32(stream[:cut]) | j << 32)
                break
            pos, start = pos + t, start + len(data)
    return tuple(out)


@pytest.mark.parametrize("tokenizer", ["llama3", "chars:4"])
def test_segments_count_the_prompt(tokenizer: str) -> None:
    tok = get_tokenizer(tokenizer)
    for first in FIRSTS:
        for n in range(len(LATER) + 1):
            messages = [first, *LATER[:n]]
            for tools in (TOOLS, None):
                segments = tok.block_segments(messages, tools)
                assert sum(t for _, t in segments) == tok.prompt_tokens(messages, tools)
                assert (None in [s for s, _ in segments]) == bool(tools)


@pytest.mark.parametrize("tokenizer", ["llama3", "chars:4"])
@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_block_hashes_equal_the_reference_chain(tokenizer: str, block_size: int) -> None:
    p = get_profile("vllm-3b", block_size=block_size, tokenizer=tokenizer)
    tok = get_tokenizer(tokenizer)
    rng = random.Random(block_size)
    for first in FIRSTS:
        for n in range(len(LATER) + 1):
            messages = [first, *LATER[:n]]
            for tools in (TOOLS, None):
                segments = [
                    ((_tools_text(tools) if s is None else s).encode("utf-8", "surrogatepass"), t)
                    for s, t in tok.block_segments(messages, tools)
                ]
                total = sum(t for _, t in segments)
                for prompt in (1, block_size, total, rng.randint(1, total), total + 50):
                    r = getattr(tok, "chars_per_token", 4.0)
                    want = _reference(segments, block_size, min(prompt, total) // block_size, r)
                    # twice: the second from the kept head
                    assert _block_hashes(messages, tools, prompt, p, tok) == want
                    assert _block_hashes(messages, tools, prompt, p, tok) == want


def test_a_longer_conversation_keeps_every_earlier_block() -> None:
    p, tok = get_profile("vllm-3b"), get_tokenizer("llama3")
    for k in range(1, len(LATER)):
        a, b = [FIRSTS[0], *LATER[:k]], [FIRSTS[0], *LATER[: k + 1]]
        ha = _block_hashes(a, TOOLS, tok.prompt_tokens(a, TOOLS), p, tok)
        hb = _block_hashes(b, TOOLS, tok.prompt_tokens(b, TOOLS), p, tok)
        # all but a block holding the generation prompt (which the next message replaces)
        keep = (tok.prompt_tokens(a, TOOLS) - tok._header["assistant"]) // 16
        assert ha[:keep] == hb[:keep] and len(hb) >= len(ha) >= keep


def _cached(calls: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(prompt tokens, cached tokens) of each call, one after another on one engine."""

    async def run() -> list[tuple[int, int]]:
        c = LLMClient("sim/vllm-3b", seed=1).with_clock(VirtualClock())
        out = []
        for kw in calls:
            r = await c.complete(**kw)
            out.append((r.record.prompt_tokens, r.record.cached_tokens))
        return out

    return asyncio.run(run())


def test_cached_tokens_are_those_vllm_finds() -> None:
    hello = [{"role": "user", "content": "Say hello to the world please now"}]
    # a repeated 42-token prompt: its first two blocks are the template's fixed lines and
    # the message (vLLM always computes the last token: (42 - 1) // 16 blocks = 32 tokens);
    # the text alone is too short for a block of its own (0 before)
    assert _cached([{"messages": hello}] * 2) == [(42, 0), (42, 32)]
    # with tools: the schemas' tokens are counted as the template renders them (indented),
    # their blocks end where those counts say (80 of 212 before: the compact JSON's bytes)
    got = _cached([{"messages": hello, "tools": TOOLS}] * 2)
    assert got[1] == (got[0][0], (got[0][0] - 1) // 16 * 16)
    # two agents that differ in their system text share the template's fixed lines only:
    # Llama 3.2 puts the tools after the system text (all 48 tool tokens hit before)
    ada = [{"role": "system", "content": "Ada, a nurse."}, *hello]
    bob = [{"role": "system", "content": "Bob, a baker who loves bread."}, *hello]
    tok = get_tokenizer("llama3")
    fixed = tok.block_segments(ada, TOOLS)[0][1]  # the system block's fixed lines
    assert fixed // 16 == 1
    assert (
        _cached([{"messages": ada, "tools": TOOLS}, {"messages": bob, "tools": TOOLS}])[1][1] == 16
    )
