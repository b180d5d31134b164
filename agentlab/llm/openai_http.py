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
import contextlib
import json
import os
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson

from agentlab.errors import ConfigError, LLMError, LLMTimeoutError, ProviderError, RateLimitError
from agentlab.llm import http1
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
#: the environment variable that picks the HTTP client: "auto" (httptools unless a proxy
#: is configured for the URL), "httptools" or "aiohttp"
HTTP_ENV = "AGENTLAB_LEAN_HTTP"
HTTP_CLIENTS = ("auto", "httptools", "aiohttp")
# (URL, choice) -> the httptools target, or for aiohttp the proxy URL (None: direct).
# Decided once per URL, since reading the proxy variables costs more than a request.
_TARGETS: dict[tuple[str, str], http1.Target | str | None] = {}


async def _keep(session: aiohttp.ClientSession) -> None:
    # Parked until the loop shuts down: asyncio.run cancels it while the loop still runs,
    # so the session closes cleanly instead of warning "Unclosed client session".
    loop = asyncio.get_running_loop()
    try:
        await loop.create_future()
    except asyncio.CancelledError:  # not GeneratorExit: a dropped, never-run _keep has no loop
        _SESSIONS.pop(loop, None)  # the entry refers to its loop: drop it so the loop is freed
        await session.close()
        raise


def _session() -> aiohttp.ClientSession:
    loop = asyncio.get_running_loop()
    entry = _SESSIONS.get(loop)
    if entry is None or entry[0].closed:
        import aiohttp  # here, so that choosing a transport does not import it

        # Loops closed without asyncio.run's shutdown (run_until_complete, then close()):
        # their parked _keep never runs; dropped here, their sessions and sockets can be
        # freed instead of living (and holding a connection open) for ever.
        try:
            closed = [lp for lp in _SESSIONS if lp.is_closed()]
        except RuntimeError:  # another thread's loop came or went meanwhile: next time
            closed = []
        for lp in closed:
            gone = _SESSIONS.pop(lp, None)
            if gone is not None:
                with contextlib.suppress(AttributeError):  # never runs: nothing to report
                    gone[1]._log_destroy_pending = False  # type: ignore[attr-defined]

        # limit=0: the client's limiter already bounds concurrency per config. No
        # trust_env: it re-reads the proxy variables and ~/.netrc on every request (~0.6 ms
        # measured); _target reads the proxy once per URL and passes it.
        conn = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        session = aiohttp.ClientSession(connector=conn)
        entry = (session, loop.create_task(_keep(session), name="agentlab-lean-http"))
        _SESSIONS[loop] = entry
    return entry[0]


def _target(url: str) -> http1.Target | str | None:
    """The httptools target for ``url``; or, where aiohttp sends it, the proxy to use
    (None: none). The choice is made once per URL and process.

    Raises:
        ConfigError: ``AGENTLAB_LEAN_HTTP`` is not one of :data:`HTTP_CLIENTS`.
    """
    choice = os.environ.get(HTTP_ENV) or "auto"
    key = (url, choice)
    try:
        return _TARGETS[key]
    except KeyError:
        pass
    if choice not in HTTP_CLIENTS:
        raise ConfigError(f"{HTTP_ENV}={choice!r} is not valid; valid: {', '.join(HTTP_CLIENTS)}")
    proxy = http1.proxy_for(url)
    target: http1.Target | str | None = proxy
    if choice == "httptools" or (choice == "auto" and proxy is None):
        try:
            target = http1.Target(url)
        except ValueError as exc:
            raise ConfigError(f"base_url: {exc}") from None
    _TARGETS[key] = target
    return target


class _AiohttpReply:
    """aiohttp's response behind :class:`agentlab.llm.http1.Response`'s reading methods,
    each read bounded by the request's deadline (as http1's one timer bounds its reads).

    Per read, not one ``asyncio.timeout`` around the whole stream: a stream's deltas are
    yielded to a consumer running in the same task (``LLMStream``), and a timeout that
    fired while the consumer awaited something of its own would cancel that instead.
    """

    __slots__ = ("_deadline", "_resp", "status")

    def __init__(self, resp: aiohttp.ClientResponse, deadline: float) -> None:
        self._resp = resp
        self._deadline = deadline
        self.status = resp.status

    async def read(self) -> bytes:
        async with asyncio.timeout_at(self._deadline):
            return await self._resp.read()

    async def read_some(self) -> bytes:
        async with asyncio.timeout_at(self._deadline):
            return await self._resp.content.readany()

    def release(self, drain: bool = False) -> None:
        if drain or self._resp.content.at_eof():
            self._resp.release()
        else:
            self._resp.close()


def _prepare(url: str, body: bytes, headers: dict[str, str]) -> tuple[Any, Any]:
    """Which HTTP client sends the request, and what it sends (before any I/O, so that a
    bad setting is a ConfigError rather than a retried provider error)."""
    target = _target(url)
    if not isinstance(target, http1.Target):
        return target, (url, body, headers)
    try:
        return target, http1.encode(target, body, headers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


async def _post(prepared: tuple[Any, Any], timeout: float) -> http1.Response | _AiohttpReply:
    target, req = prepared
    if isinstance(target, http1.Target):
        return await http1.request(target, req, timeout)
    url, body, headers = req  # target: the proxy, or None
    deadline = asyncio.get_running_loop().time() + timeout
    async with asyncio.timeout_at(deadline):
        resp = await _session().post(url, data=body, headers=headers, proxy=target)
    return _AiohttpReply(resp, deadline)


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
    try:
        raw = orjson.dumps(body)
    except TypeError as exc:  # a lone surrogate in a message (orjson.JSONEncodeError)
        # litellm's path fails such a request as a (retryable) provider error too
        raise ProviderError(f"{kw['model']}: request body cannot be sent as JSON: {exc}") from None
    return f"{base}/chat/completions", raw, headers


def _loads(raw: bytes) -> Any:
    """orjson's parse; where it refuses what ``json`` (the litellm / openai SDK path) reads
    — a lone surrogate escape such as ``"\\ud83d"``, ``NaN`` — ``json.loads`` decides."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


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
    if 300 <= status < 400:  # only aiohttp follows redirects; retrying cannot help either
        msg += " (redirects are not followed: set base_url to the final address)"
    out = ProviderError(msg)
    if status < 500:
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
    prepared = _prepare(*_request(kw, stream=False))
    model, timeout = kw["model"], kw["timeout"]
    t0 = clock.now()
    try:
        resp = await _post(prepared, timeout)
        status = resp.status  # before release, which readies the connection's next use
        try:
            raw = await resp.read()
        finally:
            resp.release()
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise _map_exc(exc, model) from exc
    if status >= 300:
        raise map_status(status, raw, model)
    t1 = clock.now()
    try:
        obj = _loads(raw)
        choice = obj["choices"][0]
        msg = choice["message"]
        calls = [
            (tc.get("id") or f"call_{i}", tc["function"]["name"], tc["function"]["arguments"])
            for i, tc in enumerate(msg.get("tool_calls") or [])
        ]
        p_tok, c_tok = _usage(obj)
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError, ValueError):
        raise _malformed(model, raw) from None
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


class _Acc:
    """What a stream has said so far, event by event."""

    __slots__ = ("c_tok", "calls", "finish", "p_tok")

    def __init__(self) -> None:
        self.calls: dict[int, list[str]] = {}
        self.finish: str | None = None
        self.p_tok = self.c_tok = 0

    def event(self, chunk: dict[str, Any]) -> str | None:
        """Take one ``chat.completion.chunk``; its text delta, if any.

        Raises:
            ProviderError: the event is the server's error report (vLLM sends
                ``{"error": {...}}`` when a request fails mid-stream, then ``[DONE]``):
                retryable, as the openai SDK / litellm path raises it; the text so far is
                not a complete answer.
        """
        err = chunk.get("error")
        if err:
            why = err.get("message", err) if isinstance(err, dict) else err
            raise ProviderError(f"server error mid-stream: {str(why)[:300]}")
        u = chunk.get("usage")
        if u:
            pt, ct = int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
            if pt or ct:
                self.p_tok, self.c_tok = pt, ct
        choices = chunk.get("choices")
        if not choices:
            return None
        ch = choices[0]
        self.finish = ch.get("finish_reason") or self.finish
        delta = ch.get("delta")
        if not delta:
            return None
        tcs = delta.get("tool_calls")
        if tcs:
            for tc in tcs:
                slot = self.calls.setdefault(tc.get("index") or 0, ["", "", ""])
                slot[0] = tc.get("id") or slot[0]
                fn = tc.get("function") or {}
                slot[1] = fn.get("name") or slot[1]
                slot[2] += fn.get("arguments") or ""
        content = delta.get("content")
        return content if isinstance(content, str) else None


async def astream(clock: Any, holder: list[SimResult], **kw: Any) -> AsyncIterator[str]:
    """Stream text deltas over SSE; the final result is appended to ``holder``.

    Time to first token = the first chunk with non-empty ``delta.content`` or a tool-call
    delta (vLLM streams a call's arguments as they are generated).
    """
    prepared = _prepare(*_request(kw, stream=True))
    model, timeout = kw["model"], kw["timeout"]
    t0 = clock.now()
    first: float | None = None
    parts: list[str] = []
    acc = _Acc()
    done = False
    try:
        resp = await _post(prepared, timeout)
        try:
            if resp.status >= 300:
                raise map_status(resp.status, await resp.read(), model)
            # Whole network reads split here: one await per read, not per SSE line.
            tail = b""
            while data := await resp.read_some():
                if tail:
                    data = tail + data
                lines = data.split(b"\n")
                tail = lines.pop()
                for line in lines:
                    if line[:5] != b"data:":
                        continue  # blank separators, comments, event names
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        break
                    try:
                        text = acc.event(_loads(payload))
                    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
                        raise _malformed(model, payload) from None
                    except ProviderError as exc:  # the server's error event
                        raise ProviderError(f"{model}: {exc}") from None
                    if first is None and (text or acc.calls):  # a tool call's first piece too
                        first = clock.now()
                    if text:
                        parts.append(text)
                        yield text
                if done:
                    break
        finally:
            resp.release(drain=done)
    except BaseException as exc:
        if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
            raise
        raise _map_exc(exc, model) from exc
    if not done and acc.finish is None:  # the server cut the stream (e.g. a fault mid-decode)
        raise ProviderError(f"{model}: stream ended before its finish (no [DONE])")
    t1 = clock.now()
    finish = acc.finish
    res = SimResult(
        "".join(parts),
        acc.p_tok,
        acc.c_tok,
        t0,
        None,
        first or t1,
        t1,
        finish_reason=finish or "stop",
    )
    calls = acc.calls
    res.tool_calls = [(c[0] or f"call_{i}", c[1], c[2] or "{}") for i, c in sorted(calls.items())]
    if not res.completion_tokens:
        res.completion_tokens = max(1, len(res.text) // 4) if res.text else 0
    holder.append(res)
