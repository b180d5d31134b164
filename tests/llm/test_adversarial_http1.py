"""Adversarial: the lean client's own HTTP/1.1 transport (``llm/http1.py``, through
``LLMClient(transport="lean")``) against real local servers that misbehave.

Every case must end in the right answer or an ``LLMError`` of the right retryability,
within the call's timeout: never a hang, never garbage, never a socket left open.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentlab.errors import LLMError, LLMTimeoutError, ProviderError
from tests.llm.test_openai_http_transport import (
    MSGS,
    Reply,
    Scripted,
    _client,
    chunk,
    completion,
    head,
    json_reply,
    sse,
    stream_head,
)

BODY = completion("Hi there")


async def _calls(reply: Reply, n: int, *, stream: bool = False, **kw: Any) -> tuple[Any, ...]:
    """``n`` calls in a row against a scripted server: (outcomes, connections, requests)."""
    async with Scripted(reply) as s:
        c = _client(s.url, **{"timeout": 3.0, **kw})
        out: list[Any] = []
        for _ in range(n):
            try:
                if stream:
                    st = c.stream(MSGS)
                    deltas = [d async for d in st]
                    assert st.response is not None
                    out.append(("".join(deltas), st.response.record.attempts))
                else:
                    r = await c.complete(MSGS)
                    out.append((r.text, r.record.attempts))
            except LLMError as exc:
                out.append(exc)
        return out, s.connections, s.requests


async def test_drained_stream_whose_body_never_ends_is_closed_at_its_deadline() -> None:
    """``[DONE]`` arrives but the server never sends the last chunk nor closes: the
    connection must not stay open past the call's timeout (it used to stay for ever)."""
    closed: list[int] = []

    async def never_ends(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(stream_head() + chunk(sse()))
        await w.drain()
        reader = w.transport.get_protocol()._stream_reader  # type: ignore[attr-defined]
        try:  # the client closing its side reads as EOF here
            assert await asyncio.wait_for(reader.read(1), 5) == b""
            closed.append(n)
        except TimeoutError:
            pass
        return False

    async with Scripted(never_ends) as s:
        c = _client(s.url, timeout=0.5)
        for _ in range(3):
            st = c.stream(MSGS)
            assert "".join([d async for d in st]) == "Hello, world!"  # complete and right
        deadline = time.monotonic() + 3
        while len(closed) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert sorted(closed) == [1, 2, 3] and s.connections == 3, closed


@pytest.fixture
def threaded_server() -> Iterator[Scripted]:
    """A keep-alive server on its own thread and loop, so callers can open and close
    event loops of their own."""
    box: dict[str, Any] = {}
    ready = threading.Event()
    stop: list[asyncio.AbstractEventLoop] = []

    async def keep_alive(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(json_reply(BODY))
        await w.drain()
        return True

    async def main() -> None:
        stop.append(asyncio.get_running_loop())
        async with Scripted(keep_alive) as s:
            box["s"] = s
            ready.set()
            await asyncio.Event().wait()

    t = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    t.start()
    assert ready.wait(10)
    yield box["s"]
    for task in asyncio.all_tasks(stop[0]):
        stop[0].call_soon_threadsafe(task.cancel)
    t.join(10)


def _client_sockets(port: int) -> int:
    """This process's open sockets connected to ``port`` (the client ends, whatever else
    the test session has open): socket inodes of /proc/self/fd found in /proc/net/tcp."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if int(cols[2].rsplit(":", 1)[1], 16) == port:  # remote address: the server
                    inodes.add(cols[9])
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            n += link.startswith("socket:[") and link[8:-1] in inodes
    return n


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.parametrize("http", ["httptools", "aiohttp"])
def test_many_event_loops_closed_without_asyncio_run_leave_no_socket_open(
    threaded_server: Scripted, monkeypatch: pytest.MonkeyPatch, http: str
) -> None:
    """A script's ``loop.run_until_complete(...)`` + ``loop.close()`` per call (no
    ``asyncio.run`` shutdown): each loop's pooled keep-alive socket used to stay open for
    ever (40 loops: +40 client sockets, and the server's 40 ends of them), on both of the
    lean path's HTTP clients."""
    monkeypatch.setenv("AGENTLAB_LEAN_HTTP", http)
    c = _client(threaded_server.url)
    port = int(threaded_server.url.rsplit(":", 1)[1].split("/")[0])
    for _ in range(40):
        loop = asyncio.new_event_loop()
        assert loop.run_until_complete(c.complete(MSGS)).text == "Hi there"
        loop.close()
    asyncio.run(c.complete(MSGS))  # a new loop notices the closed ones
    gc.collect()
    assert _client_sockets(port) <= 1  # was 40: one kept-alive socket per closed loop
    for _ in range(5):  # asyncio.run twice and more (Jupyter-free scripts): no growth
        assert asyncio.run(c.complete(MSGS)).text == "Hi there"
    gc.collect()
    assert _client_sockets(port) <= 1


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_threads_each_opening_and_closing_loops(threaded_server: Scripted) -> None:
    """Eight threads, each making calls in loops of its own (closed without shutdown, or
    by asyncio.run), at once: every call answers, no thread sees another's pool break,
    and the closed loops' sockets are gone once the next loops have started."""
    c = _client(threaded_server.url)
    port = int(threaded_server.url.rsplit(":", 1)[1].split("/")[0])
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for i in range(12):
                if i % 3:
                    loop = asyncio.new_event_loop()
                    assert loop.run_until_complete(c.complete(MSGS)).text == "Hi there"
                    loop.close()
                else:
                    assert asyncio.run(c.complete(MSGS)).text == "Hi there"
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    asyncio.run(c.complete(MSGS))
    gc.collect()
    assert _client_sockets(port) <= 8  # measured 0; more only where a sweep met a race


async def test_server_closing_a_reused_connection_as_the_request_arrives() -> None:
    """The keep-alive race: the server drops a reused connection on reading the request,
    without a byte of reply. The request goes out once more on a new connection and the
    call succeeds at its first attempt, at once. A server that drops *new* connections so
    is not retried by the transport: a retryable error, no hang, no loop."""

    async def drop_every_second(n: int, w: asyncio.StreamWriter) -> bool:
        if n % 2 == 0:
            return False  # request read; close without a byte of reply
        w.write(json_reply(BODY))
        await w.drain()
        return True

    t0 = time.monotonic()
    out, conns, reqs = await _calls(drop_every_second, 3)  # max_retries=0
    assert out == [("Hi there", 1)] * 3
    assert (conns, reqs) == (3, 5)  # the two dropped requests were sent again
    assert time.monotonic() - t0 < 1

    async def drop_all(n: int, w: asyncio.StreamWriter) -> bool:
        return False

    out, conns, reqs = await _calls(drop_all, 2)
    assert all(isinstance(o, ProviderError) and o.retryable for o in out), out
    assert (conns, reqs) == (2, 2)  # one request per call: fresh connections are not resent
    assert time.monotonic() - t0 < 2


async def test_framing_variants_give_the_right_answer() -> None:
    """Chunk extensions and trailers, Connection: close, 100 Continue, HTTP/1.0 read until
    close, a UTF-8 body, and a 20 MB body: all answer exactly."""

    async def trailers(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(head(200, Content_Type="application/json", Transfer_Encoding="chunked"))
        half = len(BODY) // 2
        w.write(f'{half:x};ext=1;q="x"\r\n'.encode() + BODY[:half] + b"\r\n")
        w.write(chunk(BODY[half:]) + b"0\r\nX-Trailer: yes\r\nX-Other: 2\r\n\r\n")
        await w.drain()
        return True

    out, conns, _ = await _calls(trailers, 3)
    assert out == [("Hi there", 1)] * 3 and conns == 1  # kept alive after the trailers

    async def close_each(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(json_reply(BODY, Connection="close"))
        await w.drain()
        return False

    out, conns, _ = await _calls(close_each, 3)
    assert out == [("Hi there", 1)] * 3 and conns == 3

    async def interim_then_10(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await w.drain()
        w.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + BODY)
        await w.drain()
        return False

    out, _, _ = await _calls(interim_then_10, 2)
    assert out == [("Hi there", 1)] * 2

    text = "héllo wörld ünïcødé ✓ " * 3
    big = completion("word " * 4_000_000)  # 20 MB

    async def unicode_and_big(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(json_reply(completion(text) if n == 1 else big))
        await w.drain()
        return True

    out, _, _ = await _calls(unicode_and_big, 2, timeout=20.0)
    assert out[0] == (text, 1) and out[1] == ("word " * 4_000_000, 1)


async def test_broken_replies_are_errors_never_answers() -> None:
    """Partial headers then close or a stall, a short body then close, a body not UTF-8,
    204 / 304 / 301, conflicting framing: an error of the right kind, within the timeout."""

    def once(raw: bytes, *, stall: bool = False) -> Reply:
        async def reply(n: int, w: asyncio.StreamWriter) -> bool:
            w.write(raw)
            await w.drain()
            if stall:
                await asyncio.sleep(30)
            return False

        return reply

    cases: list[tuple[Reply, type[LLMError], bool]] = [
        (once(b"HTTP/1.1 200 OK\r\nContent-Le"), ProviderError, True),
        (once(b"HTTP/1.1 200 OK\r\nContent-Le", stall=True), LLMTimeoutError, True),
        (once(head(200, Content_Length=str(len(BODY) + 10)) + BODY), ProviderError, True),
        (
            once(head(200, Content_Length=str(len(BODY) + 10)) + BODY, stall=True),
            LLMTimeoutError,
            True,
        ),
        (once(json_reply(b'{"choices":[{"message":{"content":"caf\xe9"}}]}')), ProviderError, True),
        (once(head(204)), ProviderError, True),  # no body to parse
        (once(head(304, Content_Length="0")), ProviderError, False),
        (once(head(301, Location="http://elsewhere/", Content_Length="0")), ProviderError, False),
        (
            once(
                head(200, Content_Length=str(len(BODY)), Transfer_Encoding="chunked")
                + chunk(BODY)
                + b"0\r\n\r\n"
            ),
            ProviderError,
            True,
        ),
    ]
    for i, (reply, kind, retryable) in enumerate(cases):
        t0 = time.monotonic()
        out, _, _ = await _calls(reply, 1, timeout=0.5)
        assert isinstance(out[0], kind) and out[0].retryable == retryable, (i, out)
        assert time.monotonic() - t0 < 2, i


async def test_a_close_the_busy_loop_has_not_seen_yet_costs_no_attempt() -> None:
    """The server closes each connection after its answer without saying so; the caller
    does CPU work without yielding before its next call (an agent-step), so the close is
    not yet seen when the connection is reused. The request then meets a closed socket
    before any reply byte: sent again on a new connection, the call still succeeds at its
    first attempt (it used to fail, or cost a retry and its backoff)."""

    async def close_after_each(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(json_reply(completion(f"reply {n}")))
        await w.drain()
        return False

    async with Scripted(close_after_each) as srv:
        c = _client(srv.url)  # max_retries=0: a failed attempt fails the call
        for n in (1, 2, 3, 4):
            t0 = time.monotonic()
            r = await c.complete(MSGS)
            assert r.text == f"reply {n}" and r.record.attempts == 1
            assert time.monotonic() - t0 < 0.3  # no backoff
            time.sleep(0.05)  # busy: the loop does not run, the FIN waits in the kernel
        assert srv.connections == 4


async def test_an_error_event_mid_stream_is_a_retryable_error_not_an_answer() -> None:
    """vLLM reports a request that fails mid-stream as an ``{"error": ...}`` event, then
    ``[DONE]``. The openai SDK (litellm's path) raises on it; the lean client returned the
    text so far as a complete answer (finish "stop"). Now: a retryable ProviderError —
    retried when no text had reached the caller yet (the client's rule for streams)."""

    def event(e: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(e).encode() + b"\n\n"

    def fail_first(text_first: bool) -> Reply:
        async def reply(n: int, w: asyncio.StreamWriter) -> bool:
            if n == 1:
                body = event({"choices": [{"index": 0, "delta": {"content": "Hel"}}]})
                body = body if text_first else b""
                body += event({"error": {"message": "engine died", "code": 500}})
                body += b"data: [DONE]\n\n"
            else:
                body = sse()
            w.write(stream_head() + chunk(body) + b"0\r\n\r\n")
            await w.drain()
            return True

        return reply

    for kw in ({}, {"max_retries": 1}):  # text delivered: never retried (it would repeat)
        out, _, _ = await _calls(fail_first(True), 1, stream=True, **kw)
        assert isinstance(out[0], ProviderError) and out[0].retryable, out
        assert "engine died" in str(out[0])
    out, conns, _ = await _calls(fail_first(False), 1, stream=True, max_retries=1)
    assert out == [("Hello, world!", 2)] and conns == 1  # retried on the kept connection
