"""The vLLM-like engine behind ``sim/<profile>``: batching, chunked prefill, lengths, state.

The chunked-prefill numbers below are computed by hand from the step model in
``agentlab/llm/sim_engine.py``: ``dt = (1 + d (n - 1)) / decode_tps + prefill / prefill_tps``.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel

from agentlab.core.clock import RealClock, VirtualClock
from agentlab.errors import ConfigError, StructuredOutputError
from agentlab.llm import LLMClient, SimProfile, get_profile
from agentlab.llm.sim_backend import SimServer
from agentlab.llm.sim_engine import Engine, EngineRequest

# budget 10 tokens/step, base step 0.1 s, +50% per extra sequence, 0.01 s per prompt token
SMALL = {
    "slots": 4,
    "max_num_batched_tokens": 10,
    "prefill_tps": 100.0,
    "decode_tps": 10.0,
    "decode_degrade": 0.5,
    "decode_jitter": 0.0,
    "overhead_s": 0.0,
    "client_overhead_s": 0.0,
    "tokenizer": "chars:4",  # hand-countable prompts (sim/vllm-3b counts with llama3)
    # the engine without its KV model (hand computations below; KV tests: test_sim_kv.py)
    "prefix_caching": False,
    "kv_blocks": 0,
    "step_roofline": False,  # base + prompt / prefill_tps (the roofline: test_sim_kv.py)
    "attention_decode_s": 0.0,  # decode cost independent of context (test_sim_kv.py)
}
# prompt tokens under "chars:4": 4 per message + len(content) // 4
SHORT = [{"role": "user", "content": "abcd"}]  # 5 tokens
LONG = [{"role": "user", "content": "y" * 84}]  # 25 tokens


def test_chunked_prefill_by_hand_alone_and_under_load() -> None:
    prof = get_profile("vllm-3b", **SMALL)
    # B alone: chunks 10, 10, 5 -> 0.2 + 0.2 + 0.15 = 0.55 s to the first token, then two
    # decode steps of 0.1 s each
    e = Engine(prof)
    b = EngineRequest(1, 0.0, 25, 3)
    e.add(b)
    e.advance(10.0)
    assert b.first_token == pytest.approx(0.55) and b.end == pytest.approx(0.75)
    # Under load: A (5-token prompt, long reply) arrives just before B.
    #   step 1: A chunk 5 + B chunk 5, n=2: 0.15 + 0.10 = 0.25  (A's first token)
    #   step 2: A decode 1 + B chunk 9: 0.15 + 0.09 = 0.24 -> 0.49
    #   step 3: A decode 1 + B chunk 9: 0.24 -> 0.73
    #   step 4: A decode 1 + B chunk 2: 0.15 + 0.02 = 0.17 -> 0.90 (B's first token)
    e = Engine(prof)
    a, b = EngineRequest(1, 0.0, 5, 100), EngineRequest(2, 0.0, 25, 3)
    e.add(a)
    e.add(b)
    assert e.predict(b).first_token == pytest.approx(0.90)
    e.advance(100.0)
    assert a.first_token == pytest.approx(0.25)
    assert b.first_token == pytest.approx(0.90)
    assert [a.time_of_token(m) for m in (2, 3, 4)] == pytest.approx([0.49, 0.73, 0.90])
    # then both decode: n=2 steps of 0.15 s; B's 2 remaining tokens end at 1.20
    assert b.end == pytest.approx(1.20)
    # A decodes alone after that (0.1 s/step): 100 tokens = first + 99 steps
    assert a.end == pytest.approx(1.20 + (100 - 6) * 0.1)


def test_max_num_seqs_queues_fcfs() -> None:
    prof = get_profile("vllm-3b", **{**SMALL, "slots": 1})
    e = Engine(prof)
    a, b = EngineRequest(1, 0.0, 5, 10), EngineRequest(2, 0.0, 25, 3)
    e.add(a)
    e.add(b)
    e.advance(100.0)
    # A alone: prefill step 0.1 + 0.05, then 9 decode steps of 0.1
    assert a.end == pytest.approx(0.15 + 0.9)
    assert b.admitted == pytest.approx(a.end)  # admitted at the step after A finished
    assert b.first_token == pytest.approx(a.end + 0.55)


async def test_ttft_under_load_through_the_client_matches_the_hand_computation() -> None:
    clock = VirtualClock()
    c = LLMClient("sim/vllm-3b", seed=0, **SMALL).with_clock(clock)

    async def streamed() -> float:
        s = c.stream(LONG, sim_completion_tokens=3)
        async for _ in s:
            pass
        rec = s.response.record  # type: ignore[union-attr]
        assert rec.first_token is not None
        return rec.first_token - rec.start

    alone = await streamed()
    assert alone == pytest.approx(0.55)
    t0 = clock.now()
    busy = asyncio.ensure_future(c.complete(SHORT, sim_completion_tokens=100))
    await asyncio.sleep(0)  # A reaches the server first
    loaded = await streamed()
    r = await busy
    assert loaded == pytest.approx(0.90)
    assert r.record.start == pytest.approx(t0)
    assert r.record.end - r.record.start == pytest.approx(1.20 + 94 * 0.1)


async def test_max_tokens_truncates_with_finish_reason_length() -> None:
    c = LLMClient("sim/vllm-3b", seed=1).with_clock(VirtualClock())
    r = await c.complete(SHORT, sim_completion_tokens=500, max_tokens=20)
    assert r.finish_reason == "length" and r.record.completion_tokens == 20
    r = await c.complete(SHORT, sim_completion_tokens=10, max_tokens=20)
    assert r.finish_reason == "stop" and r.record.completion_tokens == 10

    class Turn(BaseModel):
        stance: Literal["agree", "disagree"]
        text: str

    with pytest.raises(StructuredOutputError):  # JSON cut mid-way cannot be parsed
        await c.complete(SHORT, response_format=Turn, sim_completion_tokens=300, max_tokens=30)


async def test_structured_and_free_text_lengths_follow_the_stage_profile() -> None:
    class Turn(BaseModel):
        stance: Literal["agree", "disagree"]
        text: str

    lengths = {"discussion": [300.0, 0.3], "evaluation": [40.0, 0.3]}
    c = LLMClient("sim/vllm-3b", seed=2, lengths=lengths).with_clock(VirtualClock())
    out: dict[tuple[str, bool], list[int]] = {}
    for stage in ("discussion", "evaluation", "other"):
        for structured in (False, True):
            for i in range(60):
                msgs = [{"role": "user", "content": f"{stage} {i}"}]
                fmt = Turn if structured else None
                r = await c.complete(msgs, response_format=fmt, labels={"stage": stage})
                out.setdefault((stage, structured), []).append(r.record.completion_tokens)
                if structured:
                    assert isinstance(r.parsed, Turn)
    expected = {"discussion": 300.0, "evaluation": 40.0, "other": 120.0}  # other: default
    for (stage, structured), toks in out.items():
        med = statistics.median(toks)
        assert med == pytest.approx(expected[stage], rel=0.15), (stage, structured, med)


async def test_decode_jitter_spreads_a_wave_that_starts_together() -> None:
    async def spread(**kw: float) -> tuple[float, float]:
        c = LLMClient("sim/vllm-3b", seed=3, client_overhead_s=0, **kw).with_clock(VirtualClock())
        msgs = [[{"role": "user", "content": f"expert {i}"}] for i in range(5)]
        rs = await asyncio.gather(*(c.complete(m, sim_completion_tokens=300) for m in msgs))
        ends = sorted(r.record.end for r in rs)
        return ends[-1] - ends[0], statistics.mean(ends)

    even, _ = await spread(decode_jitter=0.0)
    assert even < 0.01  # same length, same start, no jitter: they finish together
    jittered, mean = await spread()  # the profile's per-request speed spread
    # ~2.8 s replies, sigma 0.036: five speeds ~2.3 sigma apart, a tenth of a second or more
    assert jittered > 0.035 * mean  # (0.14 s here)


async def test_same_seed_same_records_and_profile_by_toml_path(tmp_path: Path) -> None:
    path = get_profile("vllm-3b", slots=2, lengths={"discussion": [200.0, 0.4]}).save(
        tmp_path / "p.toml"
    )

    async def run() -> list[tuple[float, float, float, int]]:
        clock = VirtualClock()
        c = LLMClient(f"sim/{path}", seed=7).with_clock(clock)
        rs = await asyncio.gather(
            *(
                c.complete(
                    [{"role": "user", "content": f"q{i}" * 50}], labels={"stage": "discussion"}
                )
                for i in range(6)
            )
        )
        return [
            (r.record.start, r.record.first_token or 0.0, r.record.end, r.record.completion_tokens)
            for r in rs
        ]

    first = await run()
    assert first == await run()
    prof = LLMClient(f"sim/{path}").profile
    assert prof is not None and prof.slots == 2 and prof.length_of("discussion") == (200.0, 0.4)
    with pytest.raises(ConfigError, match="does not exist"):
        LLMClient(f"sim/{tmp_path / 'missing.toml'}")


def test_toml_round_trip_keeps_every_field(tmp_path: Path) -> None:
    prof = get_profile("vllm-3b", lengths={"a b": [10.0, 0.1]})
    from agentlab.llm.sim_profiles import load_profile

    back = load_profile(prof.save(tmp_path / "x.toml"))
    assert back == prof
    assert isinstance(back, SimProfile)


async def test_export_restore_state_continues_identically() -> None:
    prof = get_profile("vllm-3b", slots=2, decode_jitter=0.2)

    async def drive(
        server: SimServer, clock: VirtualClock, ids: range
    ) -> list[tuple[float, float]]:
        async def one(i: int) -> tuple[float, float]:
            res = server.plan([{"role": "user", "content": f"m{i}" * 30}], labels=None)
            await server.wait(res, "sim/x")
            return res.first_token, res.end

        return list(await asyncio.gather(*(one(i) for i in ids)))

    clock = VirtualClock()
    s1 = SimServer(prof, 11, clock)
    await drive(s1, clock, range(3))
    # mid-flight: two requests running when the state is taken
    pending = [s1.plan([{"role": "user", "content": f"p{i}" * 40}]) for i in range(2)]
    t_export = clock.now()
    state = json.loads(json.dumps(s1.export_state()))  # JSON-able, as persisted
    tail1 = await drive(s1, clock, range(3, 7))
    for res in pending:
        await s1.wait(res, "sim/x")

    clock2 = VirtualClock(start=t_export)  # a fresh process resuming at the same moment
    s2 = SimServer(prof, 11, clock2)
    s2.restore_state(state)
    assert s2.export_state() == state
    assert await drive(s2, clock2, range(3, 7)) == tail1
    assert s2.metrics()["requests_total"] == s1.metrics()["requests_total"]


def test_real_clock_serves_in_order() -> None:
    async def go() -> tuple[float, float]:
        c = LLMClient(
            "sim/vllm-3b", seed=0, **{**SMALL, "decode_tps": 200.0, "prefill_tps": 5000.0}
        ).with_clock(RealClock())
        a, b = await asyncio.gather(
            c.complete(SHORT, sim_completion_tokens=40), c.complete(LONG, sim_completion_tokens=5)
        )
        return a.record.end - a.record.start, b.record.end - b.record.start

    la, lb = asyncio.run(go())
    # A: 40 tokens at ~(1.5/200) s per step while B runs, then 1/200: ~0.2-0.3 s
    assert 0.15 < la < 1.0 and 0.02 < lb < la


async def test_client_timeout_aborts_a_queued_request_and_frees_nothing_twice() -> None:
    from agentlab.errors import LLMTimeoutError

    clock = VirtualClock()
    prof = {**SMALL, "slots": 1}
    c = LLMClient("sim/vllm-3b", seed=0, timeout=2.0, max_retries=0, **prof).with_clock(clock)
    # A holds the only slot for 0.15 + 9 * 0.1 = 1.05 s; B waits, then needs 0.75 s more
    # (ends at 1.80 < 2.0: fine); C queues behind both and would end at 2.55 > its deadline
    a, b, cc = await asyncio.gather(
        c.complete(SHORT, sim_completion_tokens=10),
        c.complete(LONG, sim_completion_tokens=3),
        c.complete(LONG, sim_completion_tokens=3),
        return_exceptions=True,
    )
    assert not isinstance(a, BaseException) and not isinstance(b, BaseException)
    assert a.record.end == pytest.approx(1.05) and b.record.end == pytest.approx(1.05 + 0.75)
    assert isinstance(cc, LLMTimeoutError)
    assert cc.record.end == pytest.approx(2.0)  # type: ignore[attr-defined]
    # the aborted request left the engine: a new one is served at once
    t0 = clock.now()
    r = await c.complete(SHORT, sim_completion_tokens=2)
    assert r.record.end - t0 == pytest.approx(0.15 + 0.1)


async def test_cancel_frees_the_slot_for_the_next_request() -> None:
    clock = VirtualClock()
    server = SimServer(get_profile("vllm-3b", **{**SMALL, "slots": 1}), 0, clock)
    a = server.plan(SHORT, params={"sim_completion_tokens": 100})
    b = server.plan(LONG, params={"sim_completion_tokens": 3})
    assert b.first_token == pytest.approx(0.15 + 99 * 0.1 + 0.55)  # queued behind A
    await clock.sleep(0.5)
    server.cancel(a)  # A's client went away at 0.5: aborted at the step boundary 0.55
    await server.wait(b, "sim/x")
    assert b.first_token == pytest.approx(0.55 + 0.55) and b.end == pytest.approx(1.30)
    assert a.fault == "cancelled"


@pytest.mark.parametrize(
    ("mechanisms", "seed", "speeds"),
    [
        (False, 3, {}),
        (True, 3, {}),
        # with prefix caching and a finite KV cache, seeds 0 and 1 (18 of seeds 0-29 at
        # these speeds) differed by ~1 ms before the saved state held the bounds the plan
        # admitted its requests with (EngineState._queued); the profile's speeds too
        (True, 0, {}),
        (True, 1, {"prefill_tps": 10340.0, "overhead_s": 0.0048}),
    ],
)
def test_incremental_plan_under_overload_equals_a_fresh_plan(
    mechanisms: bool, seed: int, speeds: dict[str, float]
) -> None:
    # 2 slots, arrivals ~10x faster than service, 3 s client deadlines: most requests leave
    # the queue aborted, and each arrival re-plans from the step that took the request
    # ahead of it off the queue (keeping the queue aborts of that step). Every prediction
    # must equal the one of an engine restored from the same state (planned afresh). With
    # the KV mechanisms, blocks are evicted while the plan holds admissions whose hit
    # bounds were taken before: the restored plan must admit them with the same bounds.
    import random

    from agentlab.llm.sim_kv import prompt_block_hashes

    kw = {} if mechanisms else {"prefix_caching": False, "kv_blocks": 0, "step_roofline": False,
                               "attention_decode_s": 0.0}  # fmt: skip
    prof = get_profile("vllm-3b", slots=2, **{**speeds, **kw})
    if mechanisms:
        prof = prof.replace(kv_blocks=400)
    rng = random.Random(seed)
    e = Engine(prof)
    reqs: list[EngineRequest] = []
    t = 0.0
    kept = 0  # queued requests saved with the bound the plan admitted them with
    for i in range(160):
        t += rng.expovariate(20.0)
        e.advance(t)
        prompt = rng.randint(50, 900)
        text = "shared system prompt " * 20 + f"agent {i % 7} " * (prompt // 2)
        r = EngineRequest(i, t + 0.005, prompt, rng.randint(1, 60), 1.0, t + 3.0,
                          hashes=prompt_block_hashes(text, prompt))  # fmt: skip
        e.add(r)
        reqs.append(r)
        v = e.predict(r)
        twin = Engine(prof)
        state = e.export_state()
        kept += sum("plan_bound" in x for x in state["queue"])
        w = twin.restore_state(state)[r.rid]
        u = twin.predict(w)
        assert v.aborted == u.aborted, i
        assert (v.end, v.first_token) == pytest.approx((u.end, u.first_token), abs=1e-9), i
        # a restored engine saved again after a plan that stopped short of some saved
        # bounds (asked about the head of the queue only): its copy predicts the same
        part = Engine(prof)
        ws = part.restore_state(state)
        part.predict(min(ws.values(), key=lambda x: x.arrival))
        third = Engine(prof)
        x = third.predict(third.restore_state(part.export_state())[r.rid])
        assert (x.aborted, x.end, x.first_token) == (u.aborted, u.end, u.first_token), i
        for q in rng.sample(reqs, min(2, len(reqs))):  # earlier requests too
            if not q.done:
                a, b = e.predict(q), twin.predict(twin.restore_state(e.export_state())[q.rid])
                assert a.aborted == b.aborted and a.end == pytest.approx(b.end, abs=1e-9)
    e.advance(math.inf, inclusive=True)
    aborted = sum(r.aborted for r in reqs)
    assert aborted > 80  # overloaded: most left the queue by their deadline
    if mechanisms:  # (the case above: evictions while the plan held bounded admissions)
        assert e.kv is not None and e.kv.evicted_total > 40 and kept > 1000


def test_a_queued_request_past_its_deadline_is_planned_aborted_without_the_queue_ahead() -> None:
    # 1 slot; 20 requests ahead of B, each a 5-token prompt and 10 tokens: 0.15 s (prefill
    # step) + 9 decode steps of 0.1 s = 1.05 s each. B (deadline 2.0 s) would be considered
    # at 21.0 s: the plan marks it aborted once its time passes 2.0 s (2 requests, 4 phases)
    # instead of simulating all 20 (40 phases).
    prof = get_profile("vllm-3b", **{**SMALL, "slots": 1})
    e = Engine(prof)
    for i in range(20):
        e.add(EngineRequest(i, 0.0, 5, 10))
    b = EngineRequest(20, 0.0, 5, 3, deadline=2.0)
    e.add(b)
    v = e.predict(b)
    assert v.aborted and v.end is None and v.first_token is None
    assert len(e._starts) == 4  # phases planned (one snapshot each)
    # C, queued behind B, is planned as if B left the queue at its turn (21.0 s): prefill
    # step 0.15 s (first token 21.15), 2 decode steps (21.35); as a fresh plan says
    c = EngineRequest(21, 0.5, 5, 3)
    e.add(c)
    w = e.predict(c)
    assert (w.first_token, w.end) == pytest.approx((21.15, 21.35))
    twin = Engine(prof)
    u = twin.predict(twin.restore_state(e.export_state())[c.rid])
    assert (u.first_token, u.end) == pytest.approx((w.first_token, w.end), abs=1e-12)
    e.advance(math.inf, inclusive=True)
    assert b.aborted and b.admitted is None
    assert (c.first_token, c.end) == pytest.approx((21.15, 21.35))


def test_a_lowered_deadline_with_a_version_bump_aborts_at_the_next_step_boundary() -> None:
    # The engine carries the least running deadline from phase to phase; a cancel lowers a
    # running request's deadline and bumps ``version`` (as SimRunning.cancel does), which
    # must make the next step see it. By hand (SMALL): A and B (5-token prompts) share
    # step 1: 10 prompt tokens, n=2: 0.15 + 0.10 = 0.25 (first tokens); then decode steps
    # of 0.15 s: 0.40 ... 1.00, 1.15. A is cancelled at 1.1: aborted at the 1.15 boundary
    # with 1 + 6 tokens; B then decodes alone in 0.1 s steps: its 8th token at 1.25.
    e = Engine(get_profile("vllm-3b", **SMALL))
    a, b = EngineRequest(1, 0.0, 5, 100), EngineRequest(2, 0.0, 5, 100)
    e.add(a)
    e.add(b)
    e.advance(1.0)
    assert e.t == pytest.approx(1.0)
    e.advance(1.1)
    assert e.t == pytest.approx(1.15)
    a.deadline = 1.1
    e.version += 1
    e.advance(2.0)
    assert a.aborted and a.decoded == 7.0 and e.aborted_total == 1
    assert b.time_of_token(7) == pytest.approx(1.15) and b.time_of_token(8) == pytest.approx(1.25)
