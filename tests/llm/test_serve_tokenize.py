"""sim-serve's ``POST /tokenize`` and ``POST /detokenize`` (vLLM's, at the server's root):
the ids of a chat prompt are the whole rendered template encoded in one piece (the oracle
of ``test_tokens_additive``, written apart from ``token_ids``), their count is what the
completion endpoints charge for the same prompt through the ``openai`` SDK, ids decode back
to the text, and what the server cannot answer is refused with the field named."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from agentlab.llm.sim_serve import SimServeHandle, start_sim_server
from agentlab.llm.token_ids import chat_token_ids, raw_token_ids
from agentlab.llm.tokens import Llama3Tokenizer, get_tokenizer
from tests.llm.test_tokens_additive import SEAMS, TOOL, rendered

CALL = {"id": "c1", "type": "function", "function": {"name": "post", "arguments": '{"text": "hi"}'}}
CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are @ada, a careful reviewer."},
    {"role": "user", "content": [{"type": "text", "text": "Read the feed."}, {"type": "text", "text": "Then post."}]},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "  posted as p-17"},
    {"role": "assistant", "content": "Done: p-17."},
    {"role": "user", "content": "Now summarise the thread in one line."},
]  # fmt: skip


@pytest.fixture(scope="module")
def server() -> Iterator[SimServeHandle]:
    with start_sim_server("vllm-3b", seed=0, overhead_s=0.0, decode_tps=5000) as h:
        yield h


@pytest.fixture(scope="module")
def root(server: SimServeHandle) -> str:
    return f"http://{server.host}:{server.port}"


def _post(url: str, body: Any) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _whole(messages: list[dict[str, Any]], tools: Any) -> list[int]:
    tok = get_tokenizer("llama3")
    assert isinstance(tok, Llama3Tokenizer)
    return list(tok.encoding.encode(rendered(messages, tools), allowed_special="all"))


@pytest.mark.parametrize("text", SEAMS)
def test_chat_ids_are_the_whole_rendered_prompt_encoded_at_once(text: str) -> None:
    tok = get_tokenizer("llama3")
    convs = [
        [{"role": "user", "content": text}],
        [{"role": "system", "content": text}, {"role": "user", "content": text}],
        [*CHAT[:3], {"role": "tool", "tool_call_id": "c1", "content": text}, *CHAT[4:]],
    ]
    for messages in convs:
        for tools in (None, [TOOL]):
            ids = chat_token_ids(tok, messages, tools)
            assert ids == _whole(messages, tools)
            assert len(ids) == tok.prompt_tokens(messages, tools)


def test_tokenize_counts_what_the_completions_charge(root: str, server: SimServeHandle) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    for tools in (None, [TOOL]):
        status, got = _post(
            f"{root}/tokenize", {"model": "vllm-3b", "messages": CHAT, "tools": tools}
        )
        assert status == 200 and got["max_model_len"] == 131_072 and got["token_strs"] is None
        assert got["tokens"] == _whole(CHAT, tools) and got["count"] == len(got["tokens"])
        kw: dict[str, Any] = {"tools": tools} if tools else {}
        r = client.chat.completions.create(model="vllm-3b", messages=CHAT, max_tokens=2, **kw)  # type: ignore[arg-type]
        assert r.usage is not None and r.usage.prompt_tokens == got["count"]
    text = "The committee met at noon. " * 40
    status, got = _post(f"{root}/tokenize", {"prompt": text, "return_token_strs": True})
    r2 = client.completions.create(model="vllm-3b", prompt=text, max_tokens=2)
    assert status == 200 and r2.usage is not None and got["count"] == r2.usage.prompt_tokens
    assert got["tokens"][0] == 128000 and got["token_strs"][0] == "<|begin_of_text|>"
    assert "".join(got["token_strs"][1:]) == text
    # ids sent back as the prompt cost what /tokenize counted
    r3 = client.completions.create(model="vllm-3b", prompt=got["tokens"], max_tokens=2)
    assert r3.usage is not None and r3.usage.prompt_tokens == got["count"]


def test_tokenize_options_and_detokenize(root: str) -> None:
    _, base = _post(f"{root}/tokenize", {"messages": CHAT})
    _, no_gen = _post(f"{root}/tokenize", {"messages": CHAT, "add_generation_prompt": False})
    # <|start_header_id|> assistant <|end_header_id|> "\n\n": the generation prompt
    assert base["tokens"][:-4] == no_gen["tokens"] and no_gen["count"] == base["count"] - 4
    _, bos = _post(f"{root}/tokenize", {"messages": CHAT, "add_special_tokens": True})
    assert bos["tokens"] == [128000, *base["tokens"]]  # vLLM's HF tokenizer adds a 2nd BOS
    _, bare = _post(f"{root}/tokenize", {"prompt": "hello world", "add_special_tokens": False})
    assert bare["tokens"] == raw_token_ids(get_tokenizer("llama3"), "hello world")[1:]
    status, back = _post(f"{root}/detokenize", {"model": "sim/vllm-3b", "tokens": base["tokens"]})
    assert status == 200 and back["prompt"] == rendered(CHAT, None)


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/tokenize", {"model": "gpt-4o", "prompt": "x"}, 404, "model"),
        ("/tokenize", {"messages": []}, 400, "messages"),
        ("/tokenize", {"messages": CHAT, "continue_final_message": True}, 400, "continue_final_message"),
        ("/tokenize", {"prompt": 5}, 400, "prompt"),
        ("/tokenize", {}, 400, "prompt"),
        ("/tokenize", b"{not json", 400, None),
        ("/detokenize", {"tokens": [1, 128256]}, 400, "tokens"),
        ("/detokenize", {"tokens": "12"}, 400, "tokens"),
    ],
)  # fmt: skip
def test_refusals_name_their_field(
    root: str, path: str, body: Any, status: int, param: Any
) -> None:
    got_status, got = _post(root + path, body)
    assert got_status == status
    assert got["error"]["param"] == param and got["error"]["message"]


def test_an_estimating_tokenizer_counts_but_has_no_ids() -> None:
    with start_sim_server("instant") as h:
        root = f"http://{h.host}:{h.port}"
        status, got = _post(f"{root}/tokenize", {"messages": CHAT})
        assert status == 200 and got["tokens"] is None
        assert got["count"] == get_tokenizer("chars:4").prompt_tokens(CHAT) > 0
        status, err = _post(f"{root}/detokenize", {"tokens": [1, 2]})
        assert status == 400 and "chars:4" in err["error"]["message"]
