"""The OpenAI chat-completion replies of ``sim-serve``: a whole completion, or an SSE stream
of chunks as vLLM sends them (one per ``tokens_per_chunk`` tokens, an optional usage chunk,
``[DONE]``), with vLLM's finish reasons and usage (cached prompt tokens included).

Split out of :mod:`agentlab.llm.sim_serve`, which validates requests, routes and runs the
server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from typing import Any

from aiohttp import web

from agentlab.llm.serve_metrics import ServeMetrics, cached_tokens, metrics_finish_reason
from agentlab.llm.sim_backend import SimResult, SimServer

__all__: list[str] = []


@dataclasses.dataclass(frozen=True, slots=True)
class _Reply:
    """What a streamed reply says besides the simulated result."""

    rid: str
    created: int
    model: str
    named_tool: bool  # tool_choice named a function: vLLM ends with "stop", not "tool_calls"
    include_usage: bool
    continuous_usage: bool  # stream_options.continuous_usage_stats (vLLM)
    max_tokens: int | None
    tokens_per_chunk: int


async def _stream(
    request: web.Request,
    server: SimServer,
    metrics: ServeMetrics,
    res: SimResult,
    reply: _Reply,
) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    base = {"id": reply.rid, "object": "chat.completion.chunk", "created": reply.created}
    base["model"] = reply.model
    model_id = reply.model

    async def send(obj: Any) -> None:
        await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

    try:
        if res.tool_calls:
            await server.wait(res, model_id)  # the arguments are whole once generated
            calls = [
                {"index": i, "id": c[0], "type": "function"}
                | {"function": {"name": c[1], "arguments": c[2]}}
                for i, c in enumerate(res.tool_calls)
            ]
            delta: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
            await send({**base, "choices": [{"index": 0, "delta": delta}]})
        else:
            first = True
            n = res.completion_tokens
            pieces = math.ceil(n / max(1, reply.tokens_per_chunk))
            sent = 0
            async for piece in server.chunks(res, model_id, pieces):
                d: dict[str, Any] = {"content": piece}
                if first:
                    d["role"], first = "assistant", False
                event = {**base, "choices": [{"index": 0, "delta": d}]}
                sent += 1
                if reply.continuous_usage:  # tokens so far, as vLLM counts them per chunk
                    done = min(n, round(n * sent / pieces))
                    event["usage"] = _usage(res, done)
                await send(event)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:  # a simulated fault mid-stream: end the stream without [DONE]
        return resp
    finish = _finish_reason(res, reply.named_tool)
    await send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if reply.include_usage:
        await send({**base, "choices": [], "usage": _usage(res)})
    await resp.write(b"data: [DONE]\n\n")
    metrics.finished(res, reply.max_tokens)
    return resp


def _usage(res: SimResult, completion: int | None = None) -> dict[str, Any]:
    n = res.completion_tokens if completion is None else completion
    return {
        "prompt_tokens": res.prompt_tokens,
        "completion_tokens": n,
        "total_tokens": res.prompt_tokens + n,
        "prompt_tokens_details": {"cached_tokens": cached_tokens(res)},
    }


def _finish_reason(res: SimResult, named_tool: bool) -> str:
    """The reply's finish reason as vLLM's chat API gives it: ``tool_calls`` when the
    model chose to call tools (``auto`` / ``required``); a named ``tool_choice`` is guided
    decoding there, ending ``stop`` (or ``length``)."""
    if res.tool_calls and not named_tool:
        return "tool_calls"
    return metrics_finish_reason(res)


def _completion(
    res: SimResult, rid: str, created: int, model: str, named_tool: bool
) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": res.text or None}
    finish = _finish_reason(res, named_tool)
    if res.tool_calls:
        msg["tool_calls"] = [
            {"id": c[0], "type": "function", "function": {"name": c[1], "arguments": c[2]}}
            for c in res.tool_calls
        ]
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
        "usage": _usage(res),
    }
