"""The plan's forecasts (:meth:`~agentlab.llm.sim_plan.Planner._forecast`): where nobody is
queued in the plan, a prediction's end (or abort) comes from the decode runs' float
operations without moving the plan. It must be byte for byte what the plan's phases give:
the end, the abort, the time of every token (a token before the last simulates the
phases), and every later prediction."""

from __future__ import annotations

import copy
import random

import pytest

from agentlab.llm import get_profile
from agentlab.llm.sim_engine import Engine, EngineRequest
from agentlab.llm.sim_kv import prompt_block_hashes
from agentlab.llm.sim_profiles import SimProfile


def _profile(mechanisms: bool, slots: int) -> SimProfile:
    # (a decode step's time grows with the batch: the forecast counts who is left)
    if mechanisms:  # (attention: the forecast sums contexts; KV: the plan ignores it)
        return get_profile("vllm-3b", slots=slots, kv_blocks=400, attention_decode_s=2e-7,
                           decode_degrade=0.05)  # fmt: skip
    return get_profile("vllm-3b", slots=slots, prefix_caching=False, kv_blocks=0,
                       attention_decode_s=0.0, decode_degrade=0.05)  # fmt: skip


def _requests(seed: int, n: int) -> list[tuple[float, EngineRequest]]:
    rng = random.Random(seed)
    out = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(4.0)
        prompt = rng.randint(50, 900)
        text = "shared system prompt " * 20 + f"agent {i % 7} " * (prompt // 2)
        # tight deadlines for some: forecasts that end in a client abort
        deadline = t + (rng.uniform(0.5, 3.0) if i % 3 == 0 else 60.0)
        r = EngineRequest(i, t + 0.005, prompt, rng.randint(1, 300),
                          rng.lognormvariate(0, 0.1), deadline,
                          hashes=prompt_block_hashes(text, prompt))  # fmt: skip
        out.append((t, r))
    return out


@pytest.mark.parametrize("mechanisms", [False, True])
@pytest.mark.parametrize("slots", [2, 8])
def test_a_forecast_equals_the_planned_phases(mechanisms: bool, slots: int) -> None:
    prof = _profile(mechanisms, slots)
    e = Engine(prof)
    forecast = aborted = tokens = 0
    for i, (t, r) in enumerate(_requests(7 + slots, 120)):
        e.advance(t)
        e.add(r)
        twin = copy.deepcopy(e)
        v = e.predict(r)
        mine = next(x for x in twin._s.q if x.rid == r.rid)  # (the twin's own request)
        w = twin._predict(mine, False)  # (the plan's phases, no forecast)
        assert w.fc is None
        forecast += v.fc is not None
        aborted += v.fc is not None and v.aborted
        assert (v.end, v.aborted, v.first_token) == (w.end, w.aborted, w.first_token), i
        for m in (r.output, r.output + 3):
            assert v.time_of_token(m) == w.time_of_token(m), (i, m)
        if v.fc is not None and r.output > 2 and i % 4 == 0:
            # a token before the last: the forecast view simulates its phases
            tokens += 1
            third = copy.deepcopy(e)
            u = third._views[r.rid]
            for m in (2, r.output // 2, r.output - 1):
                assert u.time_of_token(m) == w.time_of_token(m), (i, m)
            assert u.fc is None and u.segments == w.segments
            assert (u.end, u.aborted) == (w.end, w.aborted)
    assert forecast > 20 and aborted > 0 and tokens > 3, (forecast, aborted, tokens)


@pytest.mark.parametrize("mechanisms", [False, True])
def test_predictions_with_forecasts_equal_those_without(mechanisms: bool) -> None:
    # a closed loop of predictions and advances: forecasts made, dropped (arrivals, restores,
    # phases) and made again give every prediction the plan alone gives
    prof = _profile(mechanisms, 4)
    e, plain = Engine(prof), Engine(prof)
    plain._forecast = lambda plan, v: False  # type: ignore[method-assign]
    reqs = _requests(3, 150)
    twins = {r.rid: copy.deepcopy(r) for _, r in reqs}
    for i, (t, r) in enumerate(reqs):
        for eng, req in ((e, r), (plain, twins[r.rid])):
            eng.advance(t)
            eng.add(req)
        for _, q in reqs[max(0, i - 12) : i + 1]:  # the latest arrivals, asked again
            a, b = e.predict(q), plain.predict(twins[q.rid])
            assert (a.end, a.aborted) == (b.end, b.aborted), (i, q.rid)
            assert a.time_of_token(q.output) == b.time_of_token(q.output), (i, q.rid)
    e.advance(1e9)
    plain.advance(1e9)
    for _, q in reqs:
        p = twins[q.rid]
        assert (q.end, q.aborted, q.segments) == (p.end, p.aborted, p.segments)
