"""A lean HTTP path to OpenAI-compatible servers (vLLM, llama.cpp, ``agentlab sim-serve``).

litellm spends ~2 ms of client CPU per call (provider resolution, pydantic response
objects, logging hooks, cost lookup) before and after the bytes move; against a local
server that is most of a call's client cost. This module sends the same request body that
the litellm path builds (:func:`agentlab.llm.litellm_backend._kwargs`, so parameters,
``response_format`` modes, tools and the seed are identical) with one pooled
``aiohttp`` session per event loop and parses replies with ``orjson``. It returns the
simulator's :class:`~agentlab.llm.sim_backend.SimResult`, so the client's retry loop,
limiter and call records treat both paths alike.

HTTP failures map to the classes litellm's path produces (see ``map_exception``): 429 →
``RateLimitError``; 408, 504 and the client timeout → ``LLMTimeoutError``; other 4xx →
``ProviderError`` (not retryable); 5xx, connection failures, malformed JSON and streams cut
before their end → ``ProviderError`` (retryable).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson

from agentlab.errors import ConfigError, LLMError, LLMTimeoutError, ProviderError, RateLimitError
from agentlab.llm.litellm_backend import _kwargs
from agentlab.llm.sim_backend import SimResult

if TYPE_CHECKING:
    import aiohttp

__all__ = ["LEAN_PREFIXES", "TRANSPORTS", "acall", "astream", "lean_eligible", "map_status"]

#: model prefixes that name an OpenAI-compatible server (the prefix is not sent)
LEAN_PREFIXES = ("openai/", "hosted_vllm/")
TRANSPORTS = ("auto", "lean", "litellm")
# keys of the litellm kwargs that are transport options, not request-body fields
_NOT_BODY = (
    "model", "api_base", "api_key", "timeout", "num_retries", "max_retries", "extra_headers"
)  # fmt: skip


def lean_eligible(model: str, base_url: str | None, transport: str) -> bool:
    """Whether a call of ``model`` goes through this module rather than litellm.

    Raises:
        ConfigError: ``transport`` is unknown, or ``"lean"`` for a model it cannot serve.
    """
    if transport not in TRANSPORTS:
        raise ConfigError(f"unknown transport {transport!r}; valid: {', '.join(TRANSPORTS)}")
    ok = bool(base_url) and model.startswith(LEAN_PREFIXES)
    if transport == "lean" and not ok:
        raise ConfigError(
            f"transport='lean' needs an {' or '.join(LEAN_PREFIXES)} model and a base_url, "
            f"got model={model!r}, base_url={base_url!r}"
        )
    return ok and transport != "litellm"


# One session per event loop: aiohttp sessions are bound to the loop that made them.
_SESSIONS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, Any]] = (
    weakref.WeakKeyDictionary()
)


async def _keep(session: aiohttp.ClientSession) -> None:
    # Parked until the loop shuts down: asyncio.run cancels it while the loop still runs,
    # so the session closes cleanly instead of warning "Unclosed client session".
    try:
        await asyncio.get_running_loop().create_future()
    finally:
        await session.close()


def _session() -> aiohttp.ClientSession:
    loop = asyncio.get_running_loop()
    entry = _SESSIONS.get(loop)
    if entry is None or entry[0].closed:
        import aiohttp  # here, so that choosing a transport does not import it

        # limit=0: the client's limiter already bounds concurrency per config
        conn = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        session = aiohttp.ClientSession(connector=conn)
        entry = (session, loop.create_task(_keep(session), name="agentlab-lean-http"))
        _SESSIONS[loop] = entry
    return entry[0]


def _request(kw: dict[str, Any], stream: bool) -> tuple[str, bytes, dict[str, str]]:
    lk = _kwargs(**kw)
    base = lk["api_base"].rstrip("/")
    model = lk["model"].split("/", 1)[1]
    body = {k: v for k, v in lk.items() if k not in _NOT_BODY}
    body["model"] = model
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    key = lk.get("api_key") or "sk-none"  # local servers ignore the key
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    headers.update(lk.get("extra_headers") or {})  # the attempt header (ATTEMPT_HEADER)
    return f"{base}/chat/completions", orjson.dumps(body), headers


def map_status(status: int, body: bytes, model: str) -> LLMError:
    """The ``agentlab.errors`` class for an HTTP error reply (as litellm's mapping)."""
    detail = body[:300].decode("utf-8", "replace")
    try:
        err = orjson.loads(body).get("error")
        if isinstance(err, dict) and err.get("message"):
            detail = str(err["message"])[:300]
    except (orjson.JSONDecodeError, AttributeError):
        pass
    msg = f"{model}: HTTP {status}: {detail}"
    if status == 429:
        return RateLimitError(msg)
    if status in (408, 504):
        return LLMTimeoutError(msg)
    out = ProviderError(msg)
    if 400 <= status < 500:
        out.retryable = False  # bad request, auth, unknown model: retrying cannot help
    return out


def _map_exc(exc: BaseException, model: str) -> LLMError:
    if isinstance(exc, LLMError):
        return exc
    msg = f"{model}: {type(exc).__name__}: {str(exc)[:300]}"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return LLMTimeoutError(msg)
    return ProviderError(msg)  # connection refused/reset, payload errors: retryable


def _malformed(model: str, raw: bytes) -> ProviderError:
    return ProviderError(f"{model}: malformed JSON from server: {raw[:200]!r}")


def _usage(obj: dict[str, Any]) -> tuple[int, int]:
    u = obj.get("usage") or {}
    return int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)


async def acall(clock: Any, **kw: Any) -> SimResult:
    """One non-streaming attempt (same keyword arguments as the litellm backend's)."""
    url, body, headers = _request(kw, stream=False)
    model = kw["model"]
    t0 = clock.now()
    try:
        async with asyncio.timeout(kw["timeout"]):
            async with _session().post(url, data=body, headers=headers) as resp:
                raw = await resp.read()
                status = resp.status
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise _map_exc(exc, model) from exc
    if status >= 400:
        raise map_status(status, raw, model)
    t1 = clock.now()
    try:
        obj = orjson.loads(raw)
        choice = obj["choices"][0]
        msg = choice["message"]
        calls = [
            (tc.get("id") or f"call_{i}", tc["function"]["name"], tc["function"]["arguments"])
            for i, tc in enumerate(msg.get("tool_calls") or [])
        ]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
        raise _malformed(model, raw) from None
    p_tok, c_tok = _usage(obj)
    return SimResult(
        msg.get("content") or "",
        p_tok,
        c_tok,
        t0,
        None,
        t1,
        t1,
        finish_reason=choice.get("finish_reason") or "stop",
        tool_calls=[(i, n, a or "{}") for i, n, a in calls],
    )


async def astream(clock: Any, holder: list[SimResult], **kw: Any) -> AsyncIterator[str]:
    """Stream text deltas over SSE; the final result is appended to ``holder``.

    Time to first token = the first chunk with non-empty ``delta.content``.
    """
    url, body, headers = _request(kw, stream=True)
    model = kw["model"]
    t0 = clock.now()
    first: float | None = None
    parts: list[str] = []
    calls: dict[int, list[str]] = {}
    p_tok = c_tok = 0
    finish: str | None = None
    done = False
    try:
        async with asyncio.timeout(kw["timeout"]):
            async with _session().post(url, data=body, headers=headers) as resp:
                if resp.status >= 400:
                    raise map_status(resp.status, await resp.read(), model)
                # Whole network reads split here: one await per read, not per SSE line.
                tail = b""
                async for data in resp.content.iter_any():
                    lines = (tail + data).split(b"\n")
                    tail = lines.pop()
                    for line in lines:
                        if not line.startswith(b"data:"):
                            continue  # blank separators, comments, event names
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            done = True
                            break
                        try:
                            chunk = orjson.loads(payload)
                        except orjson.JSONDecodeError:
                            raise _malformed(model, payload) from None
                        pt, ct = _usage(chunk)
                        if pt or ct:
                            p_tok, c_tok = pt, ct
                        choices = chunk.get("choices")
                        if not choices:
                            continue
                        ch = choices[0]
                        finish = ch.get("finish_reason") or finish
                        delta = ch.get("delta") or {}
                        for tc in delta.get("tool_calls") or ():
                            slot = calls.setdefault(tc.get("index") or 0, ["", "", ""])
                            slot[0] = tc.get("id") or slot[0]
                            fn = tc.get("function") or {}
                            slot[1] = fn.get("name") or slot[1]
                            slot[2] += fn.get("arguments") or ""
                        text = delta.get("content")
                        if text:
                            if first is None:
                                first = clock.now()
                            parts.append(text)
                            yield text
                    if done:
                        break
    except BaseException as exc:
        if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
            raise
        raise _map_exc(exc, model) from exc
    if not done and finish is None:  # the server cut the stream (e.g. a fault mid-decode)
        raise ProviderError(f"{model}: stream ended before its finish (no [DONE])")
    t1 = clock.now()
    res = SimResult(
        "".join(parts), p_tok, c_tok, t0, None, first or t1, t1, finish_reason=finish or "stop"
    )
    res.tool_calls = [(c[0] or f"call_{i}", c[1], c[2] or "{}") for i, c in sorted(calls.items())]
    if not res.completion_tokens:
        res.completion_tokens = max(1, len(res.text) // 4) if res.text else 0
    holder.append(res)
