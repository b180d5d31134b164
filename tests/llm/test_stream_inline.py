"""Streams driven inline by their iterator (no producer task): leaving early frees the slot.

``LLMStream`` runs ``LLMClient._call`` itself, so whatever ends the consumer's loop — an
``aclose``, a ``break``, an error in its body, a cancelled task — must end the attempt with
it: the concurrency slot is free, the connection closed (the server sees the client go) and
nothing of the call keeps running. Checked on a real ``agentlab sim-serve`` process over
HTTP (the lean client) and on the in-process simulator; and a mid-stream error is retried
only before any text reached the consumer, with the same records as litellm's path.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import re
import urllib.request
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from agentlab.core.clock import VirtualClock
from agentlab.errors import LLMTimeoutError, RateLimitError
from agentlab.llm import LLMClient, LLMStream
from tests.llm.serve_helpers import sim_serve_process

MSGS = [{"role": "user", "content": "tell me a long story"}]
# a long free-text answer in many pieces: 400 tokens at 200 tokens/s, 40 SSE events (~2 s)
LONG = ["--set", "completion_median=400", "--set", "completion_sigma=0.01"]
LONG += ["--set", "decode_tps=200", "--set", "tool_call_p=0", "--tokens-per-chunk", "10"]
# background tasks that live as long as their loop, by design (connection pools, clocks)
KEEPERS = ("agentlab-lean-http", "agentlab-virtual-clock")
needs_litellm = pytest.mark.skipif(
    importlib.util.find_spec("litellm") is None, reason="litellm not installed"
)


@pytest.fixture(scope="module")
def long_server() -> Iterator[str]:
    """``agentlab sim-serve`` in its own process, answering with long streams."""
    proc, url = sim_serve_process("vllm-3b", "--seed", "0", *LONG)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def limited_server() -> Iterator[str]:
    """A sim-serve that answers every request with HTTP 429 (before any text)."""
    proc, url = sim_serve_process("vllm-3b", "--seed", "0", "--rate-limit-rate", "1.0")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _cancelled_on_server(url: str) -> float:
    page = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    m = re.search(r'agentlab_sim_faults_total\{kind="cancelled"[^}]*\} (\S+)', page)
    return float(m.group(1)) if m else 0.0


async def _server_saw_cancel(url: str, before: float) -> bool:
    # the server notices the closed connection on its own schedule: poll it (off the loop)
    for _ in range(50):
        if await asyncio.to_thread(_cancelled_on_server, url) > before:
            return True
        await asyncio.sleep(0.1)
    return False


def _left_running() -> set[asyncio.Task[Any]]:
    """Tasks of this loop other than the test, the keepers and litellm's own: its logging
    worker (one per loop, kept whoever calls) and the close of one of its cached httpx2
    clients that its handler's ``__del__`` schedules on whatever loop is running when the
    garbage collector finds a handler of an earlier test (seen under load as a pending
    ``httpx2 AsyncClient.aclose()``); agentlab's transports start no httpx2 task."""
    me = asyncio.current_task()
    out = set()
    for t in asyncio.all_tasks():
        code = str(getattr(t.get_coro(), "cr_code", None))
        if t is me or t.get_name().startswith(KEEPERS) or "litellm" in code or "httpx2" in code:
            continue
        out.add(t)
    return out


def _http(url: str) -> LLMClient:
    return LLMClient("openai/vllm-3b", base_url=url + "/v1", seed=0, transport="lean")


def _sim() -> LLMClient:
    return LLMClient("sim/vllm-3b", seed=0, decode_tps=200, tool_call_p=0.0)


def _opened(c: LLMClient, **kw: Any) -> LLMStream:
    return c.stream(MSGS, sim_completion_tokens=400, **kw) if c.profile else c.stream(MSGS, **kw)


async def _after_one_delta(c: LLMClient) -> tuple[LLMStream, AsyncIterator[str]]:
    s = _opened(c)
    it = s.__aiter__()
    assert await it.__anext__() is not None
    assert c.in_flight() == 1
    return s, it


async def _check_done(c: LLMClient, url: str | None, cancelled_before: float) -> None:
    assert c.in_flight() == 0
    assert not _left_running()
    if url is not None:  # the connection was closed, so the server dropped the request
        assert await _server_saw_cancel(url, cancelled_before)
    # the client is still usable, and its next (short) stream runs to the end
    s = _opened(c, max_tokens=20)
    text = "".join([d async for d in s])
    assert s.response is not None and s.response.text == text and text
    assert s.response.record.outcome == "ok" and c.in_flight() == 0


@pytest.fixture(params=["http", "sim"])
def target(request: pytest.FixtureRequest) -> Iterator[tuple[Callable[[], LLMClient], str | None]]:
    if request.param == "http":
        url = request.getfixturevalue("long_server")
        yield (lambda: _http(url)), url
    else:
        yield _sim, None


async def test_aclose_mid_stream_frees_the_slot_at_once(target: Any) -> None:
    make, url = target
    c = make()
    before = _cancelled_on_server(url) if url else 0.0
    calls = c.usage.calls  # usage is per config and process: other tests count too
    s, it = await _after_one_delta(c)
    await it.aclose()  # type: ignore[attr-defined]
    assert c.in_flight() == 0  # at once: no loop turn needed
    assert s.response is None  # no record of a call nobody finished
    assert c.usage.calls == calls
    await _check_done(c, url, before)


async def test_break_frees_the_slot_within_a_loop_turn(target: Any) -> None:
    make, url = target
    c = make()
    before = _cancelled_on_server(url) if url else 0.0
    n = 0
    async for _ in _opened(c):
        n += 1
        if n == 3:
            break
    # the abandoned iterator is closed by the event loop's async-generator hook
    for _ in range(3):
        await asyncio.sleep(0)
    await _check_done(c, url, before)


async def test_cancelling_the_consumer_mid_stream_frees_the_slot(target: Any) -> None:
    make, url = target
    c = make()
    before = _cancelled_on_server(url) if url else 0.0
    got: list[str] = []

    async def consume() -> None:
        async for d in _opened(c):
            got.append(d)

    task = asyncio.ensure_future(consume())
    while len(got) < 2:
        await asyncio.sleep(0.01)
    assert c.in_flight() == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert c.in_flight() == 0  # released as the cancellation unwound the attempt
    await _check_done(c, url, before)


async def test_an_error_in_the_loop_body_does_not_leak_the_slot(target: Any) -> None:
    make, url = target
    c = make()
    before = _cancelled_on_server(url) if url else 0.0

    async def consume() -> None:
        async for d in _opened(c):
            if d:
                raise KeyError("the consumer's own bug")

    with pytest.raises(KeyError, match="own bug"):
        await consume()
    for _ in range(3):
        await asyncio.sleep(0)
    await _check_done(c, url, before)


async def test_virtual_clock_stream_closed_early_then_the_run_goes_on() -> None:
    c = _sim().with_clock(VirtualClock())
    _, it = await _after_one_delta(c)
    t_first = c.clock.now()
    await it.aclose()  # type: ignore[attr-defined]
    assert c.in_flight() == 0 and not _left_running()
    full = await c.stream(MSGS, sim_completion_tokens=400).collect()
    rec = full.record
    # the next call starts at once (the slot was free) and takes its simulated time
    assert rec.start == pytest.approx(t_first, abs=0.05) and rec.end - rec.start > 1.5
    assert rec.stream and rec.outcome == "ok" and rec.first_token is not None
    assert rec.start < rec.first_token < rec.end


async def test_sim_error_after_text_is_not_retried_before_text_it_is() -> None:
    # Virtual time: the 400-token answer takes ~2 s; a 1 s timeout strikes mid-decode.
    c = LLMClient("sim/vllm-3b", seed=0, timeout=1.0, max_retries=2, decode_tps=200,
                  tool_call_p=0.0).with_clock(VirtualClock())  # fmt: skip
    s = c.stream(MSGS, sim_completion_tokens=400)
    got: list[str] = []
    with pytest.raises(LLMTimeoutError) as err:
        async for d in s:
            got.append(d)
    rec = err.value.record  # type: ignore[attr-defined]
    assert "".join(got)  # text was delivered, so a retry would have repeated it
    assert rec.attempts == 1 and [t[1] for t in rec.tries] == ["timeout"]
    assert rec.outcome == "timeout" and rec.stream and c.in_flight() == 0
    # before any text (a rate limit, raised inside the stream): retried each time
    with pytest.raises(RateLimitError) as err:
        async for d in c.stream(MSGS, sim_p_rate_limit=1.0):
            raise AssertionError(f"no text expected, got {d!r}")
    rec = err.value.record  # type: ignore[attr-defined]
    assert rec.attempts == 3 and [t[1] for t in rec.tries] == ["rate_limited"] * 3
    assert c.in_flight() == 0 and not _left_running()


def _tries(rec: Any) -> list[tuple[int, str]]:
    return [(t[0], t[1]) for t in rec.tries]


@needs_litellm
@pytest.mark.parametrize("transport", ["lean", "litellm"])
async def test_http_error_after_text_is_not_retried(long_server: str, transport: str) -> None:
    # a 0.8 s client timeout on a ~2 s stream: text first, then the timeout (after a
    # warm-up call: litellm's first call spends seconds importing and initialising)
    warm = LLMClient("openai/vllm-3b", base_url=long_server + "/v1", transport=transport)
    await warm.complete(MSGS, max_tokens=5)
    c = LLMClient("openai/vllm-3b", base_url=long_server + "/v1", seed=0, timeout=0.8,
                  max_retries=2, transport=transport)  # fmt: skip
    u0 = c.usage
    got: list[str] = []
    with pytest.raises(LLMTimeoutError) as err:
        async for d in c.stream(MSGS):
            got.append(d)
    rec = err.value.record  # type: ignore[attr-defined]
    assert "".join(got) and rec.stream and rec.outcome == "timeout"
    assert rec.attempts == 1 and _tries(rec) == [(1, "timeout")]
    assert 0.7 < rec.end - rec.start < 3.0 and rec.first_token is None
    assert c.in_flight() == 0 and not _left_running()
    assert (c.usage.calls, c.usage.errors) == (u0.calls + 1, u0.errors + 1)


@needs_litellm
@pytest.mark.parametrize("transport", ["lean", "litellm"])
async def test_http_error_before_text_is_retried(limited_server: str, transport: str) -> None:
    c = LLMClient("openai/vllm-3b", base_url=limited_server + "/v1", seed=0, timeout=5.0,
                  max_retries=1, transport=transport)  # fmt: skip
    with pytest.raises(RateLimitError) as err:
        async for d in c.stream(MSGS):
            raise AssertionError(f"no text expected, got {d!r}")
    rec = err.value.record  # type: ignore[attr-defined]
    assert rec.attempts == 2 and _tries(rec) == [(1, "rate_limited"), (2, "rate_limited")]
    assert c.in_flight() == 0 and not _left_running()


@pytest.mark.parametrize("client", ["httptools", "aiohttp", "litellm"])
async def test_deadline_passing_in_the_consumers_own_await_does_not_cancel_it(
    long_server: str, client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The consumer's code runs in the attempt's task now: a transport deadline must bound
    # the transport's own reads, never cancel what the consumer awaits between deltas.
    if client == "litellm" and importlib.util.find_spec("litellm") is None:
        pytest.skip("litellm not installed")
    transport = "litellm" if client == "litellm" else "lean"
    if client != "litellm":
        monkeypatch.setenv("AGENTLAB_LEAN_HTTP", client)
    warm = LLMClient("openai/vllm-3b", base_url=long_server + "/v1", transport=transport)
    await warm.complete(MSGS, max_tokens=5)
    c = LLMClient("openai/vllm-3b", base_url=long_server + "/v1", seed=0, timeout=0.6,
                  max_retries=2, transport=transport)  # fmt: skip
    slept = []
    with pytest.raises(LLMTimeoutError) as err:
        async for _ in c.stream(MSGS):
            if not slept:
                await asyncio.sleep(0.9)  # past the deadline, in the consumer's own await
                slept.append(True)
    assert slept  # the sleep finished: it was not cancelled by the transport's deadline
    rec = err.value.record  # type: ignore[attr-defined]
    assert rec.attempts == 1 and _tries(rec) == [(1, "timeout")]
    assert c.in_flight() == 0 and not _left_running()


async def test_cancelled_before_the_first_delta_leaves_no_coroutine_behind() -> None:
    # cancelled at the loop turn before the attempt starts: nothing ran, nothing warns
    c = _sim()
    calls = c.usage.calls
    started = asyncio.Event()

    async def consume() -> None:
        it = _opened(c).__aiter__()
        started.set()
        await it.__anext__()

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        task = asyncio.ensure_future(consume())
        await started.wait()
        task.cancel()
        await asyncio.wait([task])
        assert task.cancelled()
        del task  # the task keeps its CancelledError, whose traceback holds the frames
        gc.collect()
    assert not [w for w in seen if "never awaited" in str(w.message)]
    assert c.in_flight() == 0 and c.usage.calls == calls and not _left_running()


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "pieces"),
    [({"sim_completion_tokens": 275}, 12), ({"sim_completion_tokens": 3}, 3),
     ({"sim_tool_call_p": 1.0}, 1)],
)  # fmt: skip
async def test_a_reply_ready_whole_is_streamed_in_the_pieces_of_chunks(
    overrides: dict[str, Any], pieces: int
) -> None:
    # An instant server's reply is ready whole: the stream hands over its pieces as a list
    # (SimServer.ready_pieces), the same pieces the chunks generator yields (a tool call's
    # empty text as one empty piece).
    c = LLMClient("sim/instant", seed=0)
    server = c._get_live().server
    assert server is not None
    params = {**c._req_defaults, **overrides}
    res = server.plan(MSGS, attempt=0, spec=None, tools=TOOLS, params=params, timeout=c.timeout,
                      labels={})  # fmt: skip
    ready = server.ready_pieces(res)
    assert ready is not None and ready == [d async for d in server.chunks(res, c.model)]
    s = c.stream(MSGS, tools=TOOLS, **overrides)
    got = [d async for d in s]
    assert s.response is not None and "".join(got) == s.response.text
    assert s.chunks == len(got) == pieces  # stream_chunks (12), or fewer tokens, or ""
    # whole_when_ready (a consumer that only joins the deltas): the text as one delta
    s = c.stream(MSGS, tools=TOOLS, **overrides)
    s.whole_when_ready = True
    got = [d async for d in s]
    assert s.response is not None and got == [s.response.text] and s.chunks == 1
    # left after its first piece, the ready reply's call ends at once, as a streamed one does
    it = c.stream(MSGS, sim_completion_tokens=275).__aiter__()
    assert await it.__anext__()
    assert c.in_flight() == 1
    await it.aclose()  # type: ignore[attr-defined]
    assert c.in_flight() == 0 and not _left_running()


async def test_a_reply_not_ready_yet_is_not_handed_over_whole() -> None:
    c = _sim().with_clock(VirtualClock())
    server = c._get_live().server
    assert server is not None
    res = server.plan(MSGS, attempt=0, spec=None, tools=None, params=dict(c._req_defaults),
                      timeout=c.timeout, labels={})  # fmt: skip
    assert server.ready_pieces(res) is None  # decoded by the engine over time: streamed


async def _one_ready_call(mode: str, overrides: dict[str, Any]) -> tuple[Any, ...]:
    """One streamed call on an instant server, consumed as ``mode`` says; what it left."""
    c = LLMClient("sim/instant", seed=0).with_clock(VirtualClock())
    s = c.stream(MSGS, tools=TOOLS, agent_id="a1", labels={"stage": "s"}, **overrides)
    s.start_at_once = s.whole_when_ready = True
    text = s.ready_text() if mode == "text" else "".join([d async for d in s])
    resp = s.response
    assert resp is not None and text == resp.text
    record = {k: v for k, v in resp.record.to_dict().items() if k != "request_id"}
    limiter = c.limiter
    return (text, resp.tool_calls, resp.finish_reason, record, s.chunks, c.usage, c.in_flight(),
            limiter.limit, limiter.samples, limiter.srtt)  # fmt: skip


@pytest.mark.parametrize("overrides", [{"sim_tool_call_p": 1.0}, {"sim_completion_tokens": 275}])
async def test_a_ready_reply_taken_whole_iterated_or_through_the_retry_loop_is_one_call(
    overrides: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # ready_text (AgentSystem's way), the stream's own planned first attempt, and the retry
    # loop's coroutines (_ready declined) leave the same response, record, usage and limiter
    taken = await _one_ready_call("text", overrides)
    iterated = await _one_ready_call("iterate", overrides)
    monkeypatch.setattr(LLMClient, "_ready", lambda *a, **k: None)
    assert await _one_ready_call("iterate", overrides) == iterated == taken
    assert taken[4] == 1 and taken[6] == 0  # one delta; the slot handed back


async def test_ready_text_declines_a_reply_that_could_fail_with_nothing_done() -> None:
    c = LLMClient("sim/instant", seed=0).with_clock(VirtualClock())  # a server of its own
    s = c.stream(MSGS, sim_p_timeout=0.5)
    assert s.ready_text() is None  # not asked for (start_at_once, whole_when_ready unset)
    s.start_at_once = s.whole_when_ready = True
    assert s.ready_text() is None  # a fault is possible: the retry loop's
    server = c._get_live().server
    assert server is not None and server.requests_total == 0 and c.usage.calls == 0
    s = c.stream(MSGS, sim_completion_tokens=20)
    s.start_at_once = s.whole_when_ready = True
    assert s.ready_text() and server.requests_total == 1 and c.usage.calls == 1
