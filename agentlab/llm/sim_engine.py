"""A vLLM-like serving engine for the simulator: continuous batching with chunked prefill,
attention cost, automatic prefix caching over KV blocks, KV capacity and preemption.

The engine is a discrete-event model of vLLM's (v1) scheduler loop (``vllm/v1/core/sched/
scheduler.py``), advanced lazily:

- **Steps.** The engine runs one forward pass ("step") at a time. At the start of a step it
  has a token budget of ``max_num_batched_tokens`` (``0`` = unlimited). Running requests
  come first, in admission order: a decoding request takes 1 token of the budget, a
  request still in prefill takes ``min(prompt left, budget left)`` tokens (a chunk). Then
  waiting requests are admitted in arrival order (FCFS) while fewer than ``max_num_seqs``
  (the profile's ``slots``) are running, budget is left and their KV blocks fit; each takes
  a prefill chunk. So a long prompt arriving under load is split over several steps and
  shares each step with the running decodes: TTFT grows with load, and decodes slow while
  prefills run.
- **Step time.** ``dt = (1 + decode_degrade * (n - 1)) / decode_tps + prefill / prefill_tps
  + attention_decode_s * sum(context of each decode) + attention_prefill_s * sum(c * (p +
  c / 2))`` for ``n`` sequences in the step, ``prefill`` prompt tokens in it, and prefill
  chunks of ``c`` tokens starting at position ``p``: one sequence alone decodes at
  ``decode_tps``; each extra sequence costs a ``decode_degrade`` share of a step; prompt
  tokens cost ``1 / prefill_tps`` each; attention reads every cached token of each sequence
  (``attention_* = 0``: none). ``step_roofline``: the first two terms are ``max(base,
  (prefill + decodes) / prefill_tps)`` instead (:func:`~agentlab.llm.sim_step.step_time`).
- **Tokens.** The step that finishes a request's prefill samples its first token (TTFT is
  that step's end). Each later step adds ``speed`` tokens, a per-request factor drawn
  log-normally with mean 1 (``decode_jitter`` is its sigma; it stands for what makes real
  requests in one batch finish at different rates: speculative-decoding acceptance,
  detokenisation and network jitter). A request ends at the step that reaches its length.
- **KV cache** (:mod:`agentlab.llm.sim_kv`): with ``prefix_caching`` a request scheduled for
  the first time skips the prompt blocks found cached (its ``cached_tokens``), including
  blocks of requests scheduled earlier in the same step (vLLM v1 caches them then); with
  ``kv_blocks > 0`` KV memory is finite: a step that cannot allocate the blocks of a
  running request preempts the last-admitted running request (recompute: its blocks are
  freed, it goes back to the front of the queue and later re-prefills its prompt and the
  tokens it had produced), and no waiting request is admitted in a step that preempted
  (as vLLM v1). ``prefix_caching = false`` and ``kv_blocks = 0``: no KV model at all.
- **Clients.** A request enters the scheduler ``overhead_s`` after it is sent (HTTP, tokenising);
  one whose client deadline passes is aborted at the next step boundary, freeing its slot.

Runs of decode-only steps are executed as one phase (their count is computed, not looped;
with attention the step time grows linearly within the phase and times are summed in
closed form), so a 500-token reply costs a handful of phases, not 500 iterations.

**Committed steps and the plan.** :meth:`Engine.advance` executes the steps that start
before "now" (the committed state, with the full KV model). Future arrivals are unknown,
so :meth:`Engine.predict` reads a *plan*: the schedule of the requests present, with no
further arrivals. Because newcomers queue behind everyone present and only lengthen steps,
that plan is a lower bound: a caller sleeps until its predicted time, advances the engine
to "now" and re-checks (see :mod:`agentlab.llm.sim_backend`). The plan is incremental: it
is simulated only as far as a question needs, and an arrival re-plans only from the first
step it could join (the step at which the request ahead of it is admitted, or its arrival)
by restoring a snapshot taken at that step; an arrival stuck behind a queue that the plan
has not yet admitted changes nothing planned. A request still queued when the plan passes
its deadline is planned aborted there and then (every later step aborts it before it could
be admitted), so under overload its prediction does not simulate the queue ahead of it
to the end. The plan ignores KV capacity and predicts
prefix-cache hits from every prompt block seen (both optimistic, so still a lower bound);
when the committed state falls behind it, :meth:`Engine.replan` starts it afresh. A
queued request keeps the prefix-cache bound its planned admission took; the saved state
carries it, so a restored engine plans (and predicts) as this one does
(:mod:`agentlab.llm.sim_engine_state`).

Here: the step loop; the plan: :mod:`agentlab.llm.sim_plan`; decode-only phases (most of
them) on a path of their own: :mod:`agentlab.llm.sim_decode`; the request and state:
:mod:`agentlab.llm.sim_request`; step time and arithmetic: :mod:`agentlab.llm.sim_step`;
KV: :mod:`agentlab.llm.sim_kv`; saved state: :mod:`agentlab.llm.sim_engine_state`.
"""

from __future__ import annotations

import collections
import math
from collections import Counter

from agentlab.llm.sim_decode import DecodeRun, advance_decodes, take_later_blocks
from agentlab.llm.sim_engine_state import EngineState
from agentlab.llm.sim_kv import KVCache
from agentlab.llm.sim_plan import Planner
from agentlab.llm.sim_profiles import SimProfile
from agentlab.llm.sim_request import EPS, EngineRequest, Snap, State
from agentlab.llm.sim_step import kv_fit, register_blocks, step_time, steps_within

__all__ = ["Engine", "EngineRequest"]

_INF = math.inf
#: Counter.update's C loop (collections' own helper), without update's Python frame and
#: its Mapping isinstance check: two calls a request on the as-shipped path (issue 22)
_count_elements = collections._count_elements  # type: ignore[attr-defined]


class Engine(Planner, DecodeRun, EngineState):
    """The scheduler state of one simulated vLLM server; see the module docstring."""

    def __init__(self, profile: SimProfile) -> None:
        self.profile = profile
        p = profile
        self.kv: KVCache | None = None
        if p.kv_blocks > 0 or p.prefix_caching:
            self.kv = KVCache(p.kv_blocks, p.block_size, p.prefix_caching)
        self._kv_limited = p.kv_blocks > 0
        self._s = State()
        self.steps_total = 0
        self.finished_total = 0
        self.aborted_total = 0
        self.generated_total = 0  # tokens of finished requests
        self.preemptions_total = 0
        self._version = 0
        self._plan: State | None = None
        self._views: dict[int, EngineRequest] = {}
        self._snaps: list[Snap] = []
        self._starts: list[float] = []  # phase start of each snapshot
        self._room: list[bool] = []  # whether each phase had room for one more request
        self._doomed: list[EngineRequest] = []  # plan requests marked aborted ahead of time
        self._fc: list[EngineRequest] = []  # plan views holding a forecast end
        # step time of a decode-only step by batch size (without attention), for a profile
        self._dt_decode: tuple[SimProfile, dict[int, float]] = (profile, {})
        self._prune_len = 1024  # prune the snapshots past this many (amortised: O(1) a call)
        # prompt block hashes of the requests in the engine (refcounts): with the committed
        # cache, every block that can be cached when a queued request is scheduled; those
        # added less those that left (both counted in C; re-counted in _recount)
        self._live: Counter[int] = Counter()
        self._left: Counter[int] = Counter()
        self._left_max = 4096

    # --- public -------------------------------------------------------------------------

    @property
    def t(self) -> float:
        """End of the last committed step."""
        return self._s.t

    @property
    def running(self) -> list[EngineRequest]:
        """Requests running after the last committed step."""
        return self._s.running

    @property
    def version(self) -> int:
        """Bumped when the future changed in a way the plan cannot follow (a cancel)."""
        return self._version

    @version.setter
    def version(self, v: int) -> None:
        self._version = v
        self._s.dmin = None  # (a cancel lowers a running request's deadline)
        self.replan()

    def add(self, req: EngineRequest) -> None:
        """Queue a request (arrivals must come in non-decreasing ``arrival`` order).

        Raises:
            ConfigError: with a finite KV cache, the request could never fit in it.
        """
        p = self.profile
        if self._kv_limited and self.kv is not None:
            self.kv.check_fits(req.prompt, req.output, p.name)
        if p.prefix_caching and req.hashes:
            # an upper bound of its hits: cached now, or computed by a request ahead of it
            kv = self.kv
            assert kv is not None
            hits = kv.hit_bound(req.hashes, req.prompt, self._live, 0, self._left)
            req.plan_cached = hits * p.block_size
            req.seen_ev = kv.evicted_total
            _count_elements(self._live, req.hashes)  # (Counter.update's C loop, no frame)
        self._s.q.append(req)
        plan = self._plan
        if plan is not None:
            if self._fc:  # (forecasts assumed no arrival)
                self._unforecast()
            v = req.copy()
            self._replan_for(plan, v)
            plan.q.append(v)
            self._views[req.rid] = v

    def advance(self, now: float, *, inclusive: bool = False) -> None:
        """Execute every step that starts before ``now``.

        A step starting exactly at ``now`` is left for later (``inclusive=False``), so a
        request arriving at ``now`` joins it: simultaneous arrivals batch together.
        """
        limit = now + EPS if inclusive else now - EPS
        s, kv = self._s, self.kv
        if s.running and not s.t < limit:
            # a busy engine whose next step starts at or after ``limit`` has nothing to run
            # (most calls): the committed queue and blocks that left are as the last call
            # left them (only a phase moves them), so only the plan may need pruning
            if len(self._starts) > self._prune_len:
                self._prune(now)
            return
        # (an idle engine may still drop aborted queued requests)
        while (s.t < limit or not s.running) and self._phase(s, limit, kv, None, True):
            pass
        if s.qi > 256:  # (often: requests that left are freed as they go, not 4,096 at a
            # time: fewer young objects counted for the cyclic GC, 61 -> 51 collections in
            # sim_engine.py's 6,000 calls)
            del s.q[: s.qi]
            s.qi = 0
        if len(self._starts) > self._prune_len:
            self._prune(now)
        if len(self._left) > self._left_max:
            self._recount()

    def load(self) -> tuple[int, int]:
        """(running, waiting) right now (waiting includes requests still in transit)."""
        s = self._s
        return len(s.running), sum(1 for r in s.q[s.qi :] if not r.done)

    def kv_usage(self) -> float:
        """Share of the KV blocks held by requests (0 with an unlimited cache)."""
        kv = self.kv
        return kv.used() / kv.num_blocks if kv is not None and kv.limited else 0.0

    # --- the step loop ------------------------------------------------------------------

    def _gone(self, r: EngineRequest) -> None:
        # a committed request left the engine: its blocks are no longer "to be computed"
        self._views.pop(r.rid, None)
        if r.hashes:
            _count_elements(self._left, r.hashes)  # (as Counter.update, no frame)

    def _abort(self, r: EngineRequest, record: bool) -> None:
        r.aborted = True
        if record:
            self.aborted_total += 1
            self._gone(r)
            if self.kv is not None and (r.held or r.hashed):
                self.kv.release(r.held - len(r.hashed), r.hashed)
                r.held, r.hashed = 0, []

    def _preempt(self, r: EngineRequest, s: State, kv: KVCache) -> None:
        kv.release(r.held - len(r.hashed), r.hashed)
        r.held, r.hashed, r.nreg = 0, [], 0
        r.prefilled = 0
        r.target = r.prompt + int(r.decoded + EPS)  # recompute what it had produced
        r.preemptions += 1
        self.preemptions_total += 1
        if s.qi > 0:  # back to the front of the queue
            s.qi -= 1
            s.q[s.qi] = r
        else:
            s.q.insert(0, r)

    def _phase(
        self,
        s: State,
        limit: float,
        kv: KVCache | None,
        snaps: list[Snap] | None,
        record: bool,
    ) -> bool:
        """Execute one phase (a step, or a run of identical decode steps) starting before
        ``limit``; False when there is none. ``kv`` is None in the plan."""
        p = self.profile
        t = s.t
        running, q = s.running, s.q
        if not running:
            qi, n = s.qi, len(q)
            while qi < n:
                r = q[qi]
                if r.aborted:  # (marked by predict, or kept by a tail restore)
                    r.left_at = max(t, r.arrival)
                    qi += 1
                elif r.deadline <= max(t, r.arrival) + EPS:
                    self._abort(r, record)
                    r.left_at = max(t, r.arrival)
                    qi += 1
                else:
                    break
            s.qi = qi
            if qi == n:
                return False
            t = max(t, q[qi].arrival)  # idle engine: wake at the next arrival
        if t >= limit:
            return False
        dmin = s.dmin  # (carried from the last phase unless someone left since)
        if dmin is None:  # (a loop, not min(): the builtin parses its arguments each call)
            dmin = _INF
            for r in running:
                if r.deadline < dmin:
                    dmin = r.deadline
        if s.rem is not None and dmin > t + EPS:
            # all decoding, none to abort: a decode run unless someone can be admitted
            qi, n = s.qi, len(running)
            if (p.max_num_batched_tokens >= n or p.max_num_batched_tokens <= 0) and (
                0 < p.slots <= n or qi == len(q) or (q[qi].arrival > t + EPS and not q[qi].aborted)
            ):
                done = self._decode_run(s, t, limit, dmin, snaps, record, kv)
                if done is not None:
                    return done
        snap_run: list[EngineRequest] | None = None
        if snaps is not None:
            starts = self._starts
            # a phase starting where the one before it did (zero-length steps): segment
            # start times cannot tell the two apart, so every request's state is kept whole
            whole = starts[-1] >= t if starts else False
            starts.append(t)
            if 0 < p.slots <= len(running) and dmin > t + EPS:
                # all slots taken and none freed by an abort: the phase ends without room,
                # so no arrival re-plans from it (a repair goes back to an earlier snapshot)
                snaps.append((s.t, s.qi, None, (), t))
            else:
                snap_run = list(running)  # (taken after the leading decodes are known)
        # client aborts take effect at the step boundary
        if dmin <= t + EPS:
            for r in running:
                if r.deadline <= t + EPS:
                    self._abort(r, record)
            running[:] = [r for r in running if not r.aborted]
            dmin = min([r.deadline for r in running]) if running else _INF
            s.rem = None  # (it may have been an aborted request's)
        limited = kv is not None and kv.limited
        caching_kv = kv is not None and kv.caching
        bs = p.block_size
        budget = p.max_num_batched_tokens if p.max_num_batched_tokens > 0 else _INF
        chunks: list[tuple[EngineRequest, int]] = []
        decodes: list[EngineRequest]
        attn = 0.0  # prefill attention work: sum of c * (p + c / 2)
        prefill = 0  # prompt tokens in the step
        ctx = 0.0  # the decodes' contexts, summed left to right (as sum() would)
        a_dec = p.attention_decode_s
        rem = _INF  # least decode steps a decode needs to finish (folded into the pass)
        preempted = False
        i = 0
        if not limited and budget >= len(running):
            # the leading decodes (the common case: all of them): each takes 1 token, so the
            # budget cannot run out before the first prefill chunk; a slice of ``running``
            # (no append per request), up to the first in prefill (found by identity, in C)
            i = len(running)
            carried = s.rem if not a_dec else None
            if carried is not None:
                rem = carried  # all decoding, their least steps carried from the last phase
            for r in running if carried is None else ():
                if r.prefilled < r.target:
                    i = running.index(r)
                    break
                if a_dec:
                    ctx += r.promptf + r.decoded
                x = (r.outf - r.decoded) / r.speed
                if x < rem:
                    rem = x
            decodes = running[:i]
            budget -= i
        else:
            if limited and budget >= len(running):
                # the same with the block accounting: a leading decode whose next token
                # needs a block that is free takes it here; one that would preempt (not
                # enough free) stops this pass, and the loop below schedules it and everyone
                # after it
                assert kv is not None
                free = kv.fresh + kv.nfree  # (kv.free_count(), kept up to date below)
                i = len(running)
                for r in running:
                    if r.prefilled < r.target:
                        i = running.index(r)
                        break
                    x = r.decoded + r.speed - EPS
                    # its next token needs a block (ceil(x) > n is x > n for an integer n:
                    # the test without the ceil and the block division, false in most steps)
                    if x > r.held * bs - r.prompt:
                        need = -(-(r.prompt + math.ceil(x)) // bs) - r.held
                        if need > free:
                            i = running.index(r)
                            break
                        r.held += need
                        free -= need
                    if a_dec:
                        ctx += r.promptf + r.decoded
                    x = (r.outf - r.decoded) / r.speed
                    if x < rem:
                        rem = x
                if free < kv.fresh + kv.nfree:  # the blocks taken above, in one call
                    kv.take(kv.fresh + kv.nfree - free)
                decodes = running[:i]
                budget -= i
            else:
                decodes = []
        if snap_run is not None:
            # a decode's state at the phase start is read back from the segment this phase
            # appends (see Snap); the others are kept whole (nothing has changed yet)
            assert snaps is not None
            keep = snap_run if whole else running[i:]
            marks = [(r, r.prefilled, r.decoded, len(r.flat_segments), r.first_token)
                     for r in keep] if keep else ()  # fmt: skip
            snaps.append((s.t, s.qi, snap_run, marks, _INF if whole else t))
        if not limited and i < len(running):  # without the block accounting below
            for r in running if i == 0 else running[i:]:
                if budget < 1:
                    break
                left = r.target - r.prefilled
                if left > 0:
                    c = int(min(left, budget))
                    chunks.append((r, c))
                    if caching_kv:
                        register_blocks(kv, r, r.prefilled + c)
                    attn += c * (r.prefilled + c / 2)
                    prefill += c
                    budget -= c
                else:
                    decodes.append(r)
                    if a_dec:
                        ctx += r.promptf + r.decoded
                    x = (r.outf - r.decoded) / r.speed
                    if x < rem:
                        rem = x
                    budget -= 1
        if not limited:
            i = len(running)
        while i < len(running) and budget >= 1:
            r = running[i]
            left = r.target - r.prefilled
            c = int(min(left, budget)) if left > 0 else 0
            if limited:
                assert kv is not None
                tokens = r.prefilled + c if c else r.prompt + math.ceil(r.decoded + r.speed - EPS)
                need = -(-tokens // bs) - r.held
                gone = False
                while need > 0 and need > kv.fresh + kv.nfree:  # (kv.free_count())
                    victim = running.pop()  # the last admitted goes first, as in vLLM
                    self._preempt(victim, s, kv)
                    preempted = True
                    if victim is r:
                        gone = True
                        break
                if gone:
                    break
                if need > 0:
                    kv.take(need)
                    r.held += need
            if c:
                chunks.append((r, c))
                if caching_kv:
                    register_blocks(kv, r, r.prefilled + c)
                attn += c * (r.prefilled + c / 2)
                prefill += c
                budget -= c
            else:
                decodes.append(r)
                if a_dec:
                    ctx += r.promptf + r.decoded
                x = (r.outf - r.decoded) / r.speed
                if x < rem:
                    rem = x
                budget -= 1
            i += 1
        if not preempted:
            qi, n, slots = s.qi, len(q), p.slots
            caching = p.prefix_caching
            while qi < n and budget >= 1 and (slots <= 0 or len(running) < slots):
                r = q[qi]
                if r.aborted:
                    r.left_at = t
                    qi += 1
                    continue
                if r.arrival > t + EPS:
                    break
                if r.deadline <= t + EPS:
                    self._abort(r, record)
                    r.left_at = t
                    qi += 1
                    continue
                if kv is None:
                    hit, computed = 0, self._bound(r) if caching else 0
                else:
                    hit = kv.lookup(r.hashes, r.prompt)
                    computed = hit * bs
                c = r.target - computed
                if budget < c:  # (as int(min(...)), without the builtin's argument parsing)
                    c = int(budget)
                if kv is not None:
                    need = -(-(computed + c) // bs) - hit
                    if limited and need + kv.free_hits(r.hashes, hit) > kv.fresh + kv.nfree:
                        break  # its blocks do not fit: it and everyone behind it wait
                    if caching:
                        kv.acquire(r.hashes, hit, r.prompt)
                    kv.take(need)
                    r.held, r.hashed, r.nreg = hit + need, list(r.hashes[:hit]), hit
                if r.admitted is None:
                    r.admitted = t
                    r.cached_tokens = computed
                    if record and computed != r.plan_cached and caching:
                        self._repair(r, computed, t)
                r.left_at = t
                r.prefilled = computed
                running.append(r)
                if r.deadline < dmin:
                    dmin = r.deadline
                chunks.append((r, c))
                if caching_kv:  # cached now: later admissions of this step hit them
                    register_blocks(kv, r, computed + c)
                attn += c * (computed + c / 2)
                prefill += c
                budget -= c
                qi += 1
            s.qi = qi
        if snaps is not None:  # could a request queued last have joined this phase?
            self._room.append(budget >= 1 and (p.slots <= 0 or len(running) < p.slots))
        n_seqs = len(chunks) + len(decodes)
        if n_seqs == 0:
            s.t = t
            s.dmin = s.rem = None
            return preempted  # everyone was preempted: the next phase re-admits
        if chunks:
            dt = step_time(p, n_seqs, prefill, attn, len(decodes), ctx)
        else:  # decode-only: a function of the batch size, then the attention term
            memo = self._dt_decode
            if memo[0] is not p:
                memo = self._dt_decode = (p, {})
            dt = memo[1].get(n_seqs, -1.0)
            if dt < 0.0:
                dt = memo[1][n_seqs] = step_time(p, n_seqs, 0, 0.0, n_seqs, 0.0)
            if a_dec:  # (added last, as step_time adds it: the same float)
                dt += a_dec * ctx
        ddt = 0.0
        k = 1
        if not chunks and decodes:
            # identical decode-only steps until someone finishes, arrives or aborts
            # (ceil is monotone: the least of the ceilings is the ceiling of the least)
            k = math.ceil(rem - EPS)
            sp = -1.0  # (the decodes' speeds summed, when the attention term needs them)
            if a_dec:
                sp = sum([r.speed for r in decodes])
                ddt = a_dec * sp
            if dt > 0.0:  # (min and max as comparisons, as in _decode_run)
                h = dmin if dmin < limit else limit
                room = p.slots <= 0 or len(running) < p.slots
                if room and s.qi < len(q) and q[s.qi].arrival < h:
                    h = q[s.qi].arrival
                if h < _INF:
                    k = steps_within(k, h - t, dt, ddt)
            if limited and k > 1:
                assert kv is not None
                k = kv_fit(decodes, k, kv, bs, sp)
        t_end = t + k * dt + ddt * (k * (k - 1) / 2) if ddt else t + k * dt
        for r, c in chunks:
            r.prefilled += c
            if r.prefilled >= r.target:
                if r.first_token is None:
                    r.first_token = t_end
                    r.decoded = 1.0
                else:  # a preempted request recomputed: this step adds its next token
                    r.flat_segments.extend((t, dt, r.decoded, 1, 0.0))
                    r.decoded = min(r.outf, r.decoded + r.speed)
        finished: list[EngineRequest] = []
        # the next phase's State.rem (none: one in prefill or unscheduled, or no pass reads it)
        carry = n_seqs == len(running)
        nrem = advance_decodes(decodes, t, dt, k, ddt, finished, carry)
        if limited and k > 1:
            assert kv is not None
            take_later_blocks(decodes, kv, bs)
        for r, _ in chunks:
            if r.prefilled < r.target:
                carry = False  # still in prefill
            elif r.decoded >= r.stop:
                finished.append(r)
            elif carry:
                x = (r.outf - r.decoded) / r.speed
                if x < nrem:
                    nrem = x
        if finished:
            dmin = self._finish(s, finished, t_end, dmin, record)
        s.t = t_end
        # (None: someone who left ``running`` may have held the least deadline)
        s.dmin = None if preempted else dmin
        s.rem = nrem if carry and not preempted else None
        if record:
            self.steps_total += k
        return True
