"""The lean path's own HTTP/1.1 client (``agentlab.llm.http1``) against real sockets.

A scripted asyncio TCP server plays the misbehaving server each test needs (byte-by-byte
chunks, resets mid-stream, idle closes, stalls, bodies read until close, gzip, garbage);
sim-serve checks that both HTTP clients (httptools and aiohttp) give identical records.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import shutil
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agentlab.errors import ConfigError, LLMError, LLMTimeoutError, ProviderError
from agentlab.llm import LLMClient, http1, openai_http
from tests.llm.serve_helpers import MSGS, TOOLS, quick_vllm_server

Reply = Callable[[int, asyncio.StreamWriter], Awaitable[bool]]


class Scripted:
    """A real HTTP server on 127.0.0.1 whose replies a test scripts, request by request.

    ``reply(n, writer)`` answers the n-th request (1-based) and returns whether to keep the
    connection open for another request.
    """

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.connections = 0
        self.requests = 0
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        for t in self._tasks:  # a handler still stalling: end it before the loop does
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                m = re.search(rb"content-length: *(\d+)", head, re.I)
                self.bodies.append(await reader.readexactly(int(m.group(1)) if m else 0))
                self.requests += 1
                self.heads.append(head)
                if not await self.reply(self.requests, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)


TEXTS = ["Hello", ", ", "world", "!"]


def completion(text: str = "Hello, world!") -> bytes:
    msg = {"role": "assistant", "content": text}
    body = {"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]}
    body["usage"] = {"prompt_tokens": 5, "completion_tokens": 7}
    return json.dumps(body).encode()


def sse(texts: list[str] = TEXTS, end: bool = True) -> bytes:
    events: list[Any] = [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in texts]
    if end:
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        events.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7}})
    out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return out + (b"data: [DONE]\n\n" if end else b"")


def head(status: int = 200, **fields: str) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{k.replace('_', '-')}: {v}" for k, v in fields.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def json_reply(body: bytes, **fields: str) -> bytes:
    return (
        head(200, Content_Type="application/json", Content_Length=str(len(body)), **fields) + body
    )


def stream_head() -> bytes:
    return head(200, Content_Type="text/event-stream", Transfer_Encoding="chunked")


def _client(url: str, **kw: Any) -> LLMClient:
    kw.setdefault("max_retries", 0)
    return LLMClient("openai/m", base_url=url, seed=0, transport="lean", **kw)


@pytest.fixture(autouse=True)
def _fresh_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    # the HTTP client is chosen once per base URL; every test starts undecided
    monkeypatch.setattr(openai_http, "_TARGETS", {})
    for var in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                "all_proxy", "NO_PROXY", "no_proxy", openai_http.HTTP_ENV):  # fmt: skip
        monkeypatch.delenv(var, raising=False)


async def test_keep_alive_reuses_one_connection_and_drops_idle_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def reply(n: int, w: asyncio.StreamWriter) -> bool:
        if n % 2:
            w.write(json_reply(completion()))
        else:  # the final chunk marker on its own write, as aiohttp servers send it
            w.write(stream_head() + chunk(sse()))
            await w.drain()
            await asyncio.sleep(0.01)
            w.write(b"0\r\n\r\n")
        return True

    async with Scripted(reply) as srv:
        c = _client(srv.url)
        for _ in range(3):
            assert (await c.complete(MSGS)).text == "Hello, world!"
            s = c.stream(MSGS)
            assert [d async for d in s] == TEXTS
            await asyncio.sleep(0.03)  # the last marker arrives after [DONE]
        assert (srv.connections, srv.requests) == (1, 6)
        monkeypatch.setattr(http1, "IDLE_S", 0.0)  # idle too long: a fresh connection
        await c.complete(MSGS)
        assert srv.connections == 2
        assert b"Host: 127.0.0.1:" in srv.heads[0] and b"X-Agentlab-Attempt: 0" in srv.heads[0]


async def test_server_closing_an_idle_keep_alive_connection_costs_no_attempt() -> None:
    async def reply(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(json_reply(completion(f"reply {n}")))
        await w.drain()
        return False  # closes after each answer without saying so (no Connection: close)

    async with Scripted(reply) as srv:
        c = _client(srv.url)
        for n in (1, 2, 3):
            r = await c.complete(MSGS)
            assert r.text == f"reply {n}" and r.record.attempts == 1
            await asyncio.sleep(0.02)  # the close reaches the idle connection
        assert srv.connections == 3


async def test_byte_by_byte_chunked_stream_gives_the_same_deltas_and_record() -> None:
    raw = stream_head() + chunk(sse()[:37]) + chunk(sse()[37:]) + b"0\r\n\r\n"

    async def reply(n: int, w: asyncio.StreamWriter) -> bool:
        for i in range(len(raw)):
            w.write(raw[i : i + 1])
            await w.drain()
        return True

    async with Scripted(reply) as srv:
        s = _client(srv.url).stream(MSGS)
        assert [d async for d in s] == TEXTS
        rec = s.response.record  # type: ignore[union-attr]
        assert (rec.prompt_tokens, rec.completion_tokens, rec.attempts) == (5, 7, 1)
        assert rec.stream and rec.first_token is not None and rec.start <= rec.first_token


async def test_reset_mid_stream_and_cut_bodies_are_retryable_provider_errors() -> None:
    async def reply(n: int, w: asyncio.StreamWriter) -> bool:
        if b'"stream":true' in srv.bodies[-1]:
            w.write(stream_head() + chunk(sse(TEXTS[:2], end=False)))
        else:  # promises 500 bytes, sends 20
            w.write(head(200, Content_Length="500") + completion()[:20])
        await w.drain()
        await asyncio.sleep(0.02)
        w.transport.abort()  # an RST, not a clean close
        return False

    async with Scripted(reply) as srv:
        c = _client(srv.url, max_retries=2)
        got: list[str] = []
        with pytest.raises(ProviderError) as ei:
            async for d in c.stream(MSGS):
                got.append(d)
        assert got == TEXTS[:2]  # delivered text is never retried (it would duplicate)
        assert ei.value.record.attempts == 1 and ei.value.retryable  # type: ignore[attr-defined]
        with pytest.raises(ProviderError, match="closed before the response ended") as ei:
            await c.complete(MSGS)
        assert ei.value.record.attempts == 3  # type: ignore[attr-defined]


async def test_stall_mid_stream_times_out_and_the_connection_is_not_reused() -> None:
    async def reply(n: int, w: asyncio.StreamWriter) -> bool:
        if n == 1:
            w.write(stream_head() + chunk(sse(TEXTS[:1], end=False)))
            await w.drain()
            await asyncio.sleep(5)  # stalls until the client gives up
            return False
        w.write(json_reply(completion()))
        return True

    async with Scripted(reply) as srv:
        c = _client(srv.url, timeout=0.3)
        with pytest.raises(LLMTimeoutError):
            async for _ in c.stream(MSGS):
                pass
        assert (await c.complete(MSGS)).text == "Hello, world!"
        assert srv.connections == 2


async def test_bodies_read_until_close_gzip_and_interim_responses() -> None:
    packed = gzip.compress(completion("zipped"))
    replies = [
        head(200, Connection="close") + completion("until close"),
        json_reply(packed, Content_Encoding="gzip"),
        head(100) + json_reply(completion("after 100")),
    ]

    async def reply(n: int, w: asyncio.StreamWriter) -> bool:
        raw = replies[n - 1]
        step = 1 if n == 2 else len(raw)  # gzip byte by byte: most pieces inflate to b""
        for i in range(0, len(raw), step):
            w.write(raw[i : i + step])
            await w.drain()
            if step == 1:
                await asyncio.sleep(0.001)  # one read per byte on the client's side
        return n != 1  # the first is read until the server closes

    async with Scripted(reply) as srv:
        c = _client(srv.url)
        assert [(await c.complete(MSGS)).text for _ in replies] == [
            "until close",
            "zipped",
            "after 100",
        ]


async def test_garbage_http_bad_sse_json_and_error_bodies() -> None:
    replies = [
        b"SPDY/9 nonsense\r\n\r\n",
        stream_head() + chunk(b"data: {not json\n\n") + b"0\r\n\r\n",
        json_reply(b'{"error": {"message": "slow down"}}').replace(b"200 X", b"429 X"),
        json_reply(b"<html>bad gateway</html>").replace(b"200 X", b"502 X"),
        head(307, Location="http://elsewhere/v1", Content_Length="0"),
    ]

    async def reply(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(replies[n - 1])
        await w.drain()
        return n > 1

    async with Scripted(reply) as srv:
        c = _client(srv.url)
        errors = []
        for i in range(len(replies)):
            with pytest.raises(LLMError) as ei:
                await c.complete(MSGS, stream=i == 1)
            errors.append((type(ei.value).__name__, ei.value.retryable, str(ei.value)))
    assert "malformed HTTP response" in errors[0][2]
    assert "malformed JSON from server" in errors[1][2]
    assert errors[2][:2] == ("RateLimitError", True) and "slow down" in errors[2][2]
    assert errors[3][:2] == ("ProviderError", True) and "HTTP 502" in errors[3][2]
    assert (
        errors[4][:2] == ("ProviderError", False) and "redirects are not followed" in errors[4][2]
    )


async def test_proxy_variables_hand_the_url_to_aiohttp(monkeypatch: pytest.MonkeyPatch) -> None:
    async def reply(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(json_reply(completion()))
        return True

    async with Scripted(reply) as srv:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
        assert openai_http._target(srv.url + "/chat/completions") == "http://127.0.0.1:9"
        with pytest.raises(ProviderError):  # it went to the (dead) proxy
            await _client(srv.url).complete(MSGS)
        assert srv.requests == 0
        monkeypatch.setattr(openai_http, "_TARGETS", {})
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        assert isinstance(openai_http._target(srv.url + "/chat/completions"), http1.Target)
        assert (await _client(srv.url).complete(MSGS)).text == "Hello, world!"
        monkeypatch.setenv(openai_http.HTTP_ENV, "curl")
        with pytest.raises(
            ConfigError, match=r"AGENTLAB_LEAN_HTTP='curl'.*auto, httptools, aiohttp"
        ):
            await _client(srv.url).complete(MSGS)
    with pytest.raises(ValueError, match="line break"):
        http1.encode(http1.Target("http://h/v1"), b"", {"X-Evil": "a\r\nInjected: 1"})


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
async def test_tls_with_a_verified_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts only this one
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)

    async def conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hd = await reader.readuntil(b"\r\n\r\n")
        m = re.search(rb"content-length: *(\d+)", hd, re.I)
        await reader.readexactly(int(m.group(1)) if m else 0)
        writer.write(json_reply(completion("over tls"), Connection="close"))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(conn, "127.0.0.1", 0, ssl=ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        c = _client(f"https://localhost:{port}/v1")
        assert (await c.complete(MSGS)).text == "over tls"
        monkeypatch.delenv("SSL_CERT_FILE")
        for pool in list(http1._POOLS.values()):
            pool.ssl = None  # a fresh CA store without the test's certificate
        with pytest.raises(ProviderError, match="CERTIFICATE_VERIFY_FAILED"):
            await c.complete(MSGS)
    finally:
        server.close()


def _same(rec: dict[str, Any]) -> dict[str, Any]:
    timing = ("request_id", "start", "end", "first_token", "queue_wait", "tries")
    return {k: v for k, v in rec.items() if k not in timing}


async def test_httptools_and_aiohttp_give_identical_records_on_sim_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with quick_vllm_server() as h:
        out: dict[str, list[Any]] = {}
        for http in ("httptools", "aiohttp"):
            monkeypatch.setenv(openai_http.HTTP_ENV, http)
            c = LLMClient("openai/vllm-3b", base_url=h.base_url, seed=0, transport="lean")
            plain = await c.complete(MSGS)
            streams = [c.stream([{"role": "user", "content": f"say {i}"}]) for i in range(8)]

            async def drain(s: Any) -> list[str]:
                return [d async for d in s]

            deltas = await asyncio.gather(*(drain(s) for s in streams))
            tool = await c.complete(MSGS, tools=TOOLS, tool_choice="required", stream=True)
            recs = [plain.record] + [s.response.record for s in streams] + [tool.record]
            out[http] = [deltas, plain.text, tool.tool_calls, [_same(r.to_dict()) for r in recs]]
            assert all(r.ttft is not None and r.ttft > 0 for r in recs[1:])
        assert out["httptools"] == out["aiohttp"]
