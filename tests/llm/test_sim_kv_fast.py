"""Five fast paths of the simulated engine's KV accounting held equal to what they replaced.

- ``KVCache.free_hits`` counts in C (``list.count`` over ``map``): equal to the generator
  expression it replaced (``_loop_free_hits``) on every state a random run of the cache's
  operations goes through.
- ``KVCache``'s free queue keeps a run of uncached blocks as one entry: block for block
  the one-entry-per-block queue it replaced (``_PerBlockQueue``).
- ``KVCache.lookup`` / ``hit_bound`` scan the prefix with a for loop: the same counts as the
  index loop they replaced (``_while_prefix``), prompts of 0 tokens up.
- ``kv_fit`` returns ``k`` at once when a bound of the blocks ``k`` steps add is below the
  free blocks: the same step count as counting them (``_kv_fit_by_blocks``).
- ``Engine._phase`` schedules the leading decodes of a KV-limited step in their own lean pass
  (taking the blocks of their next token there, stopping at one that would preempt): every
  request's outcome, bit for bit, equals main's before the change.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Sequence

import pytest

from agentlab.llm import get_profile
from agentlab.llm.sim_engine import Engine, EngineRequest
from agentlab.llm.sim_kv import KVCache, prompt_block_hashes
from agentlab.llm.sim_request import EPS
from agentlab.llm.sim_step import kv_fit


def _loop_free_hits(kv: KVCache, hashes: Sequence[int], n: int) -> int:
    """``KVCache.free_hits`` before it counted in C (the reference)."""
    return sum(1 for h in hashes[:n] if kv.users[h] == 0)


def test_free_hits_counted_in_c_equals_the_loop() -> None:
    rng = random.Random(5)
    # prompts sharing prefixes (so hits, evictions and re-registrations all happen)
    texts = [("abcd"[rng.randrange(4)] * 64 + f"{i}" * 400)[: rng.randrange(80, 900)]
             for i in range(40)]  # fmt: skip
    chains = [prompt_block_hashes(t, len(t) // 4) for t in texts]
    for blocks in (0, 24, 60):
        kv = KVCache(blocks, 16, True)
        held: list[tuple[int, list[int]]] = []  # (plain blocks, hashed) of each holder
        counted = 0
        for _ in range(3000):
            hs = chains[rng.randrange(len(chains))]
            prompt = len(hs) * 16 + rng.randrange(16)
            if rng.randrange(3) and held:  # one leaves (its tail freed first)
                kv.release(*held.pop(rng.randrange(len(held))))
                continue
            hit = kv.lookup(hs, prompt)
            free = kv.free_hits(hs, hit)
            assert free == _loop_free_hits(kv, hs, hit)
            counted += free
            need = -(-prompt // 16) - hit
            if need + free > kv.free_count():
                continue
            kv.acquire(hs, hit, prompt)
            kv.take(need)
            new = kv.register(hs[hit:])
            held.append((need - len(new), [*hs[:hit], *new]))
        assert counted > 0  # (free cached blocks were hit)


def _outcomes(seed: int, blocks: int, budget: int) -> tuple[str, int]:
    # the profile's speeds as they were at the reference commit (the digests below hold the
    # engine's code to it, not the profile's calibration, which has moved since)
    e = Engine(get_profile("vllm-3b", slots=6, kv_blocks=blocks, max_num_batched_tokens=budget,
                           prefill_tps=10340.0, overhead_s=0.0048))  # fmt: skip
    rng = random.Random(seed)
    reqs, t = [], 0.0
    for i in range(400):
        t += rng.expovariate(3.0)
        text = "common " * rng.randrange(1, 60) + f"req {i} " * rng.randrange(5, 80)
        prompt = len(text) // 4
        r = EngineRequest(i, t, prompt, rng.randrange(1, 400), rng.uniform(0.8, 1.2),
                          t + rng.choice([2.0, 20.0, 1e9]), hashes=prompt_block_hashes(text, prompt))  # fmt: skip
        e.add(r)
        reqs.append(r)
        e.advance(t)
        if i % 2:
            e.predict(r)
    e.advance(t + 1e6)
    out = repr([(r.rid, r.admitted, r.first_token, r.end, r.aborted, r.preemptions,
                 r.cached_tokens) for r in reqs])  # fmt: skip
    return hashlib.sha256(out.encode()).hexdigest()[:16], e.preemptions_total


@pytest.mark.parametrize(
    ("seed", "blocks", "budget", "digest", "preemptions"),
    [
        (1, 120, 0, "a63194cfa0c2a7b8", 15),
        (2, 200, 512, "2b9e363b627244e8", 0),
        (3, 90, 64, "bcedcc5865e4f9e8", 375),
    ],
)
def test_kv_limited_steps_give_the_per_block_loops_outcomes(
    seed: int, blocks: int, budget: int, digest: str, preemptions: int
) -> None:
    # Every request's admission, first token, end, abort, preemptions and cached tokens
    # (floats by repr: bit for bit) on tight KV caches, as the engine gave them before the
    # leading decodes took their blocks in their own pass and the KV loops moved to C (main
    # at 3714bd8); seed 3 preempts both from that pass's stop and from the loop after it.
    assert _outcomes(seed, blocks, budget) == (digest, preemptions)


class _PerBlockQueue(KVCache):
    """``KVCache`` before its free queue kept runs of uncached blocks as one entry: one
    entry per block (the reference for :func:`test_free_queue_runs_equal_one_entry_per_block`)."""

    def take(self, n: int) -> None:
        if not self.limited or n <= 0:
            return
        k = min(n, self.fresh)
        self.fresh -= k
        for _ in range(n - k):
            h = self.free.popitem(False)[1]
            if h is not None:
                del self.cached[h], self.users[h]
                self.evicted_total += 1

    def acquire(self, hashes: Sequence[int], n: int, prompt: int) -> None:
        for h in hashes[:n]:
            if self.users[h] == 0:
                del self.free[self.cached[h]]
            self.users[h] += 1

    def release(self, plain: int, hashed: Sequence[int]) -> None:
        if self.limited and plain > 0:
            self.free.update(dict.fromkeys(range(self._key + 1, self._key + plain + 1)))
            self._key += plain
        for h in reversed(hashed):
            self.users[h] -= 1
            if self.users[h] == 0:
                self.free[self.cached[h]] = h

    def free_count(self) -> float:
        return self.fresh + len(self.free)

    def free_queue(self) -> list[tuple[int, int | None]]:
        return list(self.free.items())


def test_free_queue_runs_equal_one_entry_per_block() -> None:
    # the same random operations on both: after each, the same queue block for block (keys
    # included), cache, users and evictions; and the saved state restores to the same queue
    rng = random.Random(7)
    texts = [("abcd"[rng.randrange(4)] * 64 + f"{i}" * 400)[: rng.randrange(80, 900)]
             for i in range(40)]  # fmt: skip
    chains = [prompt_block_hashes(t, len(t) // 4) for t in texts]
    for blocks in (24, 60, 200):
        kv, ref = KVCache(blocks, 16, True), _PerBlockQueue(blocks, 16, True)
        held: list[tuple[int, list[int]]] = []
        for step in range(3000):
            hs = chains[rng.randrange(len(chains))]
            prompt = len(hs) * 16 + rng.randrange(40)
            if rng.randrange(3) and held:
                pair = held.pop(rng.randrange(len(held)))
                kv.release(*pair)
                ref.release(*pair)
            else:
                hit = kv.lookup(hs, prompt)
                need = -(-prompt // 16) - hit
                if need + kv.free_hits(hs, hit) <= kv.free_count():
                    for c in (kv, ref):
                        c.acquire(hs, hit, prompt)
                        c.take(need)
                    new = kv.register(hs[hit:])
                    assert ref.register(hs[hit:]) == new
                    held.append((need - len(new), [*hs[:hit], *new]))
            assert kv.free_queue() == ref.free_queue()
            assert (kv.cached, kv.users) == (ref.cached, ref.users)
            assert (kv.evicted_total, kv.free_count()) == (ref.evicted_total, ref.free_count())
            if step % 500 == 0:
                back = KVCache(blocks, 16, True)
                back.restore_state(kv.export_state())
                assert back.free_queue() == kv.free_queue() and back.used() == kv.used()
        assert kv.evicted_total > 0


def _while_prefix(
    kv: KVCache, hashes: Sequence[int], prompt: int, hit: Callable[[int], bool]
) -> int:
    """``lookup`` / ``hit_bound``'s prefix scan before it was a for loop (the reference)."""
    top = min(len(hashes), (prompt - 1) // kv.block_size)
    i = 0
    while i < top and hit(hashes[i]):
        i += 1
    return i


def test_prefix_scans_equal_the_index_loops() -> None:
    # prompts from 0 tokens up, shorter and longer than their hash chains
    rng = random.Random(11)
    kv = KVCache(0, 16, True)
    chain = list(range(100, 140))
    kv.register(chain[:25])
    live = {h: rng.randrange(3) for h in chain}
    left = {h: rng.randrange(2) for h in chain}
    for prompt in [*range(0, 40), *range(380, 420), 700]:
        for n in (0, 1, 20, 25, 26, 40):
            hs = chain[:n]
            assert kv.lookup(hs, prompt) == _while_prefix(kv, hs, prompt, kv.cached.__contains__)
            for own in (0, 1):

                def hit(h: int, own: int = own) -> bool:
                    return h in kv.cached or live.get(h, 0) - left.get(h, 0) > own

                assert kv.hit_bound(hs, prompt, live, own, left) == _while_prefix(
                    kv, hs, prompt, hit
                )


def _kv_fit_by_blocks(decodes: list[EngineRequest], k: int, free: int, bs: int) -> int:
    """``kv_fit`` before its bound: every step count's blocks counted (the reference)."""

    def extra(j: int) -> int:
        total = 0
        for r in decodes:
            x = r.decoded + j * r.speed - EPS
            if x > r.held * bs - r.prompt:
                total += -(-(r.prompt + math.ceil(x)) // bs) - r.held
        return total

    return max([j for j in range(1, k + 1) if extra(j) <= free], default=1)


def test_kv_fit_bound_gives_the_counted_steps() -> None:
    # decodes holding the blocks of their next token (as the scheduling pass leaves them),
    # free blocks from none to plenty: the same step count as counting every step's blocks
    rng = random.Random(13)
    for _ in range(400):
        decodes = []
        for i in range(rng.randrange(1, 9)):
            r = EngineRequest(i, 0.0, rng.randrange(1, 900), 400, rng.uniform(0.7, 1.6))
            r.decoded = rng.choice([1.0, rng.uniform(1, 300), float(rng.randrange(1, 300))])
            need = r.prompt + math.ceil(r.decoded + r.speed - EPS)
            r.held = -(-need // 16) + rng.choice([0, 0, 1])
            decodes.append(r)
        k = rng.randrange(2, 400)
        kv = KVCache(10_000, 16, True)
        kv.fresh = rng.choice([0, 1, 5, 20, 60, 200, 1000, 10_000])
        speeds = sum([r.speed for r in decodes])
        want = _kv_fit_by_blocks(decodes, k, kv.fresh, 16)
        assert kv_fit(decodes, k, kv, 16) == want
        assert kv_fit(decodes, k, kv, 16, speeds) == want
