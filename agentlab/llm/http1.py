"""A minimal HTTP/1.1 client for the lean path: ``asyncio.Protocol`` + ``httptools``.

Why not aiohttp here: a streamed reply is one socket read per SSE event when the server
writes each token separately (vLLM does, and so does ``agentlab sim-serve``), and aiohttp
spends ~10 µs of Python per read (its payload parser, ``StreamReader``, the iterator) plus
~100 µs per request (``ClientRequest``, header multidicts, cookie jar, tracing). This module
parses with ``httptools`` (llhttp, the C parser uvicorn uses) inside ``data_received`` and
wakes the reader once per read with whatever bytes arrived; the request is one pre-built
``bytes`` write.

What it does: one request at a time per connection, keep-alive pooling per event loop (idle
connections are dropped after :data:`IDLE_S`, below uvicorn's 5 s keep-alive timeout, so a
reused connection is rarely one the server is closing), ``Content-Length``, chunked and
read-until-close bodies, gzip/deflate bodies, TLS through ``ssl=``, and flow control (a
slow consumer pauses the socket). What it does not: proxies (:func:`proxy_for` tells;
:mod:`agentlab.llm.openai_http` then sends through aiohttp and that proxy), redirects (a 3xx is
returned to the caller as a status), HTTP/2, ``Expect: 100-continue``.

Errors are built-in exceptions, which ``openai_http`` maps to ``agentlab.errors``:
``ConnectionResetError`` when the connection closes before the response ends (reset
mid-stream; a reused keep-alive connection the server closed before any reply byte
is sent again on another connection first: the keep-alive race), :class:`HTTPError`
(a ``ConnectionError``) for bytes that are not HTTP, ``OSError`` from connecting; timeouts
``TimeoutError`` past the request's deadline, and cancelling a request closes its
connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import urllib.request
import weakref
import zlib
from urllib.parse import urlsplit

import httptools

__all__ = ["IDLE_S", "HTTPError", "Response", "Target", "encode", "proxy_for", "request"]

#: seconds an idle keep-alive connection is kept for reuse
IDLE_S = 4.0
_HIGH_WATER = 1 << 20  # bytes buffered for a slow reader before the socket is paused
_READ_SIZE = 1 << 16  # bytes per socket read (the connection's one read buffer)


class HTTPError(ConnectionError):
    """The server's bytes are not a valid HTTP/1.1 response."""


def proxy_for(url: str) -> str | None:
    """The proxy the environment routes ``url`` through (``HTTP(S)_PROXY``, ``ALL_PROXY``,
    honouring ``NO_PROXY``), or None — this client does not speak to proxies."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


class Response(asyncio.BufferedProtocol):
    """One keep-alive connection; while a request is in flight, also its response.

    A buffered protocol: the socket is read into one buffer the connection keeps, not
    into a fresh ``bytes`` per read. asyncio's plain protocols ``recv(256 KiB)`` each
    time; a block that size comes from ``mmap`` or the top of the heap, and depending on
    where the heap stands, each read then pays page faults (measured: 2 minor faults and
    ~40-90 us of CPU per read in some processes, none in others).
    """

    def __init__(self, pool: _Pool, key: tuple[str, int, bool]) -> None:
        self._pool = pool
        self._key = key
        self._loop = pool.loop
        self._tr: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[None] | None = None
        self._exc: BaseException | None = None
        self._idle_since = 0.0
        self.reused = False  # has been back in the pool (a request may meet a stale close)
        self._timer: asyncio.TimerHandle | None = None
        self._paused = False
        self._buf = memoryview(bytearray(_READ_SIZE))
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self._seen = False  # a byte of the reply arrived (on_message_begin)
        self._headers_done = False
        self._complete = False
        self._keep = False
        self._framed = False  # Content-Length or chunked: EOF before the end is a cut
        self._parts: list[bytes] = []
        self._size = 0
        self._inflate: zlib._Decompress | None = None
        self._active = False
        self._draining = False  # released after its logical end, the rest is discarded

    # -- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._tr = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buf

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self._buf[:nbytes])  # the parser copies what it keeps

    def data_received(self, data: bytes | memoryview) -> None:
        if not self._active:  # bytes nobody asked for (e.g. a 408 as the server idles out)
            self._fail(HTTPError("unsolicited bytes on an idle connection"))
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            # a callback's own error (e.g. an unsupported encoding) is the better message
            why = exc.__context__ if isinstance(exc, httptools.HttpParserCallbackError) else exc
            self._fail(HTTPError(f"malformed HTTP response: {why or exc}"))

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if self._exc is not None:  # we closed it, for a reason the reader already has
            self._wake()
            return
        if self._active and not self._complete:
            if self._headers_done and not self._framed and exc is None:
                self._complete = True  # read-until-close body: EOF is its end
            else:
                why = f": {exc}" if exc else ""
                self._fail(
                    ConnectionResetError(f"connection closed before the response ended{why}")
                )
                return
        self._exc = self._exc or ConnectionResetError("connection closed")
        self._wake()

    # -- httptools callbacks --------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._seen = True

    def on_header(self, name: bytes, value: bytes) -> None:
        n = name.lower()
        if n == b"content-length" or n == b"transfer-encoding":
            self._framed = True
        elif n == b"content-encoding":
            enc = value.strip().lower()
            if enc in (b"gzip", b"x-gzip"):
                self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
            elif enc == b"deflate":
                self._inflate = zlib.decompressobj()
            elif enc != b"identity":
                raise HTTPError(f"unsupported Content-Encoding {value.decode('latin-1')!r}")

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            return  # an interim response (100 Continue, 103 Early Hints): the real one follows
        self.status = status
        # no wake-up yet: the reader wants the body's first bytes too (a server that sends
        # the headers on their own, as sim-serve does, would otherwise cost one more)
        self._headers_done = True

    def on_body(self, body: bytes) -> None:
        if self.status == 0 or self._draining:
            return
        if self._inflate is not None:
            body = self._inflate.decompress(body)
            if not body:
                return  # b"" from read_some means the end; partial gzip yields nothing yet
        self._parts.append(body)
        self._size += len(body)
        if self._size > _HIGH_WATER and not self._paused and self._tr is not None:
            self._paused = True
            self._tr.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.status == 0:
            return  # end of an interim response
        self._complete = True
        # read here: once this callback returns, llhttp has reset for the next message
        self._keep = self._parser.should_keep_alive()
        if self._draining:
            self._to_pool()
        self._wake()

    # -- the reader's side ----------------------------------------------------------------
    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _expire(self, timeout: float) -> None:
        self._timer = None
        self._fail(TimeoutError(f"no complete response within {timeout} s"))

    def _fail(self, exc: BaseException) -> None:
        self._exc = exc
        if self._tr is not None:
            self._tr.abort()
        self._wake()

    async def _wait(self) -> None:
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def _start(self, raw: bytes) -> None:
        assert self._tr is not None
        self._active = True
        self._tr.write(raw)
        while not (self._headers_done and (self._parts or self._complete)):
            if self._exc is not None:
                raise self._exc
            await self._wait()

    async def read_some(self) -> bytes:
        """The body bytes that arrived since the last call (waiting for some); ``b""`` at
        the end of the body.

        Raises:
            ConnectionResetError: the connection closed before the body ended.
            HTTPError: the server sent bytes that are not HTTP.
        """
        while True:
            parts = self._parts
            if parts:
                data = parts[0] if len(parts) == 1 else b"".join(parts)
                parts.clear()
                self._size = 0
                if self._paused and self._tr is not None:
                    self._paused = False
                    self._tr.resume_reading()
                return data
            if self._complete:
                if self._inflate is not None:
                    tail, self._inflate = self._inflate.flush(), None
                    if tail:
                        return tail
                return b""
            if self._exc is not None:
                raise self._exc
            await self._wait()

    async def read(self) -> bytes:
        """The whole (rest of the) body."""
        out = []
        while data := await self.read_some():
            out.append(data)
        return b"".join(out)

    def release(self, drain: bool = False) -> None:
        """Back to the pool if the response was read to its end and the server keeps the
        connection alive; otherwise close it (a cancelled or failed request).

        ``drain=True``: the caller has seen the body's logical end (an SSE ``[DONE]``)
        before its framing ended; the connection goes back to the pool once the rest
        (the last chunk marker, usually a read of its own) has arrived, without waking
        the caller for it.
        """
        tr = self._tr
        ok = self._exc is None and tr is not None and not tr.is_closing()
        if ok and not self._complete and drain:
            # the deadline timer stays: a server that never ends the body (no last chunk,
            # no close) must not hold this socket open for ever
            self._draining = True
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if ok and self._complete:
            self._to_pool()
        else:
            self._reset()
            if tr is not None:
                tr.close()

    def _to_pool(self) -> None:
        if self._timer is not None:  # a drained response: its deadline no longer applies
            self._timer.cancel()
            self._timer = None
        keep = self._keep
        self._reset()
        if keep:
            self._idle_since = self._loop.time()
            self.reused = True
            self._pool.idle.setdefault(self._key, []).append(self)
        elif self._tr is not None:
            self._tr.close()


class _Pool:
    """Idle connections of one event loop, by (host, port, tls)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.idle: dict[tuple[str, int, bool], list[Response]] = {}
        self.ssl: ssl.SSLContext | None = None

    async def get(self, host: str, port: int, tls: bool, deadline: float) -> Response:
        key = (host, port, tls)
        stack = self.idle.get(key)
        now = self.loop.time()
        while stack:
            conn = stack.pop()
            tr = conn._tr
            if conn._exc is None and tr is not None and not tr.is_closing():
                if now - conn._idle_since < IDLE_S:
                    return conn
                tr.close()
        ctx = None
        if tls:
            if self.ssl is None:  # ~1 ms to load the CA store: once per loop
                self.ssl = ssl.create_default_context()
            ctx = self.ssl
        connect = self.loop.create_connection(
            lambda: Response(self, key), host, port, ssl=ctx, server_hostname=host if tls else None
        )
        _, conn = await asyncio.wait_for(connect, max(0.0, deadline - now))
        return conn

    def close(self) -> None:
        for stack in self.idle.values():
            for conn in stack:
                if conn._tr is not None:
                    conn._tr.close()
        self.idle.clear()


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = weakref.WeakKeyDictionary()
_TASKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
    weakref.WeakKeyDictionary()
)


async def _keep(pool: _Pool) -> None:
    # Parked until the loop shuts down (asyncio.run cancels it), then closes idle sockets
    # so no "unclosed transport" warning is left behind.
    try:
        await pool.loop.create_future()
    finally:
        pool.close()
        # the entries refer to their loop (the weak key): drop them, or no loop is freed
        _POOLS.pop(pool.loop, None)
        _TASKS.pop(pool.loop, None)


def _drop_closed_loops() -> None:
    """Forget the pools of loops closed without ``asyncio.run``'s shutdown (a script's
    ``loop.run_until_complete(...)`` then ``loop.close()``): their parked task never runs,
    so without this each such loop, and its idle sockets, stayed alive for ever."""
    try:
        closed = [lp for lp in _POOLS if lp.is_closed()]
    except RuntimeError:  # another thread's loop came or went meanwhile: next time, then
        return
    for loop in closed:
        pool = _POOLS.pop(loop, None)
        if pool is None:  # dropped by another thread
            continue
        task = _TASKS.pop(loop, None)
        if task is not None:  # it never runs: no "destroyed but pending" report
            with contextlib.suppress(AttributeError):  # a task class without the flag
                task._log_destroy_pending = False  # type: ignore[attr-defined]
        for stack in pool.idle.values():
            for conn in stack:
                tr = conn._tr
                sock = tr.get_extra_info("socket") if tr is not None else None
                if sock is not None:
                    # the loop cannot close the transport any more: end the TCP connection
                    # now; the file descriptor closes with the unreferenced transport
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
        pool.idle.clear()


def _pool() -> _Pool:
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None:
        _drop_closed_loops()  # once per new loop: cheap, and where a closed one is noticed
        pool = _POOLS[loop] = _Pool(loop)
        _TASKS[loop] = loop.create_task(_keep(pool), name="agentlab-lean-http1")
    return pool


class Target:
    """A parsed base URL: where to connect and the request line's path prefix."""

    __slots__ = ("host", "path", "port", "tls")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(
                f"unsupported URL scheme {parts.scheme!r} in {url!r}; valid: http, https"
            )
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.tls else 80)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def encode(target: Target, body: bytes, headers: dict[str, str]) -> bytes:
    """The request's bytes: ``POST`` with ``body`` and ``headers``.

    Raises:
        ValueError: a header name or value contains CR or LF (header injection).
    """
    host = target.host if ":" not in target.host else f"[{target.host}]"
    default_port = 443 if target.tls else 80
    hostport = host if target.port == default_port else f"{host}:{target.port}"
    lines = [f"POST {target.path} HTTP/1.1", f"Host: {hostport}", f"Content-Length: {len(body)}"]
    for k, v in headers.items():
        if "\r" in k or "\n" in k or "\r" in v or "\n" in v:
            raise ValueError(f"HTTP header {k!r} contains a line break")
        lines.append(f"{k}: {v}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1") + body


async def request(target: Target, raw: bytes, timeout: float) -> Response:
    """Send ``raw`` (from :func:`encode`) and wait for the response's status line and
    headers, and its first body bytes (or its end). The caller reads the body and must
    call :meth:`Response.release`.

    ``timeout`` (seconds) bounds the whole exchange, connecting included, up to the end of
    the body or the release: past it the connection closes and the waiting read raises
    ``TimeoutError``. One timer on the loop, not ``asyncio.timeout`` (which costs ~5 µs
    per call in cancelling machinery).
    """
    pool = _pool()
    deadline = pool.loop.time() + timeout
    while True:
        try:
            conn = await pool.get(target.host, target.port, target.tls, deadline)
        except TimeoutError:
            raise TimeoutError(
                f"connecting to {target.host}:{target.port} took over {timeout} s"
            ) from None
        conn._timer = pool.loop.call_at(deadline, conn._expire, timeout)
        try:
            await conn._start(raw)
        except ConnectionResetError:
            # The keep-alive race: a kept-alive connection the server closed as it was
            # reused (its close not yet seen, e.g. while the loop was busy) ends before a
            # byte of reply. The server answered nothing: send it again on another
            # connection, as HTTP clients do, instead of failing the attempt. Each pass
            # takes an idle connection or a new one, which is never retried: it ends.
            stale = conn.reused and not conn._seen
            conn.release()  # not complete: closes it
            if stale:
                continue
            raise
        except BaseException:
            conn.release()  # not complete: closes it
            raise
        return conn
