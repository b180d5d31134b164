"""Adversarial, differential: the lean client and real litellm against the same scripted
server replies give the same outcome — the same text, finish reason, tokens and tool
calls, or the same ``agentlab.errors`` class with the same retryability.

Two replies are left out on purpose, because the paths differ and neither is wrong: a 422
(litellm: retryable; lean: not, as any other 4xx) and a plain JSON body answering a
stream request (litellm: ``BadResponseError``; lean: a retryable "no [DONE]" error).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agentlab.llm import LLMClient
from tests.llm.test_openai_http_transport import (
    MSGS,
    Scripted,
    chunk,
    completion,
    head,
    json_reply,
    sse,
    stream_head,
)


def _err(code: int, msg: str) -> bytes:
    return json.dumps({"error": {"message": msg, "type": "x", "code": code}}).encode()


def _status(code: int, body: bytes = b"") -> bytes:
    return head(code, Content_Type="application/json", Content_Length=str(len(body))) + body


def _event(e: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(e).encode() + b"\n\n"


TOOL_REPLY = {
    "choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "post", "arguments": '{"text": "hi"}'}}]},
        "finish_reason": "tool_calls"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 2},
}  # fmt: skip
CASES: dict[str, tuple[bytes, bool]] = {
    "ok": (json_reply(completion("fine")), False),
    "429": (_status(429, _err(429, "slow down")), False),
    "500": (_status(500, _err(500, "boom")), False),
    "503-empty": (_status(503), False),
    "504": (_status(504), False),
    "408": (_status(408), False),
    "400": (_status(400, _err(400, "bad")), False),
    "401": (_status(401, _err(401, "key")), False),
    "404": (_status(404, _err(404, "model")), False),
    "null-content": (
        json_reply(
            b'{"choices":[{"message":{"role":"assistant","content":null},"finish_reason":"stop"}]}'
        ),
        False,
    ),
    "no-choices": (json_reply(b'{"choices":[]}'), False),  # litellm raised IndexError
    "html-200": (
        head(200, Content_Type="text/html", Content_Length="13") + b"<html></html>",
        False,
    ),
    "no-usage": (
        json_reply(
            b'{"choices":[{"message":{"role":"assistant","content":"x y"},'
            b'"finish_reason":"length"}]}'
        ),
        False,
    ),
    "cut-emoji": (
        json_reply(
            b'{"choices":[{"message":{"role":"assistant","content":'
            b'"cut \\ud83d"},"finish_reason":"length"}]}'
        ),
        False,
    ),
    "tool-call": (json_reply(json.dumps(TOOL_REPLY).encode()), False),
    "stream": (stream_head() + chunk(sse()) + b"0\r\n\r\n", True),
    "stream-cut": (stream_head() + chunk(sse(end=False)) + b"0\r\n\r\n", True),
    "stream-no-done": (
        stream_head() + chunk(sse()[: -len(b"data: [DONE]\n\n")]) + b"0\r\n\r\n",
        True,
    ),
    "stream-error-event": (
        stream_head()
        + chunk(_event({"error": {"message": "died"}}))
        + chunk(b"data: [DONE]\n\n")
        + b"0\r\n\r\n",
        True,
    ),
    "stream-500": (_status(500, _err(500, "boom")), True),
    "stream-429": (_status(429), True),
}


async def _outcome(transport: str, raw: bytes, stream: bool) -> Any:
    async def reply(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(raw)
        await w.drain()
        return False

    async with Scripted(reply) as srv:
        c = LLMClient("openai/m", base_url=srv.url, seed=0, transport=transport, max_retries=0,
                      api_key_env="AGENTLAB_NO_KEY")  # fmt: skip
        try:
            if stream:
                s = c.stream(MSGS)
                "".join([d async for d in s])
                r = s.response
                assert r is not None
            else:
                r = await c.complete(MSGS)
        except Exception as exc:  # an LLMError of the same class on both paths
            return ("raised", type(exc).__name__, getattr(exc, "retryable", None))
        rec = r.record
        calls = [(t.name, t.arguments) for t in r.tool_calls]
        return (r.text, r.finish_reason, rec.prompt_tokens, rec.completion_tokens, calls)


@pytest.mark.slow  # litellm's import, when it is the first in the session: ~7-10 s
async def test_lean_client_and_litellm_agree_on_every_scripted_reply() -> None:
    diffs = {}
    for name, (raw, stream) in CASES.items():
        lean, lite = await _outcome("lean", raw, stream), await _outcome("litellm", raw, stream)
        if lean != lite:
            diffs[name] = (lean, lite)
        assert lean[0] != "raised" or lean[1] in {
            "RateLimitError", "LLMTimeoutError", "ProviderError", "BadResponseError"
        }, (name, lean)  # fmt: skip
    assert not diffs, diffs
