"""sim-serve against what vLLM's OpenAI server (0.12) does with a request, over real HTTP:
``stream_options`` (vLLM's defaults, usage in every chunk, its 400 without ``stream``),
``response_format`` on ``/v1/completions`` (structured output there too), ``/health``'s
empty body, token ids past the vocabulary."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from agentlab.llm.sim_serve import SimServeHandle, start_sim_server
from tests.llm.serve_helpers import MSGS, TOOLS

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city", "days"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def server() -> Iterator[SimServeHandle]:
    with start_sim_server("vllm-3b", seed=0, overhead_s=0.02, decode_tps=2000) as h:
        yield h


def _body(path: str, **body: Any) -> dict[str, Any]:
    prompt = {"messages": MSGS} if path == "/chat/completions" else {"prompt": "Say it"}
    return {"model": "vllm-3b", **prompt, **body}


async def _post(h: SimServeHandle, path: str, **body: Any) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(h.base_url + path, json=_body(path, **body)) as r,
    ):
        return r.status, await r.json()


async def _events(h: SimServeHandle, path: str, **body: Any) -> list[dict[str, Any]]:
    """Every SSE event of a streamed reply, parsed, and the stream ended by ``[DONE]``."""
    events, done = [], False
    async with (
        aiohttp.ClientSession() as s,
        s.post(h.base_url + path, json=_body(path, stream=True, **body)) as r,
    ):
        assert r.status == 200, await r.text()
        async for line in r.content:
            if line.strip() == b"data: [DONE]":
                done = True
            elif line.startswith(b"data: "):
                events.append(json.loads(line[6:]))
    assert done
    return events


@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
async def test_stream_options_without_stream_is_refused(server: SimServeHandle, path: str) -> None:
    # vLLM's validate_stream_options: a 400 naming the field (it was ignored: a 200)
    for stream in ({}, {"stream": False}):
        status, r = await _post(server, path, max_tokens=3, stream_options={"include_usage": True},
                                **stream)  # fmt: skip
        assert status == 400, r
        assert r["error"]["param"] == "stream_options"
        assert "Stream options can only be defined when `stream=True`" in r["error"]["message"]
    # an empty object is no options there (vLLM tests the value's truth)
    status, r = await _post(server, path, max_tokens=3, stream_options={})
    assert status == 200, r


@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
async def test_stream_options_take_vllms_defaults(server: SimServeHandle, path: str) -> None:
    # include_usage defaults to true in vLLM's StreamOptions: any stream_options object gets
    # the final usage chunk unless it says false
    for opts in ({}, {"continuous_usage_stats": False}):
        events = await _events(server, path, max_tokens=4, stream_options=opts)
        assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 4
        assert all("usage" not in e for e in events[:-1])
    # continuous usage stats alone: usage in every chunk, and the final usage chunk
    events = await _events(
        server, path, max_tokens=4, stream_options={"continuous_usage_stats": True}
    )
    assert all("usage" in e for e in events)
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 4
    # vLLM sends continuous usage only along with include_usage: off means no usage at all
    for off in (False, None):
        opts = {"include_usage": off, "continuous_usage_stats": True}
        events = await _events(server, path, max_tokens=4, stream_options=opts)
        assert all("usage" not in e for e in events)
        assert all(e["choices"] for e in events)
    # no stream_options: no usage (vLLM's default without --enable-force-include-usage)
    events = await _events(server, path, max_tokens=4)
    assert all("usage" not in e for e in events)


def _matches(value: Any) -> None:
    assert isinstance(value, dict) and set(value) == {"city", "days"}
    assert isinstance(value["city"], str)
    assert isinstance(value["days"], int) and value["days"] >= 1


async def test_text_completion_honours_response_format(server: SimServeHandle) -> None:
    # vLLM's CompletionRequest takes response_format (structured output): the text is JSON
    # of the schema, as on chat (it was ignored: plain words)
    fmt = {"type": "json_schema", "json_schema": {"name": "trip", "schema": SCHEMA}}
    status, r = await _post(server, "/completions", max_tokens=200, response_format=fmt)
    assert status == 200, r
    _matches(json.loads(r["choices"][0]["text"]))
    assert r["choices"][0]["finish_reason"] == "stop"
    events = await _events(server, "/completions", max_tokens=200, response_format=fmt)
    _matches(json.loads("".join(e["choices"][0]["text"] for e in events if e["choices"])))
    status, r = await _post(server, "/completions", max_tokens=200,
                            response_format={"type": "json_object"})  # fmt: skip
    assert status == 200, r
    assert isinstance(json.loads(r["choices"][0]["text"]), dict)
    status, r = await _post(server, "/completions", max_tokens=20,
                            response_format={"type": "text"})  # fmt: skip
    assert status == 200, r
    # a schema the simulator cannot generate is refused naming the field, as on chat
    cyclic = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}
    bad = {"type": "json_schema", "json_schema": {"name": "loop", "schema": cyclic}}
    status, r = await _post(server, "/completions", max_tokens=20, response_format=bad)
    assert status == 400, r
    assert r["error"]["param"] == "response_format"


async def test_continuous_usage_is_in_every_chat_chunk(server: SimServeHandle) -> None:
    # vLLM adds the usage so far to every chunk it sends, a tool call's and the finish
    # reason's too (those had none), the counts rising to the reply's
    opts = {"include_usage": True, "continuous_usage_stats": True}
    for extra in ({}, {"tools": TOOLS, "tool_choice": "required"}):
        events = await _events(server, "/chat/completions", max_tokens=40, stream_options=opts,
                               **extra)  # fmt: skip
        assert all("usage" in e for e in events)
        counts = [e["usage"]["completion_tokens"] for e in events]
        assert counts == sorted(counts) and counts[-1] == counts[-2]
        assert events[-2]["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")
        if extra:
            assert any(e["choices"] and e["choices"][0]["delta"].get("tool_calls") for e in events)


async def test_health_answers_an_empty_body(server: SimServeHandle) -> None:
    # vLLM's /health (and /ping): 200 and no body; it was a JSON object
    async with aiohttp.ClientSession() as s:
        for method, path in (("GET", "/health"), ("GET", "/ping"), ("POST", "/ping")):
            async with s.request(method, f"http://{server.host}:{server.port}{path}") as r:
                assert r.status == 200
                assert await r.read() == b""


async def test_a_token_id_past_the_vocabulary_is_refused(server: SimServeHandle) -> None:
    # vLLM's engine refuses an out-of-vocabulary prompt id with a 400 (it was served);
    # Llama-3's ids run 0..128255
    status, r = await _post(server, "/completions", max_tokens=2, prompt=[128_000, 128_255])
    assert status == 200, r
    for prompt in ([5, 128_256], [[999_999, 5]]):
        status, r = await _post(server, "/completions", max_tokens=2, prompt=prompt)
        assert status == 400, r
        assert r["error"]["param"] == "prompt"
        assert "out of vocabulary" in r["error"]["message"]
