"""The lean HTTP transport against a real sim-serve over HTTP, side by side with litellm."""

from __future__ import annotations

import importlib.util
import socket
import threading
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from agentlab.errors import (
    ConfigError,
    LLMError,
    LLMTimeoutError,
    ProviderError,
    RateLimitError,
)
from agentlab.llm import LLMClient, litellm_backend, openai_http
from agentlab.llm.sim_serve import SimServeHandle, start_sim_server
from tests.llm.serve_helpers import MSGS, TOOLS, Vote, quick_vllm_server

HAVE_LITELLM = importlib.util.find_spec("litellm") is not None
needs_litellm = pytest.mark.skipif(not HAVE_LITELLM, reason="litellm not installed")


def _client(url: str, transport: str, model: str = "openai/vllm-3b", **kw: Any) -> LLMClient:
    kw.setdefault("max_retries", 0)  # sim-serve answers 404 for a model it does not serve
    return LLMClient(model, base_url=url, seed=0, transport=transport, **kw)


@pytest.fixture(scope="module")
def server() -> Iterator[SimServeHandle]:
    with quick_vllm_server() as h:
        yield h


def test_transport_selection_and_bad_values() -> None:
    url = "http://127.0.0.1:1/v1"
    assert LLMClient("openai/m", base_url=url)._transport is openai_http  # auto
    assert LLMClient("hosted_vllm/m", base_url=url)._transport is openai_http
    assert LLMClient("openai/m")._transport is litellm_backend  # no base_url: the cloud
    assert LLMClient("anthropic/claude", base_url=url)._transport is litellm_backend
    assert LLMClient("openai/m", base_url=url, transport="litellm")._transport is litellm_backend
    with pytest.raises(ConfigError, match=r"unknown transport 'fast'.*auto, lean, litellm"):
        LLMClient("openai/m", base_url=url, transport="fast")
    with pytest.raises(ConfigError, match="transport='lean' needs"):
        LLMClient("anthropic/claude", transport="lean")
    with pytest.raises(ConfigError, match="unknown transport 'x'"):
        LLMClient("sim/instant", transport="x")  # checked for simulated models too
    assert LLMClient("sim/instant", transport="litellm")._transport is None  # in process
    c = LLMClient("openai/m", base_url=url, transport="lean")
    assert LLMClient.from_dict(c.to_dict())._transport is openai_http  # survives a round trip


@needs_litellm
async def test_records_match_litellm_plain_stream_structured_tools(server: SimServeHandle) -> None:
    lean, lite = _client(server.base_url, "lean"), _client(server.base_url, "litellm")
    a, b = await lean.complete(MSGS), await lite.complete(MSGS)
    ra, rb = a.record.to_dict(), b.record.to_dict()
    assert list(ra) == list(rb)  # same columns, same order
    for k in ("model", "prompt_tokens", "completion_tokens", "outcome", "attempts", "stream"):
        assert ra[k] == rb[k], k
    assert a.text == b.text and a.finish_reason == b.finish_reason
    assert ra["first_token"] is None and a.record.latency >= 0.2

    s = lean.stream(MSGS)
    deltas = [d async for d in s]
    rec = s.response.record  # type: ignore[union-attr]
    sb = lite.stream(MSGS)
    deltas_b = [d async for d in sb]
    assert deltas == deltas_b and "".join(deltas) == s.response.text  # type: ignore[union-attr]
    assert list(rec.to_dict()) == list(sb.response.record.to_dict())  # type: ignore[union-attr]
    assert rec.stream and rec.completion_tokens > 0
    assert rec.ttft is not None and 0.2 <= rec.ttft < rec.latency  # first non-empty chunk

    v = await lean.complete(MSGS, response_format=Vote)
    assert isinstance(v.parsed, Vote)
    assert v.parsed == (await lite.complete(MSGS, response_format=Vote)).parsed
    t = await lean.complete(MSGS, tools=TOOLS, tool_choice="required")
    assert t.tool_calls and t.tool_calls[0].name == "post" and "text" in t.tool_calls[0].arguments
    ts = await lean.complete(MSGS, tools=TOOLS, tool_choice="required", stream=True)
    assert ts.tool_calls[0].arguments == t.tool_calls[0].arguments
    assert lean.usage.calls == 5 and lean.usage.errors == 0


async def _fail(c: LLMClient, stream: bool = False) -> LLMError:
    with pytest.raises(LLMError) as ei:
        await c.complete(MSGS, stream=stream)
    return ei.value


@pytest.mark.parametrize("transport", ["lean", pytest.param("litellm", marks=needs_litellm)])
async def test_429_retried_and_fed_to_aimd(transport: str) -> None:
    with start_sim_server("instant", seed=0, p_rate_limit=1.0) as h:
        c = _client(h.base_url, transport, model="openai/instant", max_retries=2, aimd_initial=8)
        exc = await _fail(c)
        assert isinstance(exc, RateLimitError)
        rec = exc.record  # type: ignore[attr-defined]
        assert rec.outcome == "rate_limited" and rec.attempts == 3
        # fed to AIMD; three 429s a backoff apart are not a cluster, so no cut (aimd.py)
        assert c.limiter.rate_limited == 3 and c.limit <= 8  # fed; spaced faults are not a cluster
        assert c.usage.errors == 1


@pytest.mark.parametrize("transport", ["lean", pytest.param("litellm", marks=needs_litellm)])
async def test_timeouts_server_504_and_client_deadline(transport: str) -> None:
    # a "timeout" fault that the server reports as HTTP 504 after 0.1 s
    with start_sim_server("instant", seed=0, p_timeout=1.0, hang_s=0.1) as h:
        exc = await _fail(_client(h.base_url, transport, model="openai/instant", max_retries=1))
        assert isinstance(exc, LLMTimeoutError)
        assert exc.record.outcome == "timeout" and exc.record.attempts == 2  # type: ignore[attr-defined]
    # a hang the client's own timeout cuts, plain and streaming
    with start_sim_server("instant", seed=0, p_timeout=1.0, hang_s=2) as h:
        c = _client(h.base_url, transport, model="openai/instant", max_retries=1, timeout=0.3)
        exc = await _fail(c)
        assert isinstance(exc, LLMTimeoutError) and exc.record.attempts == 2  # type: ignore[attr-defined]
        s = c.stream(MSGS)
        delivered: list[str] = []
        with pytest.raises(LLMTimeoutError) as ei:
            async for d in s:
                delivered.append(d)
        rec = ei.value.record  # type: ignore[attr-defined]
        assert rec.outcome == "timeout" and rec.stream
        # a stream that already delivered text is not retried (it would duplicate it)
        assert rec.attempts == (1 if delivered else 2), (delivered, rec)
        assert c.limiter.slow_signals >= 2


@needs_litellm
async def test_malformed_replies_fail_the_same_way_on_both_paths() -> None:
    # malformed structured output from sim-serve's fault flag: client-side validation
    with start_sim_server("instant", seed=0, p_malformed=1.0) as h:
        out = []
        for transport in ("lean", "litellm"):
            c = _client(h.base_url, transport, model="openai/instant", max_retries=1)
            with pytest.raises(LLMError) as ei:
                await c.complete(MSGS, response_format=Vote)
            r = ei.value.record  # type: ignore[attr-defined]
            out.append((type(ei.value), r.outcome, r.attempts))
        assert out[0] == out[1]


class _BadServer:
    """A real HTTP server answering every request with one fixed status and body."""

    def __init__(self, status: int, body: bytes) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.hits = 0
        reply = (
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode() + body
        self._reply = reply
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, rest = data.partition(b"\r\n\r\n")
                n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(rest) < n:
                    rest += conn.recv(65536)
                self.hits += 1
                conn.sendall(self._reply)

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize(
    ("status", "body", "cls", "retried"),
    [
        (200, b"{not json", ProviderError, True),
        (200, b'{"choices": []}', ProviderError, True),
        (500, b'{"error": {"message": "boom"}}', ProviderError, True),
        (400, b'{"error": {"message": "bad model"}}', ProviderError, False),
        (429, b"{}", RateLimitError, True),
    ],
)
async def test_http_errors_map_to_agentlab_classes(
    status: int, body: bytes, cls: type, retried: bool
) -> None:
    srv = _BadServer(status, body)
    try:
        c = _client(srv.url, "lean", max_retries=1)
        exc = await _fail(c)
        assert type(exc) is cls, exc
        assert exc.record.attempts == (2 if retried else 1)  # type: ignore[attr-defined]
        assert srv.hits == exc.record.attempts  # type: ignore[attr-defined]
        if status >= 400 and b"message" in body:
            assert "boom" in str(exc) or "bad model" in str(exc)
    finally:
        srv.close()


def _predicted_faults(seed: int, messages: list[dict[str, Any]], n: int) -> list[str | None]:
    """The fault the simulator draws for attempts 0..n-1 of ``messages`` (in process)."""
    from agentlab.core.clock import RealClock
    from agentlab.llm.sim_backend import SimServer
    from agentlab.llm.sim_profiles import get_profile

    sim = SimServer(get_profile("instant", p_rate_limit=0.5), seed, RealClock())
    return [sim.plan(messages, attempt=k).fault for k in range(n)]


@pytest.mark.parametrize("transport", ["lean", pytest.param("litellm", marks=needs_litellm)])
async def test_retries_send_the_attempt_so_sim_serve_draws_afresh(transport: str) -> None:
    # Over HTTP the server sees only arrivals; our clients send X-Agentlab-Attempt, so the
    # fault of attempt k is the draw of (seed, request, k) whatever else reaches the server.
    seed = 5
    msgs = next(
        m
        for i in range(200)
        if _predicted_faults(seed, m := [{"role": "user", "content": f"probe {i}"}], 3)
        == ["rate_limited", "rate_limited", None]
    )
    with start_sim_server("instant", seed=seed, p_rate_limit=0.5) as h:
        c = _client(h.base_url, transport, model="openai/instant", max_retries=4)
        kinds = []
        for prior in (0, 0, 1):
            # other traffic first (no header), so arrival numbers differ between calls
            async with aiohttp.ClientSession() as s:
                for j in range(3 + prior):
                    other = {"model": "instant", "messages": [{"role": "user", "content": str(j)}]}
                    (await s.post(h.base_url + "/chat/completions", json=other)).release()
            r = await c.complete(msgs, prior_attempts=prior)
            kinds.append([t[1] for t in r.record.tries])
    # the same request, retried: 429 at attempts 0 and 1, a fresh draw (ok) at attempt 2
    assert kinds[0] == kinds[1] == ["rate_limited", "rate_limited", "ok"], kinds
    assert kinds[2] == ["rate_limited", "ok"], kinds  # an agent-step retry counts on
