"""AIMD limiter policy, the concurrency gate, and convergence against the simulator."""

from __future__ import annotations

import asyncio

from agentlab.core.clock import VirtualClock
from agentlab.errors import LLMError
from agentlab.llm import AIMDLimiter, ConcurrencyGate, LLMClient


def test_slow_start_then_additive_increase_and_one_cut_per_epoch() -> None:
    lim = AIMDLimiter()
    assert lim.limit == 16
    for _ in range(16):
        lim.on_success(1.0, 100, in_flight=16, epoch=lim.epoch)
    assert lim.limit == 32  # slow start: +1 per healthy completion
    e = lim.epoch
    lim.on_rate_limit(e)
    lim.on_rate_limit(e)  # same epoch: stale news, no second cut
    assert lim.limit == 16 and lim.decreases == 1 and lim.rate_limited == 2
    for _ in range(16):
        lim.on_success(1.0, 100, in_flight=16, epoch=lim.epoch)
    assert lim.limit == 16 or lim.limit == 17  # additive: about +1 per window of 16
    lim.on_rate_limit(lim.epoch)
    assert lim.limit == int(lim.snapshot()["limit"]) and 12 <= lim.limit <= 14  # x0.8


def test_no_growth_when_the_limit_is_not_used() -> None:
    lim = AIMDLimiter()
    for _ in range(100):
        lim.on_success(1.0, 100, in_flight=2, epoch=lim.epoch)
    assert lim.limit == 16


def test_latency_above_factor_times_baseline_cuts() -> None:
    lim = AIMDLimiter(latency_factor=4.0)
    for _ in range(20):
        lim.on_success(1.0, 92, in_flight=1, epoch=lim.epoch)  # answers all of one length
    assert lim.baseline == 1.0 and lim.expected(92) == 1.0 and lim.per_token is None
    lim.on_success(3.5, 92, in_flight=1, epoch=lim.epoch)  # 3.5x: still healthy
    assert lim.decreases == 0
    lim.on_success(5.0, 92, in_flight=1, epoch=lim.epoch)  # one 5x answer: a hiccup
    assert lim.decreases == 0 and lim.limit == 16
    n = 0
    while lim.decreases == 0:  # 5x, answer after answer: a queue
        lim.on_success(5.0, 92, in_flight=1, epoch=lim.epoch)
        n += 1
    assert n <= 16 and lim.slow_signals == 1  # within about one round trip (16 answers)
    assert lim.limit == 8
    lim.on_success(20.0, 1000, in_flight=1, epoch=lim.epoch)  # long answer, normal pace
    assert lim.decreases == 1


def test_fixed_cost_of_short_answers_is_not_congestion() -> None:
    # Measured over HTTP against sim-serve: ~0.25 s fixed (HTTP, prefill) + 0.67 ms/token.
    # Per token, an 8-token answer costs 10x a 300-token one; it is not slower than no-load.
    lim = AIMDLimiter(initial=8)
    for k in range(40):
        tokens = (8, 20, 60, 150, 300)[k % 5]
        lim.on_success(0.25 + 0.00067 * tokens, tokens, in_flight=8, epoch=lim.epoch)
    assert lim.slow_signals == 0 and lim.decreases == 0 and lim.limit > 8
    assert abs((lim.per_token or 0) - 0.00067) < 1e-6
    want = lim.expected(100)
    assert want is not None and abs(want - (0.25 + 0.067)) < 1e-6  # fixed + per-token
    # queueing adds a wait to every answer, short ones included: that is congestion
    before, n = lim.limit, 0
    while lim.decreases == 0:
        lim.on_success(0.25 + 0.00067 * 8 + 1.2, 8, in_flight=8, epoch=lim.epoch)
        n += 1
    assert n <= before and lim.slow_signals == 1  # within about one round trip


def test_an_empty_answer_as_anchor_does_not_make_every_answer_late() -> None:
    """A fault's empty answer (0 tokens, fast) can become the no-load anchor; it bounds no
    decode time, so longer answers are not judged against it (no slope yet: ``expected``
    is None) and feed the slope sample instead of reading as congestion. Before, the
    fallback slope was 0, every answer was "late", none fed a slope, and the limit was cut
    answer after answer (10 -> 2 in a 500-agent society under sporadic faults)."""
    lim = AIMDLimiter(initial=8, latency_factor=4.0)
    for k in range(20):  # a normal load: 0.3 s fixed + 10 ms / token
        tokens = (20, 60, 150)[k % 3]
        lim.on_success(0.3 + 0.01 * tokens, tokens, in_flight=8, epoch=lim.epoch)
    lim.on_success(0.04, 0, in_flight=8, epoch=lim.epoch)  # the empty answer: new anchor
    assert lim.baseline == 0.04 and lim.per_token is None
    assert lim.expected(0) == 0.04 and lim.expected(50) is None
    for k in range(30):
        tokens = (20, 60, 150)[k % 3]
        lim.on_success(0.3 + 0.01 * tokens, tokens, in_flight=8, epoch=lim.epoch)
    assert lim.decreases == 0 and lim.slow_signals == 0
    assert lim.per_token is not None  # measured from the anchor to the longer answers


def test_absolute_slow_threshold_and_floor() -> None:
    lim = AIMDLimiter(initial=2, slow_s=2.0)
    for _ in range(5):
        lim.on_success(3.0, 10, in_flight=1, epoch=lim.epoch)
    assert lim.limit == 1  # never below the floor


def test_fixed_limiter_does_not_adapt() -> None:
    lim = AIMDLimiter(initial=7, adaptive=False)
    lim.on_rate_limit(0)
    lim.on_success(1.0, 10, in_flight=7, epoch=0)
    assert lim.limit == 7


async def test_gate_enforces_the_limit_in_fifo_order() -> None:
    lim = AIMDLimiter(initial=2, adaptive=False)
    gate = ConcurrencyGate(lim)
    order: list[int] = []
    peak = 0

    async def user(i: int) -> None:
        nonlocal peak
        await gate.acquire()
        peak = max(peak, gate.in_flight)
        order.append(i)
        await asyncio.sleep(0.001)
        gate.release()

    await asyncio.gather(*(user(i) for i in range(8)))
    assert peak == 2 and order == list(range(8)) and gate.in_flight == 0


async def test_cancelled_waiter_does_not_leak_a_slot() -> None:
    gate = ConcurrencyGate(AIMDLimiter(initial=1, adaptive=False))
    await gate.acquire()
    t = asyncio.ensure_future(gate.acquire())
    await asyncio.sleep(0)
    t.cancel()
    await asyncio.gather(t, return_exceptions=True)
    gate.release()
    assert gate.in_flight == 0 and not gate.waiters


async def test_aimd_finds_the_cloud_rate_limit_without_tuning() -> None:
    clock = VirtualClock()
    c = LLMClient("sim/cloud", seed=0).with_clock(clock)
    stop = False
    ok = 0

    async def agent(i: int) -> None:
        nonlocal ok
        k = 0
        while not stop:
            k += 1
            try:
                await c.complete(
                    [{"role": "user", "content": f"{i}/{k}"}], sim_completion_tokens=80
                )
                ok += clock.now() > 60
            except LLMError:
                pass

    tasks = [asyncio.ensure_future(agent(i)) for i in range(300)]
    await clock.sleep(60)
    m0 = c.server_metrics()
    await clock.sleep(120)
    m1 = c.server_metrics()
    stop = True
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    rate = ok / 120
    rejected = (m1["rejected_total"] - m0["rejected_total"]) / (
        m1["requests_total"] - m0["requests_total"]
    )
    assert rate >= 0.9 * 20.0  # rpm 1200 = 20 req/s capacity
    assert rejected <= 0.01
    assert 10 <= c.limit <= 60  # near rate x latency (~20 x 1.3 s), not 300


def _vllm_3b_latency(prefill: int, tokens: int) -> float:
    # a vLLM-like server at no load (sim/vllm-3b before its cache-aware prefill fit):
    # overhead + computed prompt tokens / prefill_tps + decode
    return 0.0048 + prefill / 10340.0 + tokens / 100.6


def test_cached_prompts_do_not_make_uncached_ones_read_as_congestion() -> None:
    # With prefix caching the fastest answers are those whose prompt was cached: without
    # the prefill part, a short answer to an uncached 3,000-token prompt (0.32 s) reads as
    # 12x its no-load latency (0.026 s), i.e. as congestion, with no load at all.
    def feed(lim: AIMDLimiter, wait: float = 0.0, n: int = 80, *, tell: bool = True) -> None:
        for k in range(n):
            tokens = (2, 3, 5, 8, 40)[k % 5]
            prefill = (16, 3000, 2400, 3000)[k % 4]  # cached prompt, uncached, partly
            lat = _vllm_3b_latency(prefill, tokens) + wait
            lim.on_success(lat, tokens, 8, lim.epoch, None, prefill if tell else 0)

    blind = AIMDLimiter(initial=8)
    feed(blind, tell=False)  # the two-part model (no prefill tokens given)
    assert blind.decreases >= 3 and blind.limit < 8
    lim = AIMDLimiter(initial=8)
    feed(lim)
    assert lim.slow_signals == 0 and lim.decreases == 0 and lim.limit > 8
    assert abs((lim.per_prefill_token or 0) - 1 / 10340.0) < 1e-7
    assert abs((lim.per_token or 0) - 1 / 100.6) < 1e-7
    want = lim.expected(2, 3000)
    assert want is not None and abs(want - _vllm_3b_latency(3000, 2)) < 1e-6
    # queueing still adds a wait to every answer, cached ones included: congestion
    feed(lim, wait=1.2, n=20)
    assert lim.decreases == 1 and lim.slow_signals >= 1
    # the prefill part is learned state: a resumed limiter continues with it
    again = AIMDLimiter(initial=8)
    again.restore_state(lim.export_state())
    assert again.expected(2, 3000) == lim.expected(2, 3000)
