"""``sim_result._block_hashes`` (the tools head hashed once, kept) equals
``prompt_block_hashes`` over the whole prompt text, for every cut and first message."""

from __future__ import annotations

from typing import Any

import pytest

from agentlab.llm.sim_kv import prompt_block_hashes
from agentlab.llm.sim_profiles import get_profile
from agentlab.llm.sim_result import _block_hashes, _tools_text

TOOLS = [
    {"type": "function", "function": {"name": "post", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "like", "parameters": {"type": "object"}}},
]


def _whole(messages: list[dict[str, Any]], tools: Any, extra: str, prompt: int) -> tuple[int, ...]:
    parts = [_tools_text(tools) if tools else "", extra]
    for m in messages:
        c = m.get("content")
        parts += [str(m.get("role", "")), c if isinstance(c, str) else repr(c)]
    return prompt_block_hashes("\x1f".join(parts), prompt, block_size=16)


@pytest.mark.parametrize(
    "first",
    [
        {"role": "system", "content": "You are Ada, a nurse in Riverside. " * 9},
        {"role": "system", "content": "short"},
        {"role": "system", "content": ""},
        {"role": "user", "content": None},
        {"role": "system", "content": [{"type": "text", "text": "parts"}]},
        {"content": "no role " * 30},
    ],
)
@pytest.mark.parametrize("tools", [TOOLS, None])
def test_block_hashes_equal_the_whole_prompt_chain(first: dict[str, Any], tools: Any) -> None:
    p = get_profile("vllm-3b")
    extra = "|post,like" if tools else ""
    later = [
        {"role": "user", "content": "Tick 2. What do you do? é " * 20},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "post"}}]},
        {"role": "tool", "content": '{"post_id": "2.a.0"}'},
    ]
    for n in range(0, len(later) + 2):
        messages = [first, *later][:n]
        for prompt in (1, 16, 17, 160, 400, 10_000):
            got = _block_hashes(messages, tools, extra, prompt, p)
            assert got == _whole(messages, tools, extra, prompt), (n, prompt)
        # a second call (the kept head) answers the same
        assert _block_hashes(messages, tools, extra, 10_000, p) == _whole(
            messages, tools, extra, 10_000
        )
