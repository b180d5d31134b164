"""The engine's vLLM v1 mechanisms, each against a hand computation: attention cost,
prefix caching over KV blocks, LRU eviction, KV exhaustion and preemption, ``cached_tokens``.

Step model (``agentlab/llm/sim_engine.py``): ``dt = (1 + d (n - 1)) / decode_tps + prefill /
prefill_tps + attention_decode_s * sum(decode contexts) + attention_prefill_s * sum(c (p +
c / 2))``; KV blocks of 16 tokens. With ``step_roofline`` the first two terms become
``max(base, tokens / prefill_tps)``.
"""

from __future__ import annotations

import math
import tomllib

import pytest

from agentlab.core.clock import VirtualClock
from agentlab.errors import ConfigError
from agentlab.llm import LLMClient, get_profile
from agentlab.llm.sim_engine import Engine, EngineRequest
from agentlab.llm.sim_kv import KVCache, prompt_block_hashes
from agentlab.llm.sim_profiles import ENGINE_KEYS, PROFILE_DIR
from agentlab.llm.sim_step import idle_ttft
from agentlab.store.catalog import llm_call_row

BASE = {
    "slots": 4,
    "max_num_batched_tokens": 0,
    "prefill_tps": 100.0,  # 0.01 s per prompt token
    "decode_tps": 10.0,  # 0.1 s per step
    "decode_degrade": 0.0,
    "decode_jitter": 0.0,
    "overhead_s": 0.0,
    "client_overhead_s": 0.0,
    "prefix_caching": False,
    "kv_blocks": 0,
    "step_roofline": False,
    "attention_decode_s": 0.0,  # sim/vllm-3b has one; tests set it where they use it
    "tokenizer": "chars:4",  # hand-countable prompts (sim/vllm-3b counts with llama3)
}


def _text(tag: str, n_bytes: int) -> str:
    return (tag * n_bytes)[:n_bytes]


def test_decode_and_prefill_cost_grow_with_context() -> None:
    prof = get_profile("vllm-3b", **{**BASE, "prefill_tps": 0.0, "attention_decode_s": 0.001})
    # prefill (free) + base step: first token at 0.1; then each decode step attends
    # prompt + tokens so far: 0.1 + 0.001 * 101, 102, 103
    e = Engine(prof)
    r = EngineRequest(1, 0.0, 100, 4)
    e.add(r)
    assert e.predict(r).end == pytest.approx(0.1 + 0.201 + 0.202 + 0.203)
    e.advance(0.4)  # a cut inside the growing decode run: same times
    e.advance(math.inf)
    assert r.first_token == pytest.approx(0.1)
    assert [r.time_of_token(m) for m in (2, 3, 4)] == pytest.approx([0.301, 0.503, 0.706])
    assert r.end == pytest.approx(0.706)
    # prefill attention: a 100-token chunk from position 0 attends 100 * (0 + 50) pairs
    prof = get_profile("vllm-3b", **{**BASE, "prefill_tps": 0.0, "attention_prefill_s": 1e-5})
    e = Engine(prof)
    r = EngineRequest(1, 0.0, 100, 1)
    e.add(r)
    e.advance(math.inf)
    assert r.first_token == pytest.approx(0.1 + 1e-5 * 100 * 50)
    # switched off (the profile default): the step model without attention
    e = Engine(get_profile("vllm-3b", **BASE))
    r = EngineRequest(1, 0.0, 100, 4)
    e.add(r)
    e.advance(math.inf)
    assert r.end == pytest.approx(0.1 + 1.0 + 0.3)


def _req(rid: int, t: float, prompt: int, text: str, out: int = 2) -> EngineRequest:
    return EngineRequest(rid, t, prompt, out, hashes=prompt_block_hashes(text, prompt))


def test_prefix_cache_hits_by_hand() -> None:
    e = Engine(get_profile("vllm-3b", **{**BASE, "prefix_caching": True}))
    shared = _text("a", 64)  # one block of text (16 tokens x 4 bytes)
    a_text = shared + _text("b", 200)
    # A alone: 40 prompt tokens -> 0.1 + 0.40 = 0.5 to the first token, 1 decode step
    a = _req(1, 0.0, 40, a_text)
    e.add(a)
    e.advance(10.0)
    assert (a.first_token, a.end, a.cached_tokens) == pytest.approx((0.5, 0.6, 0))
    # B, same prompt: blocks 1-2 (32 tokens) cached, 8 computed -> 0.1 + 0.08
    b = _req(2, 1.0, 40, a_text)
    e.add(b)
    assert e.predict(b).first_token == pytest.approx(1.18)
    e.advance(10.0)
    assert b.cached_tokens == 32 and b.first_token == pytest.approx(1.18)
    # C shares the first block only: 16 cached, 24 computed -> 0.1 + 0.24
    c = _req(3, 2.0, 40, shared + _text("c", 200))
    e.add(c)
    e.advance(10.0)
    assert c.cached_tokens == 16 and c.first_token == pytest.approx(2.34)
    # a fully cached prompt still computes its last token: 32 tokens -> at most 1 block
    d = _req(4, 3.0, 32, a_text)
    e.add(d)
    e.advance(10.0)
    assert d.cached_tokens == 16 and d.first_token == pytest.approx(3.0 + 0.1 + 0.16)
    assert e.kv is not None and e.kv.hit_tokens_total == 32 + 16 + 16


def test_requests_scheduled_in_one_step_share_the_blocks_it_computes() -> None:
    # vLLM v1 caches a block when the step computing it is scheduled (allocate_slots), so
    # B, admitted in the same step as A with the same prompt, hits A's two full blocks.
    e = Engine(get_profile("vllm-3b", **{**BASE, "prefix_caching": True}))
    text = _text("a", 64) + _text("b", 200)
    a, b = _req(1, 0.0, 40, text), _req(2, 0.0, 40, text)
    e.add(a)
    e.add(b)
    e.advance(10.0)
    # one step: A's 40 tokens + B's last 8 (32 cached) -> 0.1 + 0.48 (without the
    # same-step hit: 0.1 + 0.80, B cached 0)
    assert (a.cached_tokens, b.cached_tokens) == (0, 32)
    assert a.first_token == pytest.approx(0.58) and b.first_token == pytest.approx(0.58)
    assert e.kv is not None and e.kv.hit_tokens_total == 32


def test_roofline_step_time_by_hand() -> None:
    # base 1 / decode_tps = 0.1 s, 0.01 s per token: the knee is 0.1 * 100 = 10 tokens
    prof = get_profile("vllm-3b", **{**BASE, "step_roofline": True})
    assert idle_ttft(prof, 5) == pytest.approx(0.1)  # under the knee: max(0.1, 0.05)
    assert idle_ttft(prof, 40) == pytest.approx(0.4)  # above: max(0.1, 0.40)
    off = get_profile("vllm-3b", **BASE)  # the sum: 0.1 + 0.05, 0.1 + 0.40
    assert (idle_ttft(off, 5), idle_ttft(off, 40)) == pytest.approx((0.15, 0.5))
    e = Engine(prof)
    a = EngineRequest(1, 0.0, 5, 3)
    e.add(a)
    e.advance(0.15)
    # B (30 tokens) arrives while A decodes: step [0.2, ..] computes 30 + 1 tokens ->
    # max(0.1, 0.31), then B's decode step ends at 0.61; C and D (20 tokens each) arrive
    # together and share one step of 40 tokens -> max(0.1, 0.40) (the sum: 0.1 + 0.40)
    b = EngineRequest(2, 0.15, 30, 2)
    e.add(b)
    e.advance(0.55)
    c, d = EngineRequest(3, 0.55, 20, 1), EngineRequest(4, 0.55, 20, 1)
    e.add(c)
    e.add(d)
    e.advance(math.inf)
    assert a.first_token == pytest.approx(0.1)  # a 5-token prefill costs the base step
    assert b.first_token == pytest.approx(0.2 + 0.31)
    assert a.end == pytest.approx(0.51)  # A's 3rd token comes with B's prefill step
    assert b.end == pytest.approx(0.51 + 0.1)  # decode-only step: max(0.1, 1 / 100)
    assert c.first_token == d.first_token == pytest.approx(0.61 + 0.40)


def test_vllm_3b_roofline_goes_through_both_published_lone_call_ttft_points() -> None:
    # datasets/make_vllm_3b_profile.py: (272 - 32 cached = 240 tok, 0.0311 s) [horizontal
    # in-flight-1 TTFT p25, round 1: the template's fixed lines cached, ROUND1_CACHED_TOKENS]
    # and (1210 - 128 cached = 1082 tok, 0.1218 s) [horizontal discussion TTFT p50, less the
    # head the prefix cache serves: ANCHOR_CACHED_TOKENS]; under the roofline TTFT =
    # overhead_s + prefilled tokens / prefill_tps above the knee
    prof = get_profile("vllm-3b")
    assert prof.step_roofline
    assert idle_ttft(prof, 240) == pytest.approx(0.0311, abs=2e-4)
    assert idle_ttft(prof, 1082) == pytest.approx(0.1218, abs=2e-4)
    assert idle_ttft(prof, 50) == pytest.approx(prof.overhead_s + 1 / prof.decode_tps)
    # the additive model with the same two parameters would add the ~9.3 ms step base
    off = prof.replace(step_roofline=False)
    assert idle_ttft(off, 1082) - idle_ttft(prof, 1082) == pytest.approx(1 / prof.decode_tps)


def test_register_caches_new_blocks_in_order_and_keeps_cached_ones() -> None:
    kv = KVCache(8, 16, True)
    assert kv.register([11, 12, 13]) == [11, 12, 13]
    assert kv.register([12, 14]) == [14]  # 12 stays with the block that holds it
    assert kv.cached == {11: 1, 12: 2, 13: 3, 14: 4}
    assert kv.users == {11: 1, 12: 1, 13: 1, 14: 1}


def test_lru_eviction_of_free_cached_blocks_by_hand() -> None:
    # 8 blocks. A, B: 40 tokens = 2 full (cached) blocks + 1 partial; C: 56 = 3 + 1.
    e = Engine(get_profile("vllm-3b", **{**BASE, "prefix_caching": True, "kv_blocks": 8}))
    ta, tb, tc = _text("a", 400), _text("b", 400), _text("c", 400)
    rid = iter(range(1, 100))

    def run(t: float, prompt: int, text: str) -> EngineRequest:
        r = _req(next(rid), t, prompt, text, out=1)
        e.add(r)
        e.advance(t + 50.0)
        assert r.end is not None
        return r

    kv = e.kv
    assert kv is not None
    run(0.0, 40, ta)  # 3 fresh blocks; freed tail first: queue [A3, a2, a1], 5 fresh
    queue = [h for _, h in kv.free_queue()]
    assert (kv.fresh, queue[1:]) == (5, [*prompt_block_hashes(ta, 40)[::-1]])
    run(10.0, 40, tb)  # 3 fresh: queue [A3, a2, a1, B3, b2, b1], 2 fresh
    assert kv.fresh == 2 and len(kv.free_queue()) == 6 and kv.evicted_total == 0
    run(20.0, 56, tc)  # 4 blocks: 2 fresh, then the head A3 (uncached) and a2: a2 evicted
    # queue [a1, B3, b2, b1, C4, c3, c2, c1]
    assert kv.evicted_total == 1
    ha, hb = prompt_block_hashes(ta, 40), prompt_block_hashes(tb, 40)
    hc = prompt_block_hashes(tc, 56)
    assert ha[0] in kv.cached and ha[1] not in kv.cached and hb[1] in kv.cached
    # A's prompt again: a1 hits (taken off the queue), a2 was evicted; its 2 other blocks
    # come from the head: B3 and b2 (evicted); D caches a2 anew -> [b1, C4, c3, c2, c1, D3, a2, a1]
    assert run(30.0, 40, ta).cached_tokens == 16
    assert kv.evicted_total == 2 and hb[1] not in kv.cached and ha[1] in kv.cached
    # B's prompt: b1 hits, b2 is gone; C4 and c3 are taken (c3 evicted)
    assert run(40.0, 40, tb).cached_tokens == 16
    assert kv.evicted_total == 3 and hc[2] not in kv.cached and hc[1] in kv.cached
    # C's prompt: c1, c2 hit (32 tokens), c3 was evicted
    assert run(50.0, 56, tc).cached_tokens == 32


def test_plan_bounds_prefix_hits_by_the_blocks_evicted_since_arrival() -> None:
    # 6 blocks, 1 slot. A (33 tokens: 2 full blocks a1, a2) runs alone and frees its blocks:
    # free queue [A3, a2, a1], 3 fresh. R, A's prompt again, queues behind B (80 tokens):
    # when R arrives a1, a2 are cached, so the plan first assumes 32 cached tokens; B's
    # admission takes the 3 fresh blocks, A3 and a2 (evicted), so R will hit a1 only.
    prof = {**BASE, "prefix_caching": True, "kv_blocks": 6, "slots": 1}
    e = Engine(get_profile("vllm-3b", **prof))
    ta = _text("a", 400)
    a = _req(1, 0.0, 33, ta)
    e.add(a)
    e.advance(1.0)
    assert a.end == pytest.approx(0.43 + 0.1)
    b, r = _req(2, 1.0, 80, _text("b", 400), out=1), _req(3, 1.0, 40, ta)
    e.add(b)
    e.add(r)
    # B: 0.1 + 0.80 -> 1.9; R then: 0.1 + (40 - 32) / 100, one decode step
    assert e.predict(r).end == pytest.approx(1.9 + 0.18 + 0.1)
    e.advance(1.5)  # B's step has started: a2 is gone
    assert e.kv is not None and e.kv.evicted_total == 1
    e.replan()  # a plan made now knows it (before: still 32 cached, 2.18, until admission)
    assert e.predict(r).end == pytest.approx(1.9 + 0.34 + 0.1)
    e.advance(10.0)
    assert r.cached_tokens == 16 and r.end == pytest.approx(2.34)


def test_kv_exhaustion_preempts_the_last_admitted_and_recomputes() -> None:
    # 4 blocks of 16; prefill free, 0.1 s per step; two requests of 16 prompt + 40 tokens.
    prof = get_profile("vllm-3b", **{**BASE, "prefill_tps": 0.0, "kv_blocks": 4})
    e = Engine(prof)
    a, b = EngineRequest(1, 0.0, 16, 40), EngineRequest(2, 0.0, 16, 40)
    e.add(a)
    e.add(b)
    predicted = e.predict(b).end
    e.advance(math.inf)
    # 0.1: both have their first token (1 block each); their 2nd blocks take the last 2.
    # At 1.6 (decoded 16) A needs a 3rd block: B (admitted last) is preempted, its 2
    # blocks freed; A decodes alone and takes the 4th block later, so B (32 tokens to
    # recompute = 2 blocks) cannot return before A ends: 1.6 + 24 * 0.1 = 4.0.
    assert a.end == pytest.approx(4.0)
    assert b.first_token == pytest.approx(0.1) and b.preemptions == 1
    assert e.preemptions_total == 1
    # B re-prefills prompt + its 16 tokens in one step (4.1: its 17th token), then 23 steps
    assert b.time_of_token(17) == pytest.approx(4.1)
    assert b.end == pytest.approx(4.1 + 2.3)
    assert predicted is not None and predicted <= b.end  # the plan ignores KV: lower bound
    assert e.kv is not None and e.kv.used() == 0
    with pytest.raises(ConfigError, match="kv_blocks=4"):
        e.add(EngineRequest(3, 5.0, 60, 10))  # 70 tokens > 4 blocks: could never run


async def test_cached_tokens_reach_the_call_record_and_the_llm_calls_row() -> None:
    c = LLMClient("sim/vllm-3b", seed=0, **{**BASE, "prefix_caching": True})
    c = c.with_clock(VirtualClock())
    msgs = [{"role": "system", "content": "You are helpful. " * 40},
            {"role": "user", "content": "hello"}]  # fmt: skip
    first = await c.complete(msgs, sim_completion_tokens=5)
    again = await c.complete(msgs, sim_completion_tokens=5)
    assert first.record.cached_tokens == 0
    # blocks end where the template's tokens do (sim_result._block_hashes): all 11 full
    # blocks of the 179-token prompt are the same again; vLLM computes the last token, so
    # (179 - 1) // 16 = 11 blocks hit (10 while the layout had only the text's 700 bytes)
    assert again.record.prompt_tokens == 179
    assert again.record.cached_tokens == 176
    assert llm_call_row(again.record, run_id=None, tick=None)["cached_tokens"] > 0
    off = LLMClient("sim/vllm-3b", seed=0, **BASE).with_clock(VirtualClock())
    await off.complete(msgs, sim_completion_tokens=5)
    assert (await off.complete(msgs, sim_completion_tokens=5)).record.cached_tokens == 0


def test_engine_parameters_have_sources_and_off_switches() -> None:
    text = (PROFILE_DIR / "vllm-3b.toml").read_text()
    engine = tomllib.loads(text)["engine"]
    assert set(engine) == ENGINE_KEYS
    lines = text.splitlines()
    for i, line in enumerate(lines):
        key = line.split(" = ")[0].strip()
        if key in ENGINE_KEYS:
            assert lines[i - 1].startswith("# source:"), key
    prof = get_profile("vllm-3b")
    assert prof.prefix_caching and prof.kv_blocks > 0 and prof.block_size == 16
    off = get_profile("vllm-3b", prefix_caching="false", kv_blocks=0)
    assert Engine(off).kv is None  # no KV model at all: the engine before it existed
    with pytest.raises(ConfigError, match="block_size"):
        get_profile("vllm-3b", block_size=0)


async def test_export_restore_mid_flight_keeps_the_kv_cache() -> None:
    import asyncio
    import json

    from agentlab.llm.sim_backend import SimServer

    # a small cache (preemptions and evictions happen) and shared prompt prefixes
    prof = get_profile("vllm-3b", slots=3, prefix_caching=True, kv_blocks=60, decode_jitter=0.2)
    system = {"role": "system", "content": "Shared rules. " * 60}

    async def drive(server: SimServer, ids: range) -> list[tuple[float, float, int]]:
        async def one(i: int) -> tuple[float, float, int]:
            res = server.plan([system, {"role": "user", "content": f"m{i}" * 90}],
                              params={"sim_completion_tokens": 150})  # fmt: skip
            await server.wait(res, "sim/x")
            return res.first_token, res.end, res.cached_tokens

        return list(await asyncio.gather(*(one(i) for i in ids)))

    clock = VirtualClock()
    s1 = SimServer(prof, 5, clock)
    first = await drive(s1, range(4))
    assert any(c > 0 for _, _, c in first)
    pending = [s1.plan([system, {"role": "user", "content": f"p{i}" * 90}]) for i in range(3)]
    t_export = clock.now()
    state = json.loads(json.dumps(s1.export_state()))
    tail1 = await drive(s1, range(4, 9))
    for res in pending:
        await s1.wait(res, "sim/x")
    assert s1.engine.preemptions_total > 0 and s1.engine.kv is not None
    assert s1.engine.kv.evicted_total > 0

    clock2 = VirtualClock(start=t_export)
    s2 = SimServer(prof, 5, clock2)
    s2.restore_state(state)
    assert s2.export_state() == state
    assert await drive(s2, range(4, 9)) == tail1
