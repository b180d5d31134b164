"""sim-serve's ``POST /v1/completions`` (vLLM's text completions, what ``vllm bench serve``
and aiperf's ``completions`` endpoint send), through the ``openai`` SDK: the raw prompt
counted as vLLM encodes it (its text and ``<|begin_of_text|>``, no chat template; token ids
one each), vLLM's default of 16 tokens, one SSE chunk per token with the finish reason on
the last text chunk, KV blocks that a chat prompt of the same text does not share, and
400s naming the fields the simulator does not serve."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from agentlab.llm.serve_models import TEXT_DEFAULT_MAX_TOKENS
from agentlab.llm.sim_serve import SimServeHandle, start_sim_server
from agentlab.llm.tokens import count_text_tokens, get_tokenizer

PROMPT = "The committee met at noon and agreed on the next three steps of the plan. " * 20


@pytest.fixture(scope="module")
def server() -> Iterator[SimServeHandle]:
    with start_sim_server("vllm-3b", seed=0, overhead_s=0.02, decode_tps=2000) as h:
        yield h


@pytest.fixture(scope="module")
def client(server: SimServeHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def _create(client: openai.OpenAI, **kw: Any) -> Any:
    args: dict[str, Any] = {"model": "vllm-3b", "prompt": PROMPT, **kw}
    return client.completions.create(**args)


def test_a_raw_prompt_is_counted_with_bos_and_no_template(client: openai.OpenAI) -> None:
    r = _create(client, max_tokens=40, extra_body={"ignore_eos": True})
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    # vLLM encodes a completions prompt with add_special_tokens: <|begin_of_text|> + text
    assert r.usage.prompt_tokens == count_text_tokens(PROMPT, tokenizer="llama3") + 1
    assert r.usage.completion_tokens == 40
    assert r.choices[0].finish_reason == "length"
    assert len(r.choices[0].text.split()) == 40  # one simulated word a token
    ids = list(range(1000, 1077))
    assert _create(client, prompt=ids, max_tokens=3).usage.prompt_tokens == 77  # ids as sent
    assert _create(client, prompt=[ids], max_tokens=3).usage.prompt_tokens == 77


def test_the_default_reply_cap_is_vllms_16_tokens(client: openai.OpenAI) -> None:
    r = _create(client, extra_body={"ignore_eos": True})
    assert TEXT_DEFAULT_MAX_TOKENS == 16
    assert r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length"


def test_stream_sends_a_chunk_per_token_and_ends_on_the_last_text(client: openai.OpenAI) -> None:
    whole = _create(
        client, prompt="stream me " * 30, max_tokens=30, extra_body={"ignore_eos": True}
    )
    events = list(
        _create(
            client,
            prompt="stream me " * 30,
            max_tokens=30,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    texts = [e for e in events if e.choices]
    assert len(texts) == 30  # one chunk per token, as vLLM streams
    finishes = [e.choices[0].finish_reason for e in texts]
    assert finishes == [None] * 29 + ["length"]  # on the last text chunk: no extra chunk
    assert "".join(e.choices[0].text for e in texts) == whole.choices[0].text
    assert events[-1].choices == [] and events[-1].usage.completion_tokens == 30
    assert len({e.id for e in events}) == 1


def test_a_stop_string_ends_the_text_and_is_removed(client: openai.OpenAI) -> None:
    free = _create(client, prompt="stop test", max_tokens=200).choices[0].text
    words = free.split()
    assert len(words) >= 3
    word = words[len(words) // 2]
    r = _create(client, prompt="stop test", max_tokens=200, stop=[word])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == free[: free.index(word)]  # cut at its first occurrence


def test_raw_and_chat_prompts_of_one_text_share_no_kv_blocks(client: openai.OpenAI) -> None:
    text = "A long shared context about the village council's budget vote. " * 40
    chat = client.chat.completions.create(
        model="vllm-3b", messages=[{"role": "user", "content": text}], max_tokens=2
    )
    assert chat.usage.prompt_tokens > 500
    first = _create(client, prompt=text, max_tokens=2)
    again = _create(client, prompt=text, max_tokens=2)
    # the chat template's header tokens come first in vLLM: nothing of the chat prompt is a
    # prefix of the raw one; the same raw prompt again is (all but its last partial block)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert first.usage.prompt_tokens - 16 < cached < first.usage.prompt_tokens


@pytest.mark.parametrize(
    ("field", "body", "status"),
    [
        ("logprobs", {"logprobs": 0}, 400),  # 0 asks for the sampled token's log probability
        ("echo", {"echo": True}, 400),
        ("suffix", {"suffix": "end"}, 400),
        ("prompt", {"prompt": ["one", "two"]}, 400),
        ("prompt", {"prompt": ""}, 400),
        ("prompt", {"prompt": [5, -1]}, 400),
        ("n", {"n": 2}, 400),
        ("max_tokens", {"max_tokens": 200_000}, 400),
        ("sim_nonsense", {"sim_nonsense": 1}, 400),
        ("model", {"model": "gpt-nope"}, 404),
    ],
)
def test_what_is_not_served_is_refused_naming_the_field(
    client: openai.OpenAI, field: str, body: dict[str, Any], status: int
) -> None:
    kw = {k: v for k, v in body.items() if k in ("prompt", "model", "n", "max_tokens")}
    extra = {k: v for k, v in body.items() if k not in kw}
    with pytest.raises(openai.APIStatusError) as info:
        _create(client, **kw, extra_body=extra)
    assert info.value.status_code == status
    assert info.value.body["param"] == field  # type: ignore[index]


def test_the_estimate_tokenizer_counts_a_raw_prompt_without_special_tokens() -> None:
    assert get_tokenizer("chars:4").raw_prompt_tokens("x" * 40) == 10
    assert get_tokenizer("llama3").raw_prompt_tokens("Hello world") == 3  # BOS, Hello, world


def test_a_prompt_that_leaves_no_room_for_its_reply_is_refused_as_vllm_does() -> None:
    # vLLM: prompt + max_tokens above max_model_len is a 400 (without max_tokens the prompt
    # alone must leave room); the chat prompt is counted with its template
    with start_sim_server("vllm-3b", seed=0, max_model_len=300) as h:
        c = openai.OpenAI(base_url=h.base_url, api_key="unused", max_retries=0)
        text = "word " * 250
        n = count_text_tokens(text, tokenizer="llama3") + 1
        ok = c.completions.create(model="vllm-3b", prompt=text, max_tokens=300 - n)
        assert ok.usage.prompt_tokens == n
        with pytest.raises(openai.BadRequestError) as info:
            c.completions.create(model="vllm-3b", prompt=text, max_tokens=301 - n)
        assert info.value.body["param"] == "prompt"  # type: ignore[index]
        assert f"({n} in the prompt, {301 - n} in the completion)" in str(info.value)
        msgs = [{"role": "user", "content": text}]
        with pytest.raises(openai.BadRequestError) as info:
            c.chat.completions.create(model="vllm-3b", messages=msgs, max_tokens=300 - n)
        assert info.value.body["param"] == "messages"  # type: ignore[index]
        with pytest.raises(openai.BadRequestError):  # no max_tokens: the prompt fills it
            c.chat.completions.create(
                model="vllm-3b", messages=[{"role": "user", "content": text * 2}]
            )
