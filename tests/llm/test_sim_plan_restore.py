"""The plan's snapshots (:mod:`agentlab.llm.sim_plan`): restoring phase ``p`` keeps exactly
the segments planned before it, and (mechanisms off) planning again reproduces the plan
byte for byte: the guarantee an arrival's re-plan rests on, and the one a change to the
snapshot layout has to keep."""

from __future__ import annotations

import copy
import random

import pytest

from agentlab.llm import get_profile
from agentlab.llm.sim_engine import Engine, EngineRequest
from agentlab.llm.sim_kv import prompt_block_hashes


def _views(e: Engine) -> dict[int, tuple[object, ...]]:
    return {
        rid: (v.prefilled, v.decoded, v.first_token, v.end, v.aborted, list(v.segments))
        for rid, v in e._views.items()
    }


@pytest.mark.parametrize("mechanisms", [False, True])
def test_restoring_any_snapshot_and_planning_again_gives_the_same_plan(mechanisms: bool) -> None:
    kw = {} if mechanisms else {"prefix_caching": False, "kv_blocks": 0, "attention_decode_s": 0.0}
    # 4 slots and a small token budget: snapshots hold requests mid-prefill (chunks) and
    # mid-decode, and a preempted request (KV) re-prefills its output in the plan
    prof = get_profile("vllm-3b", slots=4, max_num_batched_tokens=512, **kw)
    if mechanisms:
        prof = prof.replace(kv_blocks=300)
    rng = random.Random(5)
    e = Engine(prof)
    t = 0.0
    checked = 0
    for i in range(60):
        t += rng.expovariate(6.0)
        e.advance(t)
        prompt = rng.randint(50, 1500)
        text = "shared system prompt " * 20 + f"agent {i % 5} " * (prompt // 2)
        r = EngineRequest(i, t + 0.005, prompt, rng.randint(1, 120),
                          rng.lognormvariate(0, 0.1), t + 30.0,
                          hashes=prompt_block_hashes(text, prompt))  # fmt: skip
        e.add(r)
        e.predict(r)
        if i % 6:
            continue
        plan = e._plan
        assert plan is not None
        full = _views(e)
        for p, snap in enumerate(e._snaps):
            if snap[2] is None:
                continue  # (no snapshot kept for a phase without room)
            twin = copy.deepcopy(e)
            assert twin._plan is not None
            start, snap_run = twin._starts[p], twin._snaps[p][2]
            assert snap_run is not None
            run = list(snap_run)
            planned = [list(w.segments) for w in run]
            twin._restore(twin._plan, p)
            for w, segs in zip(run, planned, strict=True):  # segments of the phases before p
                assert w.segments == [x for x in segs if x[0] < start], (i, p)
            checked += 1
            if mechanisms:
                continue  # (evictions since the plan ran lower its hit bounds: a later re-plan)
            twin.predict(twin._views[r.rid])
            for q in twin._views.values():  # everyone the full plan got to
                twin.predict(q)
            got = _views(twin)
            for rid, want in full.items():
                if want[3] is not None or want[4]:  # finished or aborted in the plan
                    assert got[rid] == want, (i, p, rid)
    assert checked > 20


def test_zero_length_steps_keep_whole_snapshots_that_restore_exactly() -> None:
    # instant steps (no rates): phases share a start time, so segment start times cannot
    # tell which phase appended a segment; such snapshots keep every request's state whole
    prof = get_profile("vllm-3b", slots=2, max_num_batched_tokens=64, prefix_caching=False,
                       kv_blocks=0, attention_decode_s=0.0, decode_tps=0.0, prefill_tps=0.0)  # fmt: skip
    rng = random.Random(3)
    e = Engine(prof)
    whole = 0
    for i in range(30):
        t = i * 0.5
        e.advance(t)
        r = EngineRequest(i, t, rng.randint(10, 200), rng.randint(1, 30), 1.0, t + 30.0)
        e.add(r)
        e.predict(r)
        if i % 5 != 4:
            continue
        assert e._plan is not None
        full = _views(e)
        for p, snap in enumerate(e._snaps):
            if snap[2] is None:
                continue
            whole += snap[4] == float("inf")
            twin = copy.deepcopy(e)
            assert twin._plan is not None
            twin._restore(twin._plan, p)
            for q in twin._views.values():
                twin.predict(q)
            got = _views(twin)
            for rid, want in full.items():
                if want[3] is not None or want[4]:
                    assert got[rid] == want, (i, p, rid)
    assert whole > 0


def test_plan_copy_sets_every_field_as_the_constructor_would() -> None:
    # EngineRequest.copy fills the slots itself (no __init__): a field added to the class
    # and not to copy would be left unset, or keep a value the constructor would not give
    r = EngineRequest(7, 1.5, 803, 97, 1.07, 60.0, hashes=(11, 12), plan_cached=16)
    r.prefilled, r.decoded, r.admitted, r.first_token, r.target = 803, 5.35, 1.6, 1.7, 803
    r.cached_tokens, r.preemptions, r.seen_ev, r.held, r.hashed = 16, 1, 3, 60, [11]
    r.flat_segments.extend((1.7, 0.02, 1.0, 4, 0.0))
    c = r.copy()
    built = EngineRequest(r.rid, r.arrival, r.prompt, r.output, r.speed, r.deadline,
                          r.prefilled, r.decoded, r.admitted, r.first_token, r.end,
                          r.aborted, [], r.hashes, r.target, r.cached_tokens, r.preemptions,
                          r.plan_cached, seen_ev=r.seen_ev)  # fmt: skip
    built.init = (r.decoded, r.first_token, r.admitted, r.target)
    for name in EngineRequest.__slots__:
        if name in ("fd", "ftok"):  # (unset until a forecast writes them, both ways)
            assert not hasattr(c, name), name
            continue
        assert getattr(c, name) == getattr(built, name), name
    assert c.flat_segments is not r.flat_segments and c.hashed is not r.hashed
