"""The OpenAI replies of ``sim-serve``, chat and text completions: a whole completion, or an
SSE stream of chunks as vLLM sends them (one per ``tokens_per_chunk`` tokens — a tool
call's arguments too, in pieces as they are generated —, an optional usage chunk,
``[DONE]``), with vLLM's finish reasons and usage (cached prompt tokens
included). A chat stream ends with a chunk of its own carrying the finish reason; a text
stream carries it on its last text chunk, as vLLM's completions stream does.

Split out of :mod:`agentlab.llm.sim_serve`, which validates requests, routes and runs the
server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from agentlab.llm.serve_metrics import ServeMetrics, cached_tokens, metrics_finish_reason
from agentlab.llm.sim_backend import SimResult, SimServer
from agentlab.llm.sim_running import piece_count, split_pieces

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
    resp, send = await _open_sse(request)
    base = {"id": reply.rid, "object": "chat.completion.chunk", "created": reply.created}
    base["model"] = reply.model
    model_id = reply.model
    try:
        if res.tool_calls:
            chunks = math.ceil(res.completion_tokens / max(1, reply.tokens_per_chunk))
            deltas = _tool_call_deltas(res.tool_calls, chunks)
            due = server.due(res, model_id, len(deltas))
            try:
                async for i in due:
                    delta: dict[str, Any] = {"tool_calls": [deltas[i]]}
                    if i == 0:
                        delta = {"role": "assistant", "content": None, **delta}
                    event = {**base, "choices": [{"index": 0, "delta": delta}]}
                    if reply.continuous_usage:  # vLLM: in every chunk, tool calls' too
                        n = res.completion_tokens
                        event["usage"] = _usage(res, min(n, round(n * (i + 1) / len(deltas))))
                    await send(event)
            finally:  # a client gone mid-send: the clock's generator closes with the stream
                await due.aclose()
        else:

            def choice(piece: str, first: bool, last: bool) -> dict[str, Any]:
                d: dict[str, Any] = {"content": piece}
                if first:
                    d["role"] = "assistant"
                return {"index": 0, "delta": d}

            await _send_pieces(send, base, server, res, reply, choice)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:  # a simulated fault mid-stream: end the stream without [DONE]
        return resp
    finish = _finish_reason(res, reply.named_tool)
    last = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    if reply.continuous_usage:  # vLLM's finish chunk carries the usage too
        last["usage"] = _usage(res)
    await send(last)
    return await _close_sse(resp, send, base, res, reply, metrics)


def _tool_call_deltas(calls: list[tuple[str, str, str]], chunks: int) -> list[dict[str, Any]]:
    """The ``delta.tool_calls`` entries of a stream of about ``chunks`` chunks, one per chunk,
    as vLLM streams a tool call while its tokens are generated: a call's first entry names
    it (``index``, ``id``, ``type``, ``function.name``) with the first piece of its
    arguments, the later ones carry the next pieces (``index`` and ``function.arguments``).
    The chunks are shared among the calls by the lengths of their arguments (one at least
    each); concatenated per ``index``, the pieces are each call's arguments."""
    total = sum(len(c[2]) for c in calls) or 1
    out: list[dict[str, Any]] = []
    for i, (cid, name, args) in enumerate(calls):
        k = max(1, min(len(args), round(chunks * len(args) / total)))
        for j, piece in enumerate(split_pieces(args, k)):
            fn = {"name": name, "arguments": piece} if j == 0 else {"arguments": piece}
            head = {"index": i, "id": cid, "type": "function"} if j == 0 else {"index": i}
            out.append({**head, "function": fn})
    return out


async def _text_stream(
    request: web.Request,
    server: SimServer,
    metrics: ServeMetrics,
    res: SimResult,
    reply: _Reply,
) -> web.StreamResponse:
    """A ``/v1/completions`` stream: one chunk per ``tokens_per_chunk`` tokens of text, the
    finish reason on the last of them (vLLM's completions stream has no chunk of its own
    for it, so a client timing every chunk sees no extra one)."""
    resp, send = await _open_sse(request)
    base = {"id": reply.rid, "object": "text_completion", "created": reply.created}
    base["model"] = reply.model
    finish = metrics_finish_reason(res)

    def choice(piece: str, first: bool, last: bool) -> dict[str, Any]:
        return {
            "index": 0,
            "text": piece,
            "logprobs": None,
            "finish_reason": finish if last else None,
        }

    try:
        await _send_pieces(send, base, server, res, reply, choice)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:  # a simulated fault mid-stream: end the stream without [DONE]
        return resp
    return await _close_sse(resp, send, base, res, reply, metrics)


async def _send_pieces(
    send: Callable[[Any], Awaitable[None]],
    base: dict[str, Any],
    server: SimServer,
    res: SimResult,
    reply: _Reply,
    choice: Callable[[str, bool, bool], dict[str, Any]],
) -> None:
    """One event per piece of the reply's text as the engine produces it (``tokens_per_chunk``
    tokens each), its choice built by ``choice(piece, first, last)``; with
    ``continuous_usage_stats`` the tokens so far in each (as vLLM counts them per chunk)."""
    pieces = math.ceil(res.completion_tokens / max(1, reply.tokens_per_chunk))
    last = piece_count(res, pieces)  # what chunks() yields: every piece is sent
    sent = 0
    async for piece in server.chunks(res, reply.model, pieces):
        sent += 1
        event = {**base, "choices": [choice(piece, sent == 1, sent == last)]}
        if reply.continuous_usage:
            n = res.completion_tokens
            event["usage"] = _usage(res, min(n, round(n * sent / pieces)))
        await send(event)


async def _open_sse(
    request: web.Request,
) -> tuple[web.StreamResponse, Callable[[Any], Awaitable[None]]]:
    """The prepared event-stream response and a ``send(event)`` writing one SSE event."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)

    async def send(obj: Any) -> None:
        await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

    return resp, send


async def _close_sse(
    resp: web.StreamResponse,
    send: Callable[[Any], Awaitable[None]],
    base: dict[str, Any],
    res: SimResult,
    reply: _Reply,
    metrics: ServeMetrics,
) -> web.StreamResponse:
    """The end of a completed stream: the usage chunk if asked for, ``[DONE]``, metrics."""
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


def _text_completion(res: SimResult, rid: str, created: int, model: str) -> dict[str, Any]:
    """A whole ``/v1/completions`` reply (``object: text_completion``)."""
    finish = metrics_finish_reason(res)
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": res.text, "logprobs": None, "finish_reason": finish}],
        "usage": _usage(res),
    }
