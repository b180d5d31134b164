"""Llama 3's prompt count, summed per message, equals the count of the whole rendered prompt.

``Llama3Tokenizer.prompt_tokens`` counts each message text apart (cached) and the tool
block once per tools list. That is exact only because no pre-token of Llama 3's splitter
spans a seam between the template's pieces; these tests render the whole prompt as the
chat template lays it out, tokenise it in one piece and require equal counts: on the
prompts a real persona society on ``social_feed`` sends, and on texts made to probe the
seams (leading punctuation, digits, contractions, emoji, whitespace, empty contents).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from agentlab.llm import LLMClient
from agentlab.llm.sim_backend import SimServer
from agentlab.llm.token_ids import chat_token_ids
from agentlab.llm.tokens import Llama3Tokenizer, get_tokenizer, message_text, tool_calls_text
from agentlab.runtime import Society

H = "<|start_header_id|>{}<|end_header_id|>\n\n"
EOT = "<|eot_id|>"


def rendered(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The whole prompt as Llama 3.1 / 3.2 Instruct's template renders it (vLLM)."""
    import json

    tok = Llama3Tokenizer
    msgs = list(messages)
    out = "<|begin_of_text|>" + H.format("system")
    if tools:
        out += "Environment: ipython\n"
    out += f"Cutting Knowledge Date: December 2023\nToday Date: {tok.DATE}\n\n"
    if msgs and msgs[0].get("role") == "system":
        out += message_text(msgs.pop(0).get("content")).strip()
    out += EOT
    if tools:
        first = message_text(msgs.pop(0).get("content")).strip() if msgs else ""
        block = "".join(
            json.dumps(t, indent=4, ensure_ascii=False, default=str) + "\n\n" for t in tools
        )
        out += H.format("user") + tok.TOOLS_PREAMBLE + block + first + EOT
    for m in msgs:
        role = str(m.get("role", "user"))
        if m.get("tool_calls"):
            out += H.format("assistant") + tool_calls_text(m["tool_calls"]) + EOT
        elif role in ("tool", "ipython"):
            c = m.get("content")
            text = c if isinstance(c, str) else json.dumps(c, ensure_ascii=False, default=str)
            out += H.format("ipython") + text + EOT
        else:
            out += H.format(role) + message_text(m.get("content")).strip() + EOT
    return out + H.format("assistant")


def whole_count(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    tok = get_tokenizer("llama3")
    assert isinstance(tok, Llama3Tokenizer)
    return len(tok._enc.encode(rendered(messages, tools), allowed_special="all"))


@pytest.fixture(scope="module")
def society_prompts(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, Any, int]]:
    """Every (messages, tools, the simulator's prompt tokens) a 24-agent persona society
    sends in 3 ticks (the simulator counts what each call adds to its conversation)."""
    seen: list[tuple[Any, Any, int]] = []
    plan = SimServer.plan

    def recording_plan(self: SimServer, messages: Any, **kw: Any) -> Any:
        msgs, tools = copy.deepcopy(messages), copy.deepcopy(kw.get("tools"))
        res = plan(self, messages, **kw)
        seen.append((msgs, tools, res.prompt_tokens))
        return res

    mp = pytest.MonkeyPatch()
    mp.setattr(SimServer, "plan", recording_plan)
    try:
        run: Path = tmp_path_factory.mktemp("tok") / "run"
        s = Society.create(run, agents=24, env=["social_feed"], llm=LLMClient("sim/vllm-3b", seed=5),
                           clock="virtual", seed=5, batch_size=8, progress=False)  # fmt: skip
        s.run_sync(ticks=3)
        s.close()
    finally:
        mp.undo()
    return seen


def test_society_prompts_count_as_the_whole_rendered_prompt(society_prompts: list) -> None:
    tok = get_tokenizer("llama3")
    assert len(society_prompts) >= 60
    assert any(tools for _, tools, _ in society_prompts)
    assert max(len(m) for m, _, _ in society_prompts) >= 4  # conversations that grew
    for messages, tools, simulated in society_prompts:
        assert simulated == whole_count(messages, tools)
        assert tok.prompt_tokens(messages, tools) == whole_count(messages, tools)
        # sim-serve's /tokenize ids: the same prompt, encoded in the pieces it is counted in
        assert chat_token_ids(tok, messages, tools) == tok.encoding.encode(
            rendered(messages, tools), allowed_special="all"
        )
        # and again, from the caches (same list objects: the tools block is not rendered)
        assert tok.prompt_tokens(messages, tools) == whole_count(messages, tools)


SEAMS = [
    "",
    "hi",
    "!important: read this",
    "'s what they said",
    "123456 is the id",
    "  leading spaces are stripped",
    "\n\nnewlines first",
    "🙂 emoji first",
    "ends with newlines\n\n",
    "ends with spaces   ",
    '{"json": [1, 2, 3]}',
    "中文开头的句子",
    "tab\tinside\tand\r\nCRLF",
]
TOOL = {
    "type": "function",
    "function": {
        "name": "post",
        "description": "Post a short text. Ünïcode ok.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}, "n": {"type": "integer", "default": 3}},
            "required": ["text"],
        },
    },
}


@pytest.mark.parametrize("text", SEAMS)
def test_seams_between_template_pieces(text: str) -> None:
    tok = get_tokenizer("llama3")
    call = {"id": "c1", "function": {"name": "post", "arguments": '{"text": "' + text[:5] + '"}'}}
    convs = [
        [{"role": "user", "content": text}],
        [{"role": "system", "content": text}, {"role": "user", "content": text}],
        [
            {"role": "system", "content": "You are Ada."},
            {
                "role": "user",
                "content": [{"type": "text", "text": text}, {"type": "text", "text": "x"}],
            },
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": text},
            {"role": "assistant", "content": text},
            {"role": "user", "content": None},
        ],
    ]
    for messages in convs:
        for tools in (None, [TOOL], [TOOL, {**TOOL, "function": {"name": text or "x"}}]):
            assert tok.prompt_tokens(messages, tools) == whole_count(messages, tools)


def test_an_edited_tools_list_is_counted_again() -> None:
    tok = get_tokenizer("llama3")
    msgs = [{"role": "user", "content": "post something"}]
    tools = [copy.deepcopy(TOOL)]
    before = tok.prompt_tokens(msgs, tools)
    tools[0]["function"]["description"] += " A much longer description of the tool now."
    after = tok.prompt_tokens(msgs, tools)
    assert after > before
    assert after == whole_count(msgs, tools)
    tools.append(copy.deepcopy(TOOL))
    assert tok.prompt_tokens(msgs, tools) == whole_count(msgs, tools)


@pytest.mark.parametrize("tools", [None, [TOOL]])
def test_a_growing_conversation_is_counted_by_what_it_adds(tools: Any) -> None:
    from agentlab.core.clock import VirtualClock
    from agentlab.llm.sim_profiles import get_profile

    server = SimServer(get_profile("vllm-3b"), seed=3, clock=VirtualClock())
    chars = SimServer(get_profile("vllm-3b", tokenizer="chars:4"), seed=3, clock=VirtualClock())
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are @ada."}]
    for i, text in enumerate(SEAMS * 2):
        msgs.append({"role": ("user", "assistant", "tool")[i % 3], "content": text})
        got = server.plan(list(msgs), tools=tools).prompt_tokens
        assert got == whole_count(msgs, tools)
        # same seed, same conversation, another tokenizer: its own count, not this one's
        other = chars.plan(list(msgs), tools=tools).prompt_tokens
        assert other == get_tokenizer("chars:4").prompt_tokens(msgs, tools)


def test_chars_tokenizer_counts_an_edited_tools_list_again() -> None:
    """``CharsTokenizer.tools_delta`` is cached per tools list (a thread offers the same
    list on every call); an edit in place or a new list is counted afresh."""
    tok = get_tokenizer("chars:4")
    msgs = [{"role": "user", "content": "post something"}]
    tools = [copy.deepcopy(TOOL)]
    before = tok.tools_delta(msgs, tools)
    assert before == tok.prompt_tokens(msgs, tools) - tok.prompt_tokens(msgs) > 0
    assert tok.tools_delta(msgs, tools) == before  # the cached count
    tools[0]["function"]["description"] += " A much longer description of the tool now."
    after = tok.tools_delta(msgs, tools)
    assert after > before
    assert after == tok.prompt_tokens(msgs, tools) - tok.prompt_tokens(msgs)
    assert tok.tools_delta(msgs, [*tools, copy.deepcopy(TOOL)]) > after


@pytest.mark.parametrize("name", ["llama3", "chars:4"])
def test_added_tokens_are_what_the_messages_add(name: str) -> None:
    """``added_tokens(messages[k:], k)`` (the digest's count of a lineage's new messages,
    sliced once) is the count of ``messages`` less that of ``messages[:k]`` (``k`` 0: the
    whole count), as ``extend_tokens(messages, k)`` gives it."""
    tok = get_tokenizer(name)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are @ada."}]
    msgs += [
        {"role": ("user", "assistant", "tool")[i % 3], "content": t} for i, t in enumerate(SEAMS)
    ]
    for k in range(len(msgs) + 1):
        want = tok.prompt_tokens(msgs) - (tok.prompt_tokens(msgs[:k]) if k else 0)
        assert tok.added_tokens(msgs[k:], k) == want == tok.extend_tokens(msgs, k)
