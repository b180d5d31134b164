"""Decode-only phases on their own path (:mod:`agentlab.llm.sim_decode`) give the general
step's results byte for byte: the same workloads run with that path and with every phase
forced through ``Engine._phase``'s general code (no carried bound), and every request's
admission, first token, end, abort and decode segments, and every prediction asked on the
way, must be equal (``==`` on floats, not approximately)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from agentlab.llm import get_profile
from agentlab.llm.sim_engine import Engine, EngineRequest
from agentlab.llm.sim_kv import KVCache
from agentlab.llm.sim_request import Snap, State


class _GeneralOnly(Engine):
    """The engine with the decode-run path switched off: no phase carries its bound."""

    def _phase(
        self, s: State, limit: float, kv: KVCache | None, snaps: list[Snap] | None, record: bool
    ) -> bool:
        s.rem = None
        return super()._phase(s, limit, kv, snaps, record)


def _drive(engine: Engine, seed: int, n: int = 120) -> tuple[list[Any], list[Any]]:
    rng = random.Random(seed)
    reqs: list[EngineRequest] = []
    preds: list[Any] = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(4.0) if rng.random() < 0.8 else 0.0
        engine.advance(t)
        deadline = t + rng.choice([math.inf, 5.0, 30.0])
        r = EngineRequest(i, t + 0.01, rng.randint(1, 3000), rng.randint(1, 400),
                          rng.uniform(0.8, 1.2), deadline)  # fmt: skip
        engine.add(r)
        reqs.append(r)
        for q in rng.sample(reqs, min(3, len(reqs))):
            v = engine.predict(q)
            preds.append((q.rid, v.first_token, v.end, v.aborted, list(v.segments)))
    engine.advance(math.inf, inclusive=True)
    final = [(r.rid, r.admitted, r.first_token, r.end, r.aborted, r.segments) for r in reqs]
    return final, preds


@pytest.mark.parametrize(
    "overrides",
    [
        {"prefix_caching": False, "kv_blocks": 0, "attention_decode_s": 0.0},
        {"prefix_caching": False, "kv_blocks": 0, "attention_decode_s": 0.0, "slots": 2},
        {
            "prefix_caching": False,
            "kv_blocks": 0,
            "attention_decode_s": 0.0,
            "max_num_batched_tokens": 0,
            "step_roofline": False,
        },
        {"prefix_caching": True, "kv_blocks": 0, "attention_decode_s": 0.0},
        {"prefix_caching": False, "kv_blocks": 0},  # the attention term
        {},  # as shipped: prefix caching, KV capacity and the attention term
        {"kv_blocks": 300},  # preemptions: runs whose next blocks do not fit fall back
    ],
)
def test_decode_runs_give_the_general_steps_results(
    overrides: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    prof = get_profile("vllm-3b", **overrides)
    runs = 0
    decode_run = Engine._decode_run

    def counted(self: Engine, *a: Any) -> bool:
        nonlocal runs
        runs += 1
        return decode_run(self, *a)

    monkeypatch.setattr(Engine, "_decode_run", counted)
    for seed in range(6):
        fast = _drive(Engine(prof), seed)
        general = _drive(_GeneralOnly(prof), seed)
        assert fast == general
    assert runs > 0  # (the path was taken)
