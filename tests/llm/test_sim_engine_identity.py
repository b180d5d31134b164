"""The incremental engine gives the old engine's times where the model is unchanged.

``engine_reference.py`` is the engine before this rewrite. Both are driven with the same
random workloads (arrivals in bursts and apart, prompts up to 3,000 tokens, client
deadlines that abort queued and running requests, the ``vllm-3b`` step model with chunked
prefill) and the same interleaving of ``advance`` and ``predict`` that the backend does;
every request's admission, first token, end and abort, and every prediction asked on the
way, must agree (to float rounding: the two split decode runs at different steps).
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from agentlab.llm import get_profile
from agentlab.llm import sim_engine as new
from tests.llm import engine_reference as old

# the mechanisms the old engine lacks, off (sim/vllm-3b turns on the roofline and the
# attention term of decode)
OFF = {
    "prefix_caching": False,
    "kv_blocks": 0,
    "step_roofline": False,
    "attention_decode_s": 0.0,
}


def _drive(mod: Any, prof: Any, seed: int, n: int = 50) -> tuple[list[Any], list[Any]]:
    rng = random.Random(seed)
    e = mod.Engine(prof)
    reqs: list[Any] = []
    preds: list[Any] = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(3.0) if rng.random() < 0.8 else 0.0
        e.advance(t)
        deadline = t + rng.choice([math.inf, 5.0, 30.0])
        r = mod.EngineRequest(i, t + 0.01, rng.randint(1, 3000), rng.randint(1, 400),
                              rng.uniform(0.8, 1.2), deadline)  # fmt: skip
        e.add(r)
        reqs.append(r)
        for q in rng.sample(reqs, min(3, len(reqs))):
            v = e.predict(q)
            preds.append((q.rid, v.first_token, v.end, v.aborted))
    e.advance(math.inf, inclusive=True)
    final = [(r.rid, r.admitted, r.first_token, r.end, r.aborted) for r in reqs]
    return final, preds


def _same(a: list[Any], b: list[Any]) -> None:
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            if isinstance(u, float) and isinstance(v, float):
                assert v == pytest.approx(u, rel=1e-12, abs=1e-9), (x, y)
            else:
                assert u == v, (x, y)


@pytest.mark.parametrize("slots", [1, 8])
def test_new_engine_with_mechanisms_off_matches_the_old_engine(slots: int) -> None:
    prof = get_profile("vllm-3b", slots=slots, **OFF)
    for seed in range(12):
        final_old, preds_old = _drive(old, prof, seed)
        final_new, preds_new = _drive(new, prof, seed)
        _same(final_old, final_new)
        _same(preds_old, preds_new)
