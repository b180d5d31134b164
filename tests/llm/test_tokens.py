"""Prompt tokens as the real server counts them (``agentlab.llm.tokens``)."""

from __future__ import annotations

import json

import pytest

from agentlab.core.clock import VirtualClock
from agentlab.errors import ConfigError
from agentlab.llm.sim_backend import SimServer
from agentlab.llm.sim_profiles import SimProfile, get_profile
from agentlab.llm.tokens import (
    count_prompt_tokens,
    count_text_tokens,
    get_tokenizer,
    message_text,
)

PROMPT = ("The team should agree on a plan for the data note before the vote. " * 60)[:4000]
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a user up by id.",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
    },
}


def test_llama3_vocabulary_is_exact_on_known_ids() -> None:
    # ids of the Llama-3 vocabulary: "Hello"=9906 " world"=1917 ","=11 " how"=1268 ...
    assert count_text_tokens("Hello world, how are you?", tokenizer="llama3") == 7
    assert count_text_tokens("", tokenizer="llama3") == 0


def test_llama3_chat_template_by_hand() -> None:
    # <|begin_of_text|> (1) + system header (4: start, "system", end, "\n\n") + the dates
    # block + <|eot_id|> (1); user header (4) + "hi" (1) + eot (1); assistant header (4)
    tok = get_tokenizer("llama3")
    dates = count_text_tokens(
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n", tokenizer=tok
    )
    expected = 1 + 4 + dates + 1 + (4 + 1 + 1) + 4
    assert count_prompt_tokens([{"role": "user", "content": "hi"}], tokenizer=tok) == expected
    # a system message's text goes inside the system block (no second header)
    with_system = count_prompt_tokens(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        tokenizer=tok,
    )
    assert with_system == expected + count_text_tokens("Be brief.", tokenizer=tok)


@pytest.mark.parametrize("tokenizer", ["llama3", "chars:4.8", "chars:4"])
def test_content_parts_count_as_their_text(tokenizer: str) -> None:
    plain = count_prompt_tokens([{"role": "user", "content": PROMPT}], tokenizer=tokenizer)
    parts = count_prompt_tokens(
        [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}], tokenizer=tokenizer
    )
    assert plain == parts
    assert plain > 700  # 4,000 characters are hundreds of tokens, not a flat 16
    two = count_prompt_tokens(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": PROMPT[:2000]},
                    {"type": "text", "text": PROMPT[2000:]},
                ],
            }
        ],
        tokenizer=tokenizer,
    )
    assert abs(two - plain) <= 2  # the joining newline


def test_message_text_of_parts_and_none() -> None:
    assert message_text(None) == ""
    assert message_text([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == "a\nb"


@pytest.mark.parametrize("tokenizer", ["llama3", "chars:4"])
def test_tool_schemas_and_tool_messages_are_counted(tokenizer: str) -> None:
    msgs = [{"role": "user", "content": "find user 7"}]
    bare = count_prompt_tokens(msgs, tokenizer=tokenizer)
    with_tools = count_prompt_tokens(msgs, [TOOL], tokenizer=tokenizer)
    schema = count_text_tokens(json.dumps(TOOL), tokenizer=tokenizer)
    assert with_tools - bare >= schema * 0.9
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "function": {"name": "lookup", "arguments": '{"id": "7"}'}}],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": '{"name": "Ada Lovelace"}'}
    longer = count_prompt_tokens([*msgs, call, result], tokenizer=tokenizer)
    assert longer > bare + 10


def test_unknown_tokenizers_are_refused() -> None:
    for bad in ("gpt9", "chars:0", "chars:x"):
        with pytest.raises(ConfigError):
            get_tokenizer(bad)
        with pytest.raises(ConfigError):
            SimProfile(name="x").replace(tokenizer=bad)


def _server(**overrides: object) -> SimServer:
    profile = get_profile("vllm-3b", **overrides)
    return SimServer(profile, seed=0, clock=VirtualClock())


@pytest.mark.parametrize("tokenizer", ["llama3", "chars:4.8"])
def test_sim_server_counts_parts_like_a_string(tokenizer: str) -> None:
    # the simulator used to count a list of parts as a flat 16 tokens
    server = _server(tokenizer=tokenizer)
    plain = server.plan([{"role": "user", "content": PROMPT}]).prompt_tokens
    server = _server(tokenizer=tokenizer)
    parts = server.plan(
        [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}]
    ).prompt_tokens
    assert (
        plain
        == parts
        == count_prompt_tokens([{"role": "user", "content": PROMPT}], tokenizer=tokenizer)
    )


def test_sim_server_counts_tools_once() -> None:
    server = _server()
    msgs = [{"role": "user", "content": "find user 7"}]
    res = server.plan(msgs, tools=[TOOL])
    assert res.prompt_tokens == count_prompt_tokens(msgs, [TOOL], tokenizer="llama3")


def test_vllm_3b_names_the_llama3_tokenizer() -> None:
    assert get_profile("vllm-3b").tokenizer == "llama3"
    assert get_profile("instant").tokenizer == "chars:4"


_ARGUMENTS = [
    {"query": "plain words"},
    {"text": "caf\u00e9 \u2014 \U0001f600", "n": 3, "x": 1.5e-7, "big": 2**70, "nan": float("nan")},
    {"nested": {"list": [1, "two", None, True, {"k": "\u00fc"}]}, "empty": {}},
    ["a", "b"],
    "just a string",
]


@pytest.mark.parametrize("args", _ARGUMENTS)
def test_tool_calls_text_renders_as_json_dumps(args: object) -> None:
    """The prebuilt encoder of ``tool_calls_text`` writes what ``json.dumps(...,
    ensure_ascii=False)`` writes, for arguments given as JSON text or as an object."""
    from agentlab.llm.tokens import tool_calls_text

    want = json.dumps(args, ensure_ascii=False)
    for given in (json.dumps(args), json.dumps(args, ensure_ascii=False), args):
        call = {"function": {"name": "f", "arguments": given}}
        assert tool_calls_text([call]) == '{"name": "f", "parameters": ' + want + "}"
    bad = {"function": {"name": "f", "arguments": "{not json"}}
    assert tool_calls_text(bad) == '{"name": "f", "parameters": "{not json"}'


@pytest.mark.parametrize(
    "text", ['{"q": 1, "q": 2}', '{"x": 1e400}', '{"s": "\\ud800"}', "[-0.0, 5e-324]"]
)
def test_tool_call_arguments_count_as_json_loads_reads_them(text: str) -> None:
    """Arguments are parsed by orjson, by ``json.loads`` where orjson refuses them (an
    overflowing number, a lone surrogate): the text counted is the same either way."""
    from agentlab.llm.tokens import tool_calls_text

    want = json.dumps(json.loads(text), ensure_ascii=False)
    call = {"function": {"name": "f", "arguments": text}}
    assert tool_calls_text([call]) == '{"name": "f", "parameters": ' + want + "}"
