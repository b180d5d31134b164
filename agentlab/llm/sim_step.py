"""Step arithmetic of the simulated vLLM engine (:mod:`agentlab.llm.sim_engine`): the
step-time cost model, the length of a run of growing decode steps, and how many decode
steps fit in a finite KV cache.
"""

from __future__ import annotations

import math

from agentlab.llm.sim_kv import KVCache
from agentlab.llm.sim_profiles import SimProfile
from agentlab.llm.sim_request import EPS, EngineRequest

__all__ = ["idle_ttft", "kv_fit", "register_blocks", "step_time", "steps_to", "steps_within"]


def step_time(
    p: SimProfile, n_seqs: int, prefill: int, attn: float, n_dec: int, ctx: float
) -> float:
    """Time of one step of ``n_seqs`` sequences with ``prefill`` prompt tokens, prefill
    attention work ``attn`` (sum of ``c * (p + c / 2)`` over its chunks) and ``n_dec``
    decodes whose contexts (prompt + decoded tokens) sum to ``ctx`` (the engine adds them up
    as it schedules the step, left to right; see the step-time formula in
    :mod:`agentlab.llm.sim_engine`).

    ``step_roofline`` off (the default): the weight-read base and the prompt tokens add up.
    On: the step is ``max(base, tokens / prefill_tps)`` over all ``tokens`` it computes
    (prompt chunks + one per decode): a step reads the weights once, whatever it computes,
    and below the knee ``base * prefill_tps`` tokens that read is what takes the time."""
    dt = (1.0 + p.decode_degrade * (n_seqs - 1)) / p.decode_tps if p.decode_tps else 0.0
    if p.prefill_tps:
        if p.step_roofline:
            roof = (prefill + n_dec) / p.prefill_tps
            if roof > dt:  # (max(dt, roof) without the builtin's argument parsing)
                dt = roof
        else:
            dt += prefill / p.prefill_tps
    if p.attention_prefill_s and attn:
        dt += p.attention_prefill_s * attn
    a_dec = p.attention_decode_s
    if a_dec and n_dec:
        dt += a_dec * ctx
    return dt


def idle_ttft(p: SimProfile, prompt: int) -> float:
    """TTFT of a ``prompt``-token request (uncached, no chunking) on an idle server:
    ``overhead_s`` plus the one step that prefills it and samples its first token."""
    attn = prompt * prompt / 2 if p.attention_prefill_s else 0.0
    return p.overhead_s + step_time(p, 1, prompt, attn, 0, 0.0)


def steps_to(span: float, dt: float, ddt: float) -> int:
    """Fewest steps (of ``dt``, growing by ``ddt`` each) that reach ``span``."""
    if not ddt:
        return math.ceil(span / dt - EPS)
    if span <= 0:
        return 0
    # k * dt + ddt * k (k - 1) / 2 >= span; the count as a float in the products: the same
    # values (an int operand is converted exactly), float-with-float ops (CPython 3.11
    # specialises them; an int operand takes the generic path)
    b = dt - ddt / 2.0
    k = math.ceil((-b + math.sqrt(b * b + 2.0 * ddt * span)) / ddt - EPS)
    if k < 0:  # (max(0, k) without the builtin's argument parsing: a call a decode run)
        k = 0
    kf = float(k)
    low = span - EPS
    while kf > 0.0:
        m = kf - 1.0
        if m * dt + ddt * m * (kf - 2.0) / 2.0 < low:
            break
        kf = m
    while kf * dt + ddt * kf * (kf - 1.0) / 2.0 < low:
        kf += 1.0
    return int(kf)


def steps_within(k: int, span: float, dt: float, ddt: float) -> int:
    """A run of ``k`` decode steps (of ``dt``, growing by ``ddt``) cut at a horizon
    ``span`` away (a deadline, an arrival, a limit): the fewest steps that reach it where
    that is fewer, at least 1. The one copy for the engine's decode phases, the decode-only
    run and the plan's forecast."""
    if not ddt:  # (steps_to without growth, inline)
        kh = math.ceil(span / dt - EPS)
    else:
        m = float(k - 1)
        if k >= 1 and m * dt + ddt * m * (m - 1.0) / 2.0 < span - EPS:
            return k  # k - 1 steps fall short of it: steps_to's count is not below k
        kh = steps_to(span, dt, ddt)
    if kh < k:
        k = kh
    return k if k >= 1 else 1


def kv_fit(decodes: list[EngineRequest], k: int, kv: KVCache, bs: int, speeds: float = -1.0) -> int:
    """The most decode steps (at most ``k``, at least 1) whose new blocks fit in the cache.

    Each decode holds the blocks of its next token (the step's scheduling pass took them:
    ``held * bs >= prompt + ceil(decoded + speed - EPS)``), so ``k`` steps add fewer than
    ``((k - 1) * speed + 1) / bs + 1`` blocks to it: when that bound, summed (``speeds``:
    the decodes' speeds summed, if the caller has it), is below the free blocks, all ``k``
    fit without counting them one by one (most phases: the cache is rarely that full)."""
    free = kv.free_count()
    if speeds < 0.0:
        speeds = sum([r.speed for r in decodes])
    n = len(decodes)
    if ((k - 1) * speeds + n) / bs + n + 1 < free:  # (+ 1: a margin for the rounding)
        return k

    def extra(j: int) -> int:
        total = 0
        for r in decodes:
            x = r.decoded + j * r.speed - EPS
            if x > r.held * bs - r.prompt:  # (ceil(x) > n is x > n for an integer n)
                total += -(-(r.prompt + math.ceil(x)) // bs) - r.held
        return total

    if extra(k) <= free:
        return k
    lo, hi = 1, k  # extra(lo) fits (allocated by the scheduling pass), extra(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if extra(mid) <= free:
            lo = mid
        else:
            hi = mid
    return lo


def register_blocks(kv: KVCache | None, r: EngineRequest, tokens: int) -> None:
    """Cache the full blocks of ``r``'s first ``tokens`` prompt tokens when the step that
    computes them is scheduled, as vLLM v1 does (``KVCacheManager.allocate_slots`` caches
    up to ``num_computed_tokens + num_new_tokens`` before the forward pass; a block's hash
    is of its token ids): a request admitted later in the same step hits them (each layer
    writes its KV before its attention reads it)."""
    assert kv is not None
    if r.nreg < len(r.hashes):
        up = min(len(r.hashes), tokens // kv.block_size)
        if up > r.nreg:
            r.hashed += kv.register(r.hashes[r.nreg : up])
            r.nreg = up
