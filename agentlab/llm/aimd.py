"""Adaptive concurrency: an AIMD limiter and the per-event-loop gate that enforces it.

The limiter is plain state (no asyncio objects), so one instance lives per client config per
process and keeps what it learned across event loops and across successive Ray tasks in the
same worker. The :class:`ConcurrencyGate` holds the asyncio waiters and is per event loop.

Policy (TCP-like, no tuning needed):

- start at ``initial`` (16); until the first congestion signal, +1 per healthy completion
  ("slow start": doubles per round trip), afterwards +1/limit per healthy completion
  (additive: about +1 per round trip);
- grow only while the limit is actually used (in flight >= half the limit), so a quiet
  client does not drift to a limit it never tested;
- on a rate-limit error, or a healthy completion slower than ``latency_factor`` × its
  no-load latency while the geometric mean of latency / no-load latency over the current
  epoch's answers (weight 2 / (limit + 1), about one round trip) is too (or than
  ``slow_s``), multiply by ``backoff`` (0.5 when leaving slow start,
  which overshoots by up to 2x) — at most once per "epoch", i.e. the requests already in
  flight when the limit dropped do not cut it again;
- "slower" is judged against the latency the same answer would have without load, modelled
  as a fixed part plus a per-token part, ``a + s * (tokens - t_a)`` (see
  :meth:`AIMDLimiter.expected`): ``a`` is the windowed minimum latency (the fixed cost —
  HTTP, prefill, scheduling — plus the few tokens ``t_a`` of that answer) and ``s`` the
  windowed minimum slope from that anchor to clearly longer answers (the decode time per
  token). A latency per token alone mistakes the fixed cost of a short answer for
  congestion (measured over HTTP: 8-token answers at 0.25 s, 10x the per-token minimum
  of long ones, cut the limit to 1 with one request in flight); a latency alone
  mistakes long answers for it. Queueing adds time to every answer and is caught;
- the prompt tokens the server had to compute (``prefill_tokens``: prompt minus its
  prefix-cache hits, ``cached_tokens``) add a third part, ``q * (u - u_a)``: ``u_a`` the
  computed prompt tokens of the anchor answer, ``q`` the windowed minimum prefill time per
  token from it to answers about as long with clearly more of them. With prefix caching the fastest
  answers are the cached ones; without this part an uncached prompt read as congestion
  (500 agents, faults injected: 82 vs 63 cuts, the limit touching 1). A caller that does
  not pass ``prefill_tokens`` gets the two-part model;
- a fault (429 or timeout) is congestion only when faults cluster: at least three within
  the current round trip and at least ``fault_tolerance`` of the answers in it. An
  overloaded server or an empty quota rejects most requests of a round trip; sporadic
  faults that do not depend on load (a flaky network, a fault-injecting test server) are
  counted in ``ignored_faults`` instead of ratcheting the limit down to the floor.
"""

from __future__ import annotations

import asyncio
import collections
import math

__all__ = ["AIMDLimiter", "ConcurrencyGate"]

# A slope sample must be this much longer than the anchor answer (2x + 16 tokens), so that
# latency noise over a few tokens' difference does not pose as the decode time per token.
_SLOPE_MIN_RATIO = 2
_SLOPE_MIN_EXTRA = 16
# The same for the prefill slope, in computed prompt tokens (prefill is ~100x cheaper per
# token than decode, so it takes a larger difference to measure).
_PREFILL_MIN_EXTRA = 64
# ... measured on answers at most this many tokens (or the anchor's) longer than the anchor.
_PREFILL_MAX_DC = 4


class AIMDLimiter:
    """Additive-increase / multiplicative-decrease concurrency limit (see module docs).

    Args:
        initial: starting limit.
        latency_factor: a completion slower than this × baseline is a congestion signal.
        slow_s: optional absolute latency (seconds) above which a completion is "slow".
        min_slow_s: completions faster than this are never "slow" (microsecond jitter of
            an instant backend is not congestion).
        backoff: multiplicative decrease after slow start.
        floor: lowest limit (1).
        ceiling: highest limit (a sanity bound, not a tuning knob).
        window: number of healthy samples over which the no-load minima are kept.
        adaptive: False keeps the limit fixed at ``initial`` (for comparisons).
        fault_tolerance: share of faulty answers within one round trip below which a
            fault is noise, not congestion (see the module docs).
    """

    __slots__ = (
        "_cur_n",
        "_cut_t",
        "_fix",
        "_fix_prev",
        "_fix_prev_t",
        "_fix_prev_u",
        "_fix_t",
        "_fix_u",
        "_limit",
        "_pslope",
        "_pslope_prev",
        "_ratio",
        "_slope",
        "_slope_prev",
        "_win_bad",
        "_win_n",
        "_win_t",
        "_wmax",
        "adaptive",
        "backoff",
        "ceiling",
        "decreases",
        "epoch",
        "fault_tolerance",
        "floor",
        "ignored_faults",
        "latency_factor",
        "min_slow_s",
        "rate_limited",
        "samples",
        "slow_s",
        "slow_signals",
        "slow_start",
        "srtt",
        "window",
    )

    def __init__(
        self,
        initial: float = 16,
        *,
        latency_factor: float = 4.0,
        slow_s: float | None = None,
        backoff: float = 0.8,
        floor: float = 1,
        ceiling: float = 4096,
        window: int = 256,
        adaptive: bool = True,
        min_slow_s: float = 0.05,
        fault_tolerance: float = 0.25,
    ) -> None:
        self.min_slow_s = min_slow_s
        self.fault_tolerance = fault_tolerance
        self.ignored_faults = 0
        self._win_t = -math.inf  # start of the current round-trip window (clock time)
        self._win_n = 0  # answers in it
        self._win_bad = 0  # faulty answers in it
        self._limit = float(initial)
        self.adaptive = adaptive
        self.latency_factor = latency_factor
        self.slow_s = slow_s
        self.backoff = backoff
        self.floor = floor
        self.ceiling = ceiling
        self.window = max(2, window)
        self.epoch = 0
        self.slow_start = True
        self.samples = 0
        self.decreases = 0
        self.rate_limited = 0
        self.slow_signals = 0
        # No-load latency model, each a sliding minimum over two half-window buckets:
        # the fixed part (minimum latency, with that answer's tokens) and the slope.
        self._fix = math.inf
        self._fix_t = 0
        self._fix_prev = math.inf
        self._fix_prev_t = 0
        self._fix_u = 0  # computed prompt tokens of the anchor answers
        self._fix_prev_u = 0
        self._slope = math.inf
        self._slope_prev = math.inf
        self._pslope = math.inf  # prefill time per computed prompt token
        self._pslope_prev = math.inf
        self._ratio = 0.0  # smoothed log(latency / no-load latency), this epoch's answers
        self._cur_n = 0
        self._wmax = math.inf  # limit at the last cut: where congestion was last seen
        self._cut_t = -math.inf
        self.srtt = 0.0  # smoothed healthy latency: at most one cut per round trip

    @property
    def limit(self) -> int:
        """Current concurrency limit (integer, >= 1)."""
        return max(1, int(self._limit))

    @property
    def baseline(self) -> float | None:
        """Recent no-load latency of the shortest answers (the fixed part), or None."""
        b = min(self._fix, self._fix_prev)
        return None if b == math.inf else b

    @property
    def per_token(self) -> float | None:
        """Recent no-load decode time per completion token (the slope), or None."""
        s = min(self._slope, self._slope_prev)
        return None if s == math.inf else s

    @property
    def per_prefill_token(self) -> float | None:
        """Recent no-load prefill time per computed prompt token, or None."""
        q = min(self._pslope, self._pslope_prev)
        return None if q == math.inf else q

    def expected(self, completion_tokens: int, prefill_tokens: int = 0) -> float | None:
        """No-load latency of an answer of ``completion_tokens`` tokens whose prompt had
        ``prefill_tokens`` tokens to compute (not found in the prefix cache), or None.

        ``a + s * max(0, tokens - t_a) + q * max(0, prefill - u_a)``: ``a`` the recent
        minimum latency, ``t_a`` and ``u_a`` that answer's tokens and computed prompt
        tokens, ``s`` and ``q`` the recent minimum slopes from there to longer answers and
        to longer computed prompts. Before any slope sample, ``s = a / t_a`` and ``q = a /
        max(u_a, 64)``: latency proportional to the excess, an upper bound; None for a
        longer answer when ``t_a`` is 0 (no bound).
        """
        if self._fix <= self._fix_prev:
            a, ta, ua = self._fix, self._fix_t, self._fix_u
        else:
            a, ta, ua = self._fix_prev, self._fix_prev_t, self._fix_prev_u
        if a == math.inf:
            return None
        want = a
        extra = completion_tokens - ta
        if extra > 0:
            s = self._slope if self._slope <= self._slope_prev else self._slope_prev
            if s == math.inf:
                if ta <= 0:
                    # An anchor of no tokens (a fault's empty answer) bounds nothing: with
                    # s = 0 every longer answer read as late, fed no slope sample and cut
                    # the limit until the window turned (10 -> 2 under sporadic faults).
                    return None
                s = a / ta
            want += s * extra
        extra = prefill_tokens - ua
        if extra > 0:
            q = self._pslope if self._pslope <= self._pslope_prev else self._pslope_prev
            if q == math.inf:
                q = a / max(ua, _PREFILL_MIN_EXTRA)
            want += q * extra
        return want

    def on_success(
        self,
        latency: float,
        completion_tokens: int,
        in_flight: int,
        epoch: int,
        now: float | None = None,
        prefill_tokens: int = 0,
    ) -> None:
        """Feed one successful completion; may raise or (if slow) lower the limit.

        ``now`` (clock time) enables the one-cut-per-round-trip rule; ``prefill_tokens``
        (prompt tokens minus ``cached_tokens``) the prefill part of the no-load model.
        """
        if now is not None:  # count the answer in this round trip (inlined: hot path)
            srtt = self.srtt
            if now - self._win_t > (srtt if srtt > 0.01 else 0.01):
                self._win_t, self._win_n, self._win_bad = now, 1, 0
            else:
                self._win_n += 1
        slow = self.slow_s is not None and latency > self.slow_s
        late = False  # slower than latency_factor x its no-load latency
        if not slow and self.samples >= 8 and latency > self.min_slow_s:
            want = self.expected(completion_tokens, prefill_tokens)
            if want is not None:
                r = latency / want if want > 0 else math.inf
                late = r > self.latency_factor
                if epoch == self.epoch:
                    # The geometric mean over about one round trip (weight 2 / (limit + 1)):
                    # a queue multiplies every answer's latency, while a busy client host
                    # gives a few answers a long tail (measured: at 8 in flight against 8
                    # slots, median 2.5x, 90th percentile 4.5x, max 8.7x).
                    w = 2.0 / (self._limit + 1.0)
                    lr = math.log(min(max(r, 1e-3), 1e3))
                    self._ratio += (w if w < 1.0 else 1.0) * (lr - self._ratio)
                slow = late and self._ratio > math.log(self.latency_factor)
        if slow:
            self.slow_signals += 1
            self._decrease(epoch, now)
            return
        if late:
            return  # an outlier: neither congestion nor a no-load sample
        self.samples += 1
        self.srtt = latency if self.samples == 1 else 0.9 * self.srtt + 0.1 * latency
        # Two half-window buckets give sliding minima in O(1).
        if latency < self._fix:
            if latency < self._fix_prev:
                # A new anchor: slopes measured from the old, higher one are too low (they
                # would make long answers look slow); measure them afresh.
                self._slope = self._slope_prev = math.inf
                self._pslope = self._pslope_prev = math.inf
            self._fix, self._fix_t, self._fix_u = latency, completion_tokens, prefill_tokens
        if self._fix <= self._fix_prev:
            a, ta, ua = self._fix, self._fix_t, self._fix_u
        else:
            a, ta, ua = self._fix_prev, self._fix_prev_t, self._fix_prev_u
        dc, du = completion_tokens - ta, prefill_tokens - ua
        if dc >= (_SLOPE_MIN_RATIO - 1) * ta + _SLOPE_MIN_EXTRA:
            slope = (latency - a) / dc
            if slope < self._slope:
                self._slope = slope
        if (
            dc <= max(_PREFILL_MAX_DC, ta)
            and du >= (_SLOPE_MIN_RATIO - 1) * ua + _PREFILL_MIN_EXTRA
        ):
            # at most about as long an answer as the anchor: the difference is mostly the
            # prefill's (less the decode part where known: an upper bound of it, so few
            # extra tokens keep this estimate close)
            s = min(self._slope, self._slope_prev)
            q = (latency - a - (s * dc if dc > 0 and s < math.inf else 0.0)) / du
            if q < self._pslope:
                self._pslope = max(0.0, q)
        self._cur_n += 1
        if self._cur_n >= self.window // 2:
            self._fix_prev, self._fix_prev_t = self._fix, self._fix_t
            self._fix_prev_u = self._fix_u
            self._slope_prev, self._pslope_prev = self._slope, self._pslope
            self._fix, self._fix_t, self._fix_u, self._cur_n = math.inf, 0, 0, 0
            self._slope = self._pslope = math.inf
        if self.adaptive and in_flight * 2 >= self._limit:
            if self.slow_start:
                step = 1.0
            elif 0.9 * self._wmax <= self._limit <= 1.05 * self._wmax:
                step = 0.125 / self._limit  # plateau near the last congestion point
            else:
                step = 1.0 / self._limit
            self._limit = min(self.ceiling, self._limit + step)

    def on_rate_limit(self, epoch: int, now: float | None = None) -> None:
        """Feed one rate-limit (429) answer."""
        self.rate_limited += 1
        if self._clustered(now):
            self._decrease(epoch, now)

    def on_timeout(self, epoch: int, now: float | None = None) -> None:
        """Feed one timed-out attempt (the slowest possible completion)."""
        self.slow_signals += 1
        if self._clustered(now):
            self._decrease(epoch, now)

    def _window(self, now: float) -> None:
        # Windows last one smoothed round trip (at least 10 ms, so an instant backend's
        # window is not a single call).
        if now - self._win_t > max(self.srtt, 0.01):
            self._win_t, self._win_n, self._win_bad = now, 0, 0

    def _clustered(self, now: float | None) -> bool:
        """Count a fault; whether the faults of this round trip look like congestion."""
        if now is None:
            return True  # no clock: every fault is news (unit tests of the cut rule)
        self._window(now)
        self._win_n += 1
        self._win_bad += 1
        if self._win_bad >= 3 and self._win_bad >= self.fault_tolerance * self._win_n:
            return True
        self.ignored_faults += 1
        return False

    def _decrease(self, epoch: int, now: float | None) -> None:
        if epoch != self.epoch or not self.adaptive:
            return  # this request started before the last cut; it carries stale news
        if now is not None:
            # A rate-limited server stays saturated for about one round trip after a cut
            # (the requests already in flight drain slowly, the bucket is empty): signals in
            # that window are echoes of the same congestion, not new news.
            if now - self._cut_t < self.srtt:
                return
            self._cut_t = now
        factor = 0.5 if self.slow_start else self.backoff
        self._wmax = self._limit
        self.slow_start = False
        self._limit = max(self.floor, self._limit * factor)
        self._ratio = 0.0  # the next epoch's answers are judged afresh
        self.epoch += 1
        self.decreases += 1

    def snapshot(self) -> dict[str, float | int | None]:
        """Observable state for dashboards and tests."""
        return {
            "limit": self.limit,
            "epoch": self.epoch,
            "slow_start": int(self.slow_start),
            "decreases": self.decreases,
            "rate_limited": self.rate_limited,
            "slow_signals": self.slow_signals,
            "ignored_faults": self.ignored_faults,
            "baseline": self.baseline,
            "per_token": self.per_token,
            "per_prefill_token": self.per_prefill_token,
        }

    def export_state(self) -> dict[str, float | int | str | bool]:
        """What this limiter learned (not its options), as JSON-safe data.

        With :meth:`restore_state` a resumed run continues with the same limit, baseline
        and epoch as an uninterrupted one. Infinities are written as strings.
        """
        return {k: _jf(getattr(self, k)) for k in _LEARNED}

    def restore_state(self, state: dict[str, float | int | str | bool]) -> None:
        """Load :meth:`export_state` output (options given at construction are kept)."""
        for k in _LEARNED:
            if k in state:
                v = state[k]
                setattr(self, k, bool(v) if k == "slow_start" else _num(k, v))

    def __repr__(self) -> str:
        return f"AIMDLimiter(limit={self.limit}, epoch={self.epoch})"


#: limiter fields that change while it runs (export_state/restore_state)
_LEARNED = (
    "_limit",
    "epoch",
    "slow_start",
    "samples",
    "decreases",
    "rate_limited",
    "slow_signals",
    "_fix",
    "_fix_t",
    "_fix_prev",
    "_fix_prev_t",
    "_slope",
    "_slope_prev",
    "_fix_u",
    "_fix_prev_u",
    "_pslope",
    "_pslope_prev",
    "_ratio",
    "_cur_n",
    "_wmax",
    "_cut_t",
    "srtt",
    "_win_t",
    "_win_n",
    "_win_bad",
    "ignored_faults",
)
_INTS = frozenset({"epoch", "samples", "decreases", "rate_limited", "slow_signals", "_cur_n",
                   "_win_n", "_win_bad", "ignored_faults", "_fix_t", "_fix_prev_t", "_fix_u",
                   "_fix_prev_u"})  # fmt: skip


def _jf(v: float | int | bool) -> float | int | str | bool:
    # JSON has no infinity; "inf"/"-inf" round-trip through float().
    return str(v) if isinstance(v, float) and math.isinf(v) else v


def _num(key: str, v: float | int | str | bool) -> float | int:
    return int(v) if key in _INTS else float(v)


class ConcurrencyGate:
    """Admits at most ``limiter.limit`` concurrent calls in one event loop (FIFO)."""

    __slots__ = ("in_flight", "limiter", "waiters")

    def __init__(self, limiter: AIMDLimiter) -> None:
        self.limiter = limiter
        self.in_flight = 0
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def try_acquire(self) -> int | None:
        """Take a free slot now (none waiting ahead): the limiter epoch, else ``None``.

        ``acquire``'s fast path without a coroutine, for the client's hot loop.
        """
        if self.in_flight < self.limiter.limit and not self.waiters:
            self.in_flight += 1
            return self.limiter.epoch
        return None

    async def acquire(self) -> int:
        """Wait for a slot; returns the limiter epoch the call starts in."""
        if self.in_flight < self.limiter.limit and not self.waiters:
            self.in_flight += 1
            return self.limiter.epoch
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # granted, then cancelled: hand the slot on
            else:
                try:
                    self.waiters.remove(fut)
                except ValueError:
                    pass
            raise
        return self.limiter.epoch

    def release(self) -> None:
        """Free a slot and admit waiters while the (possibly changed) limit allows."""
        self.in_flight -= 1
        waiters = self.waiters
        while waiters and self.in_flight < self.limiter.limit:
            fut = waiters.popleft()
            if not fut.done():
                self.in_flight += 1
                fut.set_result(None)
