"""The plan of the simulated vLLM engine (:mod:`agentlab.llm.sim_engine`): the schedule of
the requests present assuming no further arrivals, simulated on copies of them as far as a
prediction needs, with a snapshot at each phase so that an arrival (or a prefix-cache
repair) re-plans only from the first step it could change.

A mixin of :class:`~agentlab.llm.sim_engine.Engine`, which owns the attributes and runs
the phases (see "Committed steps and the plan" in its module docstring).

Cost (``benchmarks/sim_engine.py --quick --mechanisms --count``, phases per simulated call,
load-independent): 100 clients on 8 slots, 2.6 committed and 6.5 planned (9.1 with the KV
mechanisms); 1,000 clients, 1.4 and 3.4 (3.8). At 1,000 clients half the calls time out in
the queue: their predictions stop at the deadline (a doomed request, see ``predict``), so
an arrival behind them re-plans nothing (re-plans 0.99 -> 0.54 a call). The rest is the
plan's main waste: a request admitted in time is predicted to its end, and the next
arrival joins the first phase with a free slot after that admission, so every later
phase is re-run (~4.6 phases a re-plan, ~2.5 of the 3.4 a call are thrown away). The
prediction stays exact here (a client wakes at its predicted time; a looser bound adds
wakes, and moved wakes could reorder events at equal times: not tried), so a cheaper plan
has to shift later phases rather than re-run them (a shift reaches the same times by other
float operations: within the identity test's 1e-12 and the rows' 1e-6, not byte for byte),
or share one step timeline with the committed steps. That sharing cannot keep runs byte for
byte either: ``advance(now)`` cuts the decode run under way at the first step boundary past
each wake (86 % of the committed phases end within 50 ms past one), a plan phase runs to
its next event, and the two add a run's steps in other groupings: of the 1.42 committed
phases a call at 1,000 clients, 0.015 (0.067 with the mechanisms) equal a planned phase
(same state time before and after; ``--count``, "as planned"), and 0.02 even start where
one does. A commit that takes the plan's phases must stop cutting at wakes: last-bit times,
to be proved on the rows and ``compare_runs``. A prefix-cache repair (the committed cache
gave fewer hits than planned) re-runs the whole planned horizon (~180 phases, 15 per 1,000
calls at 100 clients).

Forecasts (issue 22): where nobody is queued in the plan (its tail: at 1,000 clients 3.1
of the 3.6 planned phases a call, all thrown away by the next arrival's re-plan), a
prediction's end comes from the decode runs' float operations on the decoded tokens alone,
the plan left where it stood (:meth:`Planner._forecast`); the next change to the plan drops
it. Planned phases a call at 1,000 clients 3.43 -> 1.01 (as shipped 3.88 -> 1.47),
re-plans 0.54 -> 0.04 (``--count``). Callgrind, (2,000 calls - none) / 2,000 at 1,000
clients on 8 slots (this measure varies by a few k between identical runs: start-up):
the goal's engine 138.4k -> ~120k instructions a call; (10,000 - 2,000) / 8,000: 258.3k
-> 209.7k. Tried: a forecast that brings a request's tokens up to date only when it could
hold the least steps (a sorted prefix, replaying the phase counts): more instructions
(+1.7k a call), the lockstep split below already leaves ~5 of ~8 requests a phase.

Coalescing same-instant arrivals (predict once for all of them, not at each ``plan``) moves
wakes, so it cannot keep runs byte for byte: a waiter takes its first sleep right after its
``plan``, before the next arrival of that instant, and a deferred one would sleep elsewhere;
the virtual clock wakes at ``now + (t - now)`` (the rounding depends on ``now``) and orders
ties by when each sleep was taken, and each wake's ``advance`` cuts a decode run into phases
(a split run sums its times in another order).
Per-block KV work moved into ``map`` / ``compress`` / ``dict.update`` pipelines costs more
instructions than the plain loops under CPython 3.11 (callgrind, 150 blocks: ``hit_bound``
2.3x, ``acquire`` + ``release`` 1.6x, ``take`` evicting 1.4x, ``_gone`` 1.1x; ``lookup``
equal); only ``free_hits`` (a ``list.count``) gained, 0.67x. Likewise, not kept (callgrind,
2,000 calls at 1,000 clients, 614.6M instructions): snapshots without the segment count (the
restore pops the segments at or past the snapshot's decoded tokens) +0.9 %; the leading
decodes as a slice of ``running`` (no ``append``) +0.1 %; though each lowers the bytecode
count (``--ops``) by 1-3 %. Kept (callgrind, (2,000 calls - 0 calls) / 2,000 at 1,000
clients): snapshots holding the running list only, a decode's state read back from the
segment its phase appends (no tuple per request and phase) with identity-compared requests
(``list.remove``), 310.1k -> 284.4k instructions a call; the slice again, its end found by
``list.index`` (no counter), 284.2k -> 282.4k; with the mechanisms, those and blocks leaving
the engine counted in C (a second Counter), block tests without ``ceil`` and the decode step
time memoised with the attention term, 817.3k -> 797.6k (the snapshots) -> 768.1k.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable
from itertools import chain

from agentlab.llm.sim_kv import KVCache
from agentlab.llm.sim_profiles import SimProfile
from agentlab.llm.sim_request import EPS, EngineRequest, Snap, State
from agentlab.llm.sim_step import step_time, steps_within

__all__ = ["Planner"]

_INF = math.inf


class Planner:
    """The plan of :class:`~agentlab.llm.sim_engine.Engine` (see the module docstring)."""

    kv: KVCache | None
    _s: State
    _plan: State | None
    _views: dict[int, EngineRequest]
    _snaps: list[Snap]
    _starts: list[float]
    _room: list[bool]
    _doomed: list[EngineRequest]
    _prune_len: int
    _live: Counter[int]
    _left: Counter[int]
    _left_max: int
    _fc: list[EngineRequest]  # plan views holding a forecast (see _forecast)
    profile: SimProfile
    _dt_decode: tuple[SimProfile, dict[int, float]]
    # the engine's phase: (state, limit, kv, snapshots, record) -> whether a phase ran
    _phase: Callable[[State, float, KVCache | None, list[Snap] | None, bool], bool]

    def predict(self, req: EngineRequest) -> EngineRequest:
        """``req``'s planned future assuming no further arrivals (a lower bound in time)."""
        return self._predict(req, True)

    def _predict(self, req: EngineRequest, forecast: bool) -> EngineRequest:
        # ``forecast``: once nobody is queued in the plan, ``req``'s end may be a forecast
        if req.done:
            return req
        if self._plan is None:
            self._rebase()
        v = self._views.get(req.rid)
        if v is None:  # not in the plan (restored, or added before a replan): plan afresh
            self._rebase()
            v = self._views.get(req.rid)
            if v is None:
                return req
        plan, snaps = self._plan, self._snaps
        assert plan is not None
        deadline = v.deadline - EPS
        while v.end is None and not v.aborted:
            if v.admitted is None and plan.t >= deadline and v.arrival <= plan.t + EPS:
                # still queued, arrived, and its deadline has passed: every later step
                # aborts it before it could be admitted, so its fate is known without
                # simulating the queue ahead of it (under overload, a client timeout of steps)
                v.aborted = True
                self._doomed.append(v)
                break
            if forecast and plan.rem is not None and plan.qi == len(plan.q):
                # nobody queued, all decoding (so ``v`` runs): decode runs to its end
                if self._forecast(plan, v):
                    break
                forecast = False  # (it cannot forecast this plan: its phases, then)
            if self._fc:  # the plan moves on: forecasts made from where it stood go
                self._unforecast()
            if not self._phase(plan, _INF, None, snaps, False):
                break
        return v

    def replan(self) -> None:
        """Drop the plan; the next :meth:`predict` plans afresh from the committed state."""
        if self._fc:
            self._unforecast()
        self._plan = None
        self._views = {}
        self._snaps = []
        self._starts = []
        self._room = []
        self._doomed = []

    def _rebase(self) -> None:
        if self._fc:
            self._unforecast()
        s = self._s
        plan = State()
        plan.t = s.t
        plan.running = [r.copy() for r in s.running]
        plan.q = [r.copy() for r in s.q[s.qi :] if not r.done]
        self._plan = plan
        self._views = {r.rid: r for r in (*plan.running, *plan.q)}
        self._snaps = []
        self._starts = []
        self._room = []
        self._doomed = []

    def _replan_for(self, plan: State, v: EngineRequest) -> None:
        """Make the plan correct with ``v`` queued last: undo the steps it could join."""
        if not self._snaps or plan.t < v.arrival - EPS:
            return  # nothing planned after its arrival
        q = plan.q
        x = v.arrival
        if q:
            if plan.qi < len(q):
                return  # the request ahead of it is still queued at the plan's end
            left = q[-1].left_at  # v is considered at that step at the earliest
            if left is not None:
                x = left if left > x else x  # (as max(x, left): no builtin call)
        p = bisect.bisect_right(self._starts, x + EPS) - 1
        if p < 0:
            p = 0
        room = self._room
        while p < len(room) and not room[p]:
            p += 1  # no free slot (or budget) in that phase: v could not have joined it
        if p == len(room):
            return  # no planned phase had room for it
        self._restore(plan, p, True)

    def _restore(self, plan: State, p: int, tail: bool = False) -> None:
        """Back to the plan's state at the start of phase ``p``.

        ``tail``: the only change is a request queued behind everyone the plan took off
        the queue (all of them left at phase ``p``), so phase ``p`` re-runs identically up
        to it: a queued request it aborted (deadline) stays aborted and is skipped, not
        reset and aborted again (under overload most requests leave the queue that way);
        those at its head go before anyone is admitted: the queue restarts after them.
        """
        t_before, qi, run, marks, cut = self._snaps[p]
        assert run is not None  # (callers restore only to phases with a snapshot)
        if self._fc:
            self._unforecast()
        if self._doomed:  # marked aborted by predict, still queued: re-plan them too
            for w in self._doomed:
                if w.left_at is None:
                    w.aborted = False
            self._doomed = []
        q = plan.q
        lead = qi
        for i in range(qi, plan.qi):
            w = q[i]
            if tail and w.aborted and w.prefilled == 0:  # aborted while queued
                if lead == i:
                    lead += 1
            else:
                w._reset()
        for w in run:
            segs = w.flat_segments
            j = len(segs) - 5
            if j >= 0 and segs[j] >= cut:  # decoded in phase p or later: back to before it
                # (the first segment starting at or after ``cut``: starts only grow, and
                # those re-planned are the last few)
                while j >= 5 and segs[j - 5] >= cut:
                    j -= 5
                w.decoded = segs[j + 2]
                del segs[j:]
            w.end = None
            w.aborted = False
        for w, pf, dec, nseg, ft in marks:  # those kept whole
            w.prefilled, w.decoded, w.first_token = pf, dec, ft
            del w.flat_segments[nseg:]
        plan.running = list(run)
        plan.dmin = plan.rem = None
        plan.qi = lead
        plan.t = t_before
        del self._snaps[p:]
        del self._starts[p:]
        del self._room[p:]

    def _forecast(self, plan: State, v: EngineRequest) -> bool:
        """``v``'s end (or abort) where the plan has nobody queued and all decoding, without
        moving the plan: the float operations of the decode runs (and client aborts) that
        its phases would run to that end, in their order, on the decoded tokens alone (no
        segments, snapshots or phase bookkeeping; ``fd``). Until the plan changes, ``v``
        keeps it (``fc``, see :meth:`_unforecast`). False: not forecast (a token budget
        below the batch, or a step count below 1: the phases' own handling).

        Without the attention term a request whose steps to finish exceed ``v``'s by a
        step or more is only counted (batch size, deadline): all decode in lockstep, so it
        can neither hold the least steps to finish (``v`` has fewer) nor end before ``v``
        (that needs its steps within rounding of the phase's count, which ``v`` exceeds);
        the float error of a step count is ~1e-13 a phase, far below the step."""
        p = self.profile
        run = plan.running
        n = len(run)
        if 0 < p.max_num_batched_tokens < n:
            return False
        t = plan.t
        rem = plan.rem
        assert rem is not None
        dmin = plan.dmin
        if dmin is None:
            dmin = _INF
            for r in run:
                if r.deadline < dmin:
                    dmin = r.deadline
        memo = self._dt_decode
        if memo[0] is not p:
            memo = self._dt_decode = (p, {})
        dts = memo[1]
        a_dec = p.attention_decode_s
        ctx = sp = ddt = 0.0
        rest: list[EngineRequest] = []  # (only counted)
        if a_dec:
            live = list(run)
            for r in live:  # (as the phases sum them: left to right from 0.0)
                r.fd = r.decoded
                ctx += r.promptf + r.decoded
                sp += r.speed
        else:
            live = []
            xv = (v.outf - v.decoded) / v.speed + 1.0
            for r in run:
                if (r.outf - r.decoded) / r.speed < xv:
                    r.fd = r.decoded
                    live.append(r)
                else:
                    rest.append(r)
        while True:
            if dmin <= t + EPS:  # client aborts at the step boundary (the general phase)
                cut = t + EPS
                if v.deadline <= cut:
                    v.aborted = True
                    break
                live = [r for r in live if r.deadline > cut]
                dmin = rem = _INF
                if rest:
                    rest = [r for r in rest if r.deadline > cut]
                    for r in rest:
                        if r.deadline < dmin:
                            dmin = r.deadline
                n = len(live) + len(rest)
                ctx = sp = 0.0
                for r in live:
                    if r.deadline < dmin:
                        dmin = r.deadline
                    x = (r.outf - r.fd) / r.speed
                    if x < rem:
                        rem = x
                    if a_dec:
                        ctx += r.promptf + r.fd
                        sp += r.speed
            dt = dts.get(n, -1.0)
            if dt < 0.0:
                dt = dts[n] = step_time(p, n, 0, 0.0, n, 0.0)
            if a_dec:
                dt += a_dec * ctx
                ddt = a_dec * sp
            k = math.ceil(rem - EPS)
            if dt > 0.0 and dmin < _INF:
                k = steps_within(k, dmin - t, dt, ddt)
            if k < 1:
                return False
            kf = float(k)
            rem = _INF
            fin = None
            ctx = sp = 0.0  # (summed only with the attention term, as the phases sum them)
            for r in live:
                d = r.fd + kf * r.speed
                if d >= r.stop:
                    if r is v:
                        break
                    fin = [r] if fin is None else [*fin, r]
                else:
                    r.fd = d
                    x = (r.outf - d) / r.speed
                    if x < rem:
                        rem = x
                    if a_dec:
                        ctx += r.promptf + d
                        sp += r.speed
            t_end = t + kf * dt + ddt * (kf * (kf - 1.0) / 2.0) if ddt else t + kf * dt
            if d >= v.stop and r is v:  # its last token: time_of_token on this phase
                j = math.ceil((v.output - v.fd) / v.speed - EPS)
                j = k if k < j else j if j > 1 else 1
                v.ftok = t + j * dt + ddt * (j * (j - 1) / 2) if ddt else t + j * dt
                v.end = t_end
                break
            t = t_end
            if fin is not None:
                stale = False
                for r in fin:
                    live.remove(r)
                    if r.deadline <= dmin:
                        stale = True
                n -= len(fin)
                if stale:
                    dmin = _INF
                    for r in live:
                        if r.deadline < dmin:
                            dmin = r.deadline
                    for r in rest:
                        if r.deadline < dmin:
                            dmin = r.deadline
        v.fc = self._materialize
        self._fc.append(v)
        return True

    def _unforecast(self) -> None:
        # the plan is about to change: the views it forecast are as it left them
        for w in self._fc:
            w.end = None
            w.aborted = False
            w.fc = None
        self._fc = []

    def _materialize(self, v: EngineRequest) -> None:
        # a forecast view asked for a token's time: its phases, simulated (if still the
        # plan's view: one kept past the request's end stays as the plan left it)
        self._unforecast()
        if self._views.get(v.rid) is v:
            self._predict(v, False)

    def _bound(self, v: EngineRequest) -> int:
        # the plan admits ``v``: blocks evicted since its bound was taken lower the bound
        if v.keep is not None:  # restored: the saved plan admitted it with this bound
            v.plan_cached, v.seen_ev = v.keep
            v.keep = None
            return v.plan_cached
        kv = self.kv
        assert kv is not None
        if v.seen_ev != kv.evicted_total and v.plan_cached and self._views.get(v.rid) is v:
            v.seen_ev = kv.evicted_total  # (its own blocks are in _live once: own=1)
            bound = kv.hit_bound(v.hashes, v.prompt, self._live, 1, self._left) * kv.block_size
            v.plan_cached = min(v.plan_cached, bound)
        return v.plan_cached

    def _repair(self, r: EngineRequest, computed: int, t: float) -> None:
        """The committed cache gave ``r`` fewer hits than the plan assumed (blocks evicted
        meanwhile): re-plan from the step that admitted it."""
        r.plan_cached = computed
        v = self._views.get(r.rid)
        plan = self._plan
        if v is None or plan is None or (v.admitted is not None and v.cached_tokens == computed):
            return  # (the plan admitted it with those hits already: see _bound)
        v.plan_cached = computed
        if v.admitted is None or not self._starts:
            return  # the plan has not admitted it yet
        p = bisect.bisect_right(self._starts, t + EPS) - 1
        snaps = self._snaps
        while p >= 0 and snaps[p][2] is None:
            p -= 1  # a phase without room kept no snapshot: re-plan from an earlier one
        if p < 0:
            self.replan()
            return
        self._restore(plan, p)

    def _recount(self) -> None:
        # the live blocks counted afresh from the requests in the engine (queued and not
        # done, or running): the same counts as added less left, in two smaller Counters
        s = self._s
        live = Counter(chain.from_iterable(r.hashes for r in s.q[s.qi :] if not r.done))
        live.update(chain.from_iterable(r.hashes for r in s.running))
        self._live, self._left = live, Counter()
        self._left_max = max(4096, 2 * len(live))

    def _prune(self, now: float) -> None:
        # a re-plan never goes back before "now" (arrivals are not earlier than now)
        cut = bisect.bisect_left(self._starts, now) - 1
        self._prune_len = len(self._starts) - max(cut, 0) + 1024
        if cut <= 0:
            return
        del self._snaps[:cut]
        del self._starts[:cut]
        del self._room[:cut]
        if self._doomed:  # those the plan has taken off the queue need no un-marking
            self._doomed = [w for w in self._doomed if w.left_at is None]
        plan = self._plan
        if plan is None:
            return
        low = min(x[1] for x in self._snaps) if self._snaps else plan.qi
        if low > 4096:
            del plan.q[:low]
            plan.qi -= low
            self._snaps = [(tb, qi - low, run, m, c) for tb, qi, run, m, c in self._snaps]
