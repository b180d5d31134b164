"""The common phase of the simulated vLLM engine (:mod:`agentlab.llm.sim_engine`) on a path
of its own: a run of decode-only steps in which nothing else can happen.

Most phases are such runs (at 1,000 clients on 8 slots, 9 in 10 of the committed and planned
phases: the slots are full, or the plan's queue is empty), and the general
:meth:`~agentlab.llm.sim_engine.Engine._phase` spends most of its instructions on what they
cannot do: client aborts, prefill chunks, block accounting, admissions. Its leading pass
over the decodes is not needed either: the phase before carries their least steps to
finish (``State.rem``). Here that phase is the same float operations in the same order
as in ``_phase`` (the rows and runs are byte for byte those of the general path).

Cost (callgrind, (2,000 calls - none) / 2,000 at 1,000 clients on 8 slots): 281.8k ->
261.2k instructions a call with this path (3.7 of the 4.9 phases a call take it); the
carried bound alone, read by ``_phase``'s leading pass, gave 279.0k (it moves the division
into the update pass more than it saves). Then 261.2k -> 244k: a request's output kept as
a float (``outf``, ``stop``; CPython 3.11 specialises float-with-float arithmetic, an int
operand takes the generic path) and the steps ``k`` as a float in the products (the same
values: both are exact in a double). Then 244k -> 221.0k: two-argument ``min`` / ``max``
written as comparisons here and in ``_phase`` (the builtins parse their arguments on each
call: 13k instructions a call) and float-with-float compares (``dt > 0.0``).

With the attention term (``attention_decode_s``) the run's steps grow: the contexts and
speeds are summed in ``_phase``'s order and the count comes from ``steps_to``; with a finite
KV cache the decodes' next blocks are taken as ``_phase``'s leading pass takes them when all
fit (else the general path, which preempts), then ``kv_fit`` and the later steps' blocks.
Sim/vllm-3b as shipped (callgrind, as above): 740.3k -> 710.6k instructions a call; then
-> 627.1k (issue 22): runs of uncached blocks as one free-queue entry, a phase's blocks taken
in one call, ``kv_fit``'s bound, the prefix scans as for loops. Of those, ~150k are the
driver's prompt hashing; over the goal's engine (227k) attention adds ~32k, prefix caching
~143k more (with the hashing ~293k) and KV capacity ~75k, mostly outside the phases.
The figures above were taken with ``PYTHONDONTWRITEBYTECODE`` set: each run recompiled the
modules it imported lazily, which the N-call run did and the 0-call run did not, adding
~80-200k a call. Measured clean (``__pycache__`` compiled first, the variable unset): as
shipped 509.1k (c91ddf4) -> 413.1k with the above and float-with-float context sums
(``EngineRequest.promptf``); the goal's engine (all mechanisms off) 139.4k -> 140.7k.

A mixin of :class:`~agentlab.llm.sim_engine.Engine`, which owns the attributes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from agentlab.llm.sim_kv import KVCache
from agentlab.llm.sim_profiles import SimProfile
from agentlab.llm.sim_request import EPS, EngineRequest, Snap, State
from agentlab.llm.sim_step import kv_fit, step_time, steps_within

__all__ = ["DecodeRun"]

_INF = math.inf


class DecodeRun:
    """Decode-only phases of :class:`~agentlab.llm.sim_engine.Engine` (see the module
    docstring)."""

    profile: SimProfile
    kv: KVCache | None
    _starts: list[float]
    _room: list[bool]
    _dt_decode: tuple[SimProfile, dict[int, float]]
    finished_total: int
    generated_total: int
    steps_total: int
    _gone: Callable[[EngineRequest], None]  # (the engine's: a request left it)

    def _decode_run(
        self,
        s: State,
        t: float,
        limit: float,
        dmin: float,
        snaps: list[Snap] | None,
        record: bool,
        kv: KVCache | None,
    ) -> bool | None:
        """A phase of ``s.running``, all decoding (their least steps to finish carried in
        ``s.rem``), none due to abort, no one to admit (checked by the caller): the steps
        of ``_phase`` that such a phase runs, in its order. None (nothing done): with a
        finite cache, the blocks of the decodes' next tokens do not all fit (a preemption:
        the general path's)."""
        p = self.profile
        running, q = s.running, s.q
        n = len(running)
        bs = p.block_size
        limited = kv is not None and kv.limited
        if limited:
            # _phase's leading pass takes each decode's next block in order and stops at
            # the first that does not fit; every need is >= 1, so all fit when their total
            # does (checked before any is taken)
            assert kv is not None
            takes = []
            total = 0
            for r in running:
                x = r.decoded + r.speed - EPS
                if x > r.held * bs - r.prompt:  # (ceil(x) > n is x > n for an integer n)
                    need = -(-(r.prompt + math.ceil(x)) // bs) - r.held
                    takes.append((r, need))
                    total += need
            if total > kv.fresh + kv.nfree:  # (kv.free_count())
                return None
            if total:  # (taken in one call: the same blocks from the head, in order)
                kv.take(total)
                for r, need in takes:
                    r.held += need
        room = p.slots <= 0 or n < p.slots
        if snaps is not None:
            starts = self._starts
            whole = starts[-1] >= t if starts else False
            starts.append(t)
            if not room:  # (as _phase: no snapshot to re-plan from)
                snaps.append((s.t, s.qi, None, (), t))
            else:
                run = list(running)
                marks = [(r, r.prefilled, r.decoded, len(r.flat_segments), r.first_token)
                         for r in run] if whole else ()  # fmt: skip
                snaps.append((s.t, s.qi, run, marks, _INF if whole else t))
            mnbt = p.max_num_batched_tokens  # (budget left >= 1 after the decodes)
            self._room.append(room and (mnbt <= 0 or mnbt - n >= 1))
        memo = self._dt_decode
        if memo[0] is not p:
            memo = self._dt_decode = (p, {})
        dt = memo[1].get(n, -1.0)
        if dt < 0.0:
            dt = memo[1][n] = step_time(p, n, 0, 0.0, n, 0.0)
        ddt = 0.0
        a_dec = p.attention_decode_s
        if a_dec:
            # _phase's leading pass (contexts, left to right) and sum() of the speeds (a
            # float sum from 0: the same additions, without the list)
            ctx = sp = 0.0
            for r in running:
                ctx += r.promptf + r.decoded
                sp += r.speed
            dt += a_dec * ctx  # (added last, as step_time adds it: the same float)
            ddt = a_dec * sp
        assert s.rem is not None
        k = math.ceil(s.rem - EPS)
        if dt > 0.0:  # (float with float: the interpreter's specialised compare)
            # (``_phase``'s min and max as comparisons: the builtins parse their arguments)
            h = dmin if dmin < limit else limit
            if room and s.qi < len(q) and q[s.qi].arrival < h:
                h = q[s.qi].arrival
            if h < _INF:
                k = steps_within(k, h - t, dt, ddt)
        if limited and k > 1:
            assert kv is not None
            k = kv_fit(running, k, kv, bs, sp if a_dec else -1.0)
        kf = float(k)  # (the same products as with the int k, in float arithmetic)
        t_end = t + kf * dt + ddt * (kf * (kf - 1.0) / 2.0) if ddt else t + kf * dt
        finished: list[EngineRequest] = []
        rem = advance_decodes(running, t, dt, k, ddt, finished, True)  # the next phase's
        if limited and k > 1:
            assert kv is not None
            take_later_blocks(running, kv, bs)
        s.t = t_end
        s.dmin = self._finish(s, finished, t_end, dmin, record) if finished else dmin
        s.rem = rem
        if record:
            self.steps_total += k
        return True

    def _finish(
        self, s: State, finished: list[EngineRequest], t_end: float, dmin: float, record: bool
    ) -> float | None:
        """Take ``finished`` (ended at ``t_end``) off ``s.running``; the least deadline of
        those left if known (``dmin``), else None (one who left may have held it)."""
        kv = self.kv if record else None
        stale = False
        for r in finished:
            r.end = t_end
            s.running.remove(r)  # (usually one: a C scan by identity, no new list)
            if r.deadline <= dmin:
                stale = True
            if record:
                self.finished_total += 1
                self.generated_total += r.output
                self._gone(r)
                if kv is not None:
                    kv.release(r.held - len(r.hashed), r.hashed)
                    r.held, r.hashed = 0, []
        return None if stale else dmin


def advance_decodes(
    decodes: list[EngineRequest],
    t: float,
    dt: float,
    k: int,
    ddt: float,
    finished: list[EngineRequest],
    carry: bool,
) -> float:
    """Move each decode ``k`` steps from ``t`` (its segment appended); those that reach
    their stop go to ``finished``. Returns the least steps-to-finish of the others — the
    next phase's ``State.rem`` — if ``carry``, else inf. Shared by ``_decode_run`` and
    ``Engine._phase``: the same float operations either way."""
    rem = _INF
    kf = float(k)  # (the same products as with the int k, in float arithmetic)
    for r in decodes:
        dec = r.decoded
        r.flat_segments.extend((t, dt, dec, k, ddt))  # (list.extend: fewer instructions than +=)
        d = dec + kf * r.speed
        if d >= r.stop:
            r.decoded = r.outf if d > r.outf else d
            finished.append(r)
        else:
            r.decoded = d
            if carry:
                x = (r.outf - d) / r.speed
                if x < rem:
                    rem = x
    return rem


def take_later_blocks(decodes: list[EngineRequest], kv: KVCache, bs: int) -> None:
    """Take the KV blocks of a phase's later steps (they fit: ``kv_fit``)."""
    total = 0
    for r in decodes:
        x = r.decoded - EPS
        if x > r.held * bs - r.prompt:  # (as in the leading pass: need > 0)
            need = -(-(r.prompt + math.ceil(x)) // bs) - r.held
            total += need
            r.held += need
    if total:  # (one call: the same blocks from the head, in order)
        kv.take(total)
