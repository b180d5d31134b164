"""sim-serve as a vLLM stand-in, over real HTTP (aiohttp and the openai SDK): the request
fields benchmark clients send (``ignore_eos``, ``min_tokens``, ``stop``,
``max_completion_tokens``), one SSE chunk per token, ``created`` per reply, ``logprobs``
refused naming the field, ``--served-model-name``, prompt tokens of content parts, and
vLLM v1's metric set (names, labels, buckets, finish reasons)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import openai
import pytest

import agentlab
from agentlab.llm.serve_metrics import build_1_2_5_buckets
from agentlab.llm.serve_models import ChatCompletionRequest
from agentlab.llm.sim_backend import SIM_OVERRIDES
from agentlab.llm.sim_serve import SimServeHandle, start_sim_server
from tests.llm.serve_helpers import MSGS, TOOLS

LONG = "Tell me about the weather in a few words. " * 40  # ~1,700 characters


@pytest.fixture(scope="module")
def server() -> Iterator[SimServeHandle]:
    with start_sim_server("vllm-3b", seed=0, overhead_s=0.02, decode_tps=2000) as h:
        yield h


async def _post(h: SimServeHandle, **body: Any) -> tuple[int, dict[str, Any]]:
    body = {"model": "vllm-3b", "messages": MSGS, **body}
    async with (
        aiohttp.ClientSession() as s,
        s.post(h.base_url + "/chat/completions", json=body) as r,
    ):
        return r.status, await r.json()


async def _stream(h: SimServeHandle, **body: Any) -> list[dict[str, Any]]:
    """Every SSE event of a streamed reply, parsed (``[DONE]`` dropped)."""
    body = {"model": "vllm-3b", "messages": MSGS, "stream": True, **body}
    body.setdefault("stream_options", {"include_usage": True})
    events = []
    async with (
        aiohttp.ClientSession() as s,
        s.post(h.base_url + "/chat/completions", json=body) as r,
    ):
        assert r.status == 200, await r.text()
        async for line in r.content:
            if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                events.append(json.loads(line[6:]))
    return events


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])


async def test_ignore_eos_delivers_exactly_max_tokens(server: SimServeHandle) -> None:
    # what guidellm and aiperf send to fix the output length (256 asked -> 256 delivered)
    for field in ("max_tokens", "max_completion_tokens"):
        status, r = await _post(server, ignore_eos=True, **{field: 256})
        assert status == 200, r
        assert status == 200, r
        assert r["usage"]["completion_tokens"] == 256
        assert r["choices"][0]["finish_reason"] == "length"
        assert len(r["choices"][0]["message"]["content"].split()) == 256
    events = await _stream(server, ignore_eos=True, max_tokens=256)
    assert events[-1]["usage"]["completion_tokens"] == 256
    assert len(_text(events).split()) == 256
    assert [e["choices"][0].get("finish_reason") for e in events if e["choices"]][-1] == "length"


async def test_min_tokens_holds_back_the_end(server: SimServeHandle) -> None:
    status, r = await _post(server, sim_completion_tokens=3, min_tokens=40, max_tokens=100)
    assert status == 200, r
    assert status == 200 and r["usage"]["completion_tokens"] == 40
    assert r["choices"][0]["finish_reason"] == "stop"
    status, r = await _post(server, sim_completion_tokens=30, min_tokens=5, max_tokens=100)
    assert status == 200, r
    assert r["usage"]["completion_tokens"] == 30  # a longer natural reply is kept


async def test_stop_string_ends_the_reply_and_is_removed(server: SimServeHandle) -> None:
    status, full = await _post(server, sim_completion_tokens=60)
    text = full["choices"][0]["message"]["content"]
    words = text.split()
    stop = " " + words[30] + " " + words[31]  # two words: found at or before word 30
    cut = text.index(stop)
    status, r = await _post(server, sim_completion_tokens=60, stop=[stop, "never-there"])
    assert status == 200, r
    assert status == 200
    assert r["choices"][0]["message"]["content"] == text[:cut]
    assert r["choices"][0]["finish_reason"] == "stop"
    assert r["usage"]["completion_tokens"] == len(text[: cut + len(stop)].split()) < 60
    # a stop string inside the first min_tokens tokens does not count
    status, r = await _post(server, sim_completion_tokens=60, stop=stop, min_tokens=50)
    assert status == 200, r
    assert r["usage"]["completion_tokens"] == 60 and r["choices"][0]["message"]["content"] == text
    # streamed: the same cut
    events = await _stream(server, sim_completion_tokens=60, stop=stop)
    assert _text(events) == text[:cut]


async def test_a_reply_exactly_max_tokens_long_ends_with_length(server: SimServeHandle) -> None:
    # vLLM checks the length before the end-of-sequence token: a reply that fills max_tokens
    # never got to stop
    status, r = await _post(server, sim_completion_tokens=5, max_tokens=5)
    assert status == 200, r
    assert r["usage"]["completion_tokens"] == 5 and r["choices"][0]["finish_reason"] == "length"
    status, r = await _post(server, sim_completion_tokens=5, max_tokens=6)
    assert status == 200, r
    assert r["choices"][0]["finish_reason"] == "stop"


async def test_one_sse_chunk_per_token(server: SimServeHandle) -> None:
    events = await _stream(server, sim_completion_tokens=40)
    content = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    assert len(content) == 40
    status, r = await _post(server, sim_completion_tokens=40)
    assert status == 200, r
    assert _text(events) == r["choices"][0]["message"]["content"]
    assert events[-1]["usage"]["completion_tokens"] == 40


async def test_continuous_usage_stats_count_tokens_so_far(server: SimServeHandle) -> None:
    # guidellm asks for it: vLLM then puts the usage so far in every chunk
    opts = {"include_usage": True, "continuous_usage_stats": True}
    events = await _stream(server, sim_completion_tokens=12, stream_options=opts)
    content = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    assert [e["usage"]["completion_tokens"] for e in content] == list(range(1, 13))
    assert events[-1]["usage"]["completion_tokens"] == 12


async def test_created_is_each_replys_own_time(server: SimServeHandle) -> None:
    await asyncio.sleep(1.1)  # the server started over a second ago
    before = int(time.time())
    status, r = await _post(server)
    assert status == 200, r
    events = await _stream(server, sim_completion_tokens=3)
    assert before <= r["created"] <= int(time.time())
    assert all(before <= e["created"] <= int(time.time()) for e in events)


@pytest.mark.parametrize(
    ("field", "value"), [("logprobs", True), ("top_logprobs", 3), ("echo", True)]
)  # (echo was ignored: a reply without the echo vLLM would prepend)
async def test_logprobs_is_a_400_naming_the_field(
    server: SimServeHandle, field: str, value: Any
) -> None:
    status, r = await _post(server, **{field: value})
    assert status == 400 and r["error"]["param"] == field and field in r["error"]["message"]
    status, r = await _post(server, logprobs=False)  # asking for none is fine
    assert status == 200


async def test_finish_reason_of_tool_calls_as_vllm_gives_it(server: SimServeHandle) -> None:
    status, r = await _post(server, tools=TOOLS, tool_choice="required")
    assert status == 200, r
    assert r["choices"][0]["finish_reason"] == "tool_calls"
    named = {"type": "function", "function": {"name": "post"}}
    status, r = await _post(server, tools=TOOLS, tool_choice=named)
    assert status == 200, r
    # a named tool_choice is guided decoding in vLLM: it ends "stop"
    assert r["choices"][0]["message"]["tool_calls"] and r["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "post"}}])
async def test_a_tool_call_streams_its_arguments_a_token_a_chunk(
    server: SimServeHandle, choice: Any
) -> None:
    """vLLM streams a tool call while its tokens are generated: the first delta names the
    call (``id``, ``type``, ``function.name``) with the first piece of its arguments, the
    later ones carry the next pieces; a client times its first token at the first delta,
    not at the end of the reply (it got one chunk at the end before)."""
    t0 = time.perf_counter()
    body = {"model": "vllm-3b", "messages": MSGS, "stream": True, "tools": TOOLS}
    body |= {"tool_choice": choice, "stream_options": {"include_usage": True}}
    arrivals: list[tuple[float, dict[str, Any]]] = []
    async with (
        aiohttp.ClientSession() as s,
        s.post(server.base_url + "/chat/completions", json=body) as r,
    ):
        async for line in r.content:
            if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                arrivals.append((time.perf_counter() - t0, json.loads(line[6:])))
    calls = [(t, e["choices"][0]["delta"]["tool_calls"]) for t, e in arrivals
             if e["choices"] and e["choices"][0]["delta"].get("tool_calls")]  # fmt: skip
    usage = arrivals[-1][1]["usage"]
    assert len(calls) == usage["completion_tokens"] > 3  # one chunk a token
    first = calls[0][1][0]
    assert first["id"].startswith("call_") and first["type"] == "function"
    assert first["function"]["name"] == "post"
    assert all(set(c[0]) == {"index", "function"} and set(c[0]["function"]) == {"arguments"}
               for _, c in calls[1:])  # fmt: skip
    streamed = "".join(c[0]["function"]["arguments"] for _, c in calls)
    status, whole = await _post(server, tools=TOOLS, tool_choice=choice)
    assert status == 200 and whole["usage"]["completion_tokens"] == usage["completion_tokens"]
    assert streamed == whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    # decode at 2,000 tokens/s: the pieces arrive over the reply's decode, not all at its end
    assert calls[-1][0] - calls[0][0] > 0.5 * (usage["completion_tokens"] - 1) / 2000
    finish = [e["choices"][0].get("finish_reason") for _, e in arrivals if e["choices"]][-1]
    assert finish == ("tool_calls" if choice == "required" else "stop")


def test_tool_call_deltas_share_the_chunks_by_argument_length() -> None:
    from agentlab.llm.sim_serve_replies import _tool_call_deltas

    calls = [("call_a", "post", '{"text": "' + "x" * 60 + '"}'), ("call_b", "like", '{"id": 7}')]
    deltas = _tool_call_deltas(calls, 30)
    per = [[d for d in deltas if d["index"] == i] for i in (0, 1)]
    assert 24 <= len(per[0]) <= 28 and 1 <= len(per[1]) <= 4  # by length, one at least each
    for i, (cid, name, args) in enumerate(calls):
        assert per[i][0]["id"] == cid and per[i][0]["function"]["name"] == name
        assert "".join(d["function"]["arguments"] for d in per[i]) == args
    assert [d["index"] for d in deltas] == sorted(d["index"] for d in deltas)  # call by call
    assert len(_tool_call_deltas(calls, 1)) == 2  # a chunk per call at least


@pytest.mark.parametrize("transport", ["lean", "litellm", "in-process"])
async def test_a_client_times_a_streamed_tool_call_from_its_first_delta(
    server: SimServeHandle, transport: str
) -> None:
    from agentlab.llm import LLMClient

    if transport == "in-process":  # the same engine, no HTTP: the engine's first token
        c = LLMClient("sim/vllm-3b", seed=0, overhead_s=0.02, decode_tps=2000)
    else:
        c = LLMClient("openai/vllm-3b", base_url=server.base_url, api_key="x", max_retries=0,
                      transport=transport)  # fmt: skip
    s = c.stream(MSGS, tools=TOOLS, tool_choice="required")
    async for _ in s:
        pass
    assert s.response is not None
    rec = s.response.record
    assert s.response.tool_calls and s.response.tool_calls[0].name == "post"
    # the first delta, not the end: decode at 2,000 tokens/s lies between the two
    assert rec.end - rec.first_token > 0.5 * (rec.completion_tokens - 1) / 2000 > 0
    assert rec.first_token > rec.start


async def test_content_parts_count_as_their_text(server: SimServeHandle) -> None:
    # guidellm sends prompts as parts; they were a flat 16 tokens whatever their length
    plain = [{"role": "user", "content": LONG}]
    parts = [{"role": "user", "content": [{"type": "text", "text": LONG}]}]
    _, a = await _post(server, messages=plain, sim_completion_tokens=2)
    _, b = await _post(server, messages=parts, sim_completion_tokens=2)
    assert a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"] > 300
    assert isinstance(b["usage"]["prompt_tokens_details"]["cached_tokens"], int)


async def test_cached_tokens_are_the_engines_prefix_cache_hits(server: SimServeHandle) -> None:
    messages = [{"role": "user", "content": "A long shared history. " * 300}]
    _, first = await _post(server, messages=messages, sim_completion_tokens=2)
    _, again = await _post(server, messages=messages, sim_completion_tokens=2)
    prompt = again["usage"]["prompt_tokens"]
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] < cached <= prompt
    assert cached >= prompt - 16  # all but the last, partial KV block
    async with aiohttp.ClientSession() as s, s.get(server.base_url[:-3] + "/metrics") as resp:
        text = await resp.text()
    hits = [ln for ln in text.splitlines() if ln.startswith("vllm:prefix_cache_hits_total")]
    assert hits and float(hits[0].split()[-1]) >= cached


async def test_openai_sdk_reads_lengths_usage_and_cached_tokens(server: SimServeHandle) -> None:
    sdk = openai.AsyncOpenAI(base_url=server.base_url, api_key="none", max_retries=0)
    r = await sdk.chat.completions.create(
        model="vllm-3b",
        messages=MSGS,  # type: ignore[arg-type]
        max_completion_tokens=64,
        extra_body={"ignore_eos": True},
    )
    assert r.usage and r.usage.completion_tokens == 64 and r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens_details is not None  # (0 or more: the module's server)
    stream = await sdk.chat.completions.create(
        model="vllm-3b",
        messages=MSGS,  # type: ignore[arg-type]
        max_tokens=32,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = [c async for c in stream]
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 32
    usage = chunks[-1].usage
    assert usage and usage.completion_tokens == 32
    # MSGS again: its full blocks but the one holding the last token come from the prefix
    # cache, (prompt - 1) // 16 of them, as vLLM counts them
    assert usage.prompt_tokens_details
    assert usage.prompt_tokens_details.cached_tokens == (usage.prompt_tokens - 1) // 16 * 16 > 0


async def test_served_model_name_lists_and_answers_every_name() -> None:
    names = ["/models/Llama-3.2-3B-Instruct", "llama"]
    with start_sim_server("instant", served_model_name=names) as h:
        sdk = openai.AsyncOpenAI(base_url=h.base_url, api_key="none", max_retries=0)
        assert [m.id for m in (await sdk.models.list()).data] == names
        r = await sdk.chat.completions.create(model="llama", messages=MSGS)  # type: ignore[arg-type]
        assert r.model == "llama"
        with pytest.raises(openai.NotFoundError):
            await sdk.chat.completions.create(model="sim/instant", messages=MSGS)  # type: ignore[arg-type]
        async with aiohttp.ClientSession() as s, s.get(h.base_url[:-3] + "/metrics") as resp:
            text = await resp.text()
    assert f'model_name="{names[0]}"' in text


def _buckets(text: str, name: str) -> list[float]:
    les = re.findall(rf'^{re.escape(name)}_bucket{{[^}}]*le="([^"]+)"', text, re.M)
    return [float(x) for x in les if x != "+Inf"]


def _sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_metrics_are_vllm_v1s_set_labels_and_buckets() -> None:
    with start_sim_server("vllm-3b", seed=0, overhead_s=0.02, decode_tps=2000) as h:
        await _post(h, sim_completion_tokens=20)
        await _post(h, tools=TOOLS, tool_choice="required")
        await _post(h, ignore_eos=True, max_tokens=8)
        async with aiohttp.ClientSession() as s, s.get(h.base_url[:-3] + "/metrics") as resp:
            text = await resp.text()
    kinds = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:num_preemptions_total": "counter",
        "vllm:prompt_tokens_total": "counter",
        "vllm:generation_tokens_total": "counter",
        "vllm:request_success_total": "counter",
        "vllm:prefix_cache_queries_total": "counter",
        "vllm:prefix_cache_hits_total": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:request_time_per_output_token_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
        "vllm:request_prefill_time_seconds": "histogram",
        "vllm:request_decode_time_seconds": "histogram",
        "vllm:request_inference_time_seconds": "histogram",
        "vllm:request_prompt_tokens": "histogram",
        "vllm:request_generation_tokens": "histogram",
        "vllm:request_params_max_tokens": "histogram",
    }
    for name, kind in kinds.items():
        assert f"# TYPE {name} {kind}" in text, name
    # every vllm: sample carries model_name and engine, as vLLM's PrometheusStatLogger
    samples = [ln for ln in text.splitlines() if ln.startswith("vllm:")]
    assert samples and all(
        'engine="0"' in ln and 'model_name="sim/vllm-3b"' in ln for ln in samples
    )
    # vLLM v1's buckets
    assert _buckets(text, "vllm:time_to_first_token_seconds")[-3:] == [160.0, 640.0, 2560.0]
    assert _buckets(text, "vllm:e2e_request_latency_seconds")[-4:] == [480.0, 960.0, 1920.0, 7680.0]
    assert _buckets(text, "vllm:inter_token_latency_seconds")[-1] == 80.0
    assert _buckets(text, "vllm:request_prompt_tokens") == build_1_2_5_buckets(131072)
    # finish reasons as vLLM's engine names them: the tool call is a "stop", never "tool_calls"
    assert "tool_calls" not in text and "_created" not in text
    assert _sample(text, "vllm:request_success_total", finished_reason="length") >= 1
    assert _sample(text, "vllm:request_success_total", finished_reason="stop") >= 2
    # one inter-token observation per token interval: 19 + 7 + the tool call's
    itl = _sample(text, "vllm:inter_token_latency_seconds_count")
    gen = _sample(text, "vllm:generation_tokens_total")
    assert itl == gen - 3
    assert _sample(text, "vllm:request_decode_time_seconds_count") == 3
    assert _sample(text, "vllm:prefix_cache_queries_total") == _sample(
        text, "vllm:prompt_tokens_total"
    )


def test_every_simulator_override_is_a_typed_request_field() -> None:
    fields = {f for f in ChatCompletionRequest.model_fields if f.startswith("sim_")}
    assert fields == set(SIM_OVERRIDES)


async def test_model_cards_version_and_ping_answer_as_vllms() -> None:
    names = ["/models/Llama-3.2-3B-Instruct", "llama"]
    with start_sim_server("instant", served_model_name=names, max_model_len=8192) as h:
        root = h.base_url[:-3]
        sdk = openai.AsyncOpenAI(base_url=h.base_url, api_key="none", max_retries=0)
        cards = [m.model_dump() for m in (await sdk.models.list()).data]
        one = (await sdk.models.retrieve("llama")).model_dump()
        async with aiohttp.ClientSession() as s:
            async with s.get(root + "/version") as resp:
                assert resp.status == 200
                version = await resp.json()
            for method in (s.get, s.post):
                async with method(root + "/ping") as resp:
                    assert resp.status == 200
    for card in [*cards, one]:
        # vLLM's ModelCard: the served names share the model's root, its context, one permission
        assert card["owned_by"] == "vllm" and card["root"] == names[0]
        assert card["parent"] is None and card["max_model_len"] == 8192
        assert card["permission"][0]["object"] == "model_permission"
    assert [c["id"] for c in cards] == names and one["id"] == "llama"
    assert version["version"] == agentlab.__version__
