"""The simulated LLM server behind ``sim/<profile>`` models.

Latency model (all times from the client's :class:`~agentlab.core.clock.Clock`):

- a request arriving at ``t`` takes the earliest-free of ``slots`` decode slots (FIFO, since
  admissions happen in arrival order); ``queue_wait = start - t``;
- ``first_token = start + overhead_s + prompt_tokens / prefill_tps + 1 / rate`` and
  ``end = first_token + (n - 1) / rate``, where the per-sequence decode ``rate`` is
  ``decode_tps / (1 + decode_degrade * (running - 1))`` with ``running`` counted when the
  request starts (an approximation: later arrivals do not slow it down retroactively);
- a request whose deadline (client timeout) passes first frees its slot at the deadline,
  as vLLM aborts a request whose client went away.

Because a slot's end time is known at admission, the queue needs no asyncio objects: the
server is plain state, and callers just ``await clock.sleep`` until the planned times.
Rate limits are token buckets (``rpm``, ``tpm``) refilled continuously, holding
``burst_s`` seconds of quota. One server exists per client config, per clock, per process:
Ray workers each get their own (use ``agentlab sim-serve`` for one shared server).
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from agentlab.core.clock import Clock
from agentlab.errors import ConfigError, LLMTimeoutError, RateLimitError
from agentlab.llm.sim_content import (
    Rng,
    append_marker,
    gen_text,
    gen_tool_call,
    gen_value,
    request_hash,
)
from agentlab.llm.sim_profiles import SimProfile
from agentlab.llm.structured import OutputSpec

__all__ = ["SIM_OVERRIDES", "SimResult", "SimServer"]

#: per-call overrides the simulator understands (everything else ``sim_*`` is an error)
SIM_OVERRIDES = frozenset(
    {
        "sim_completion_tokens",
        "sim_bool_p",
        "sim_marker",
        "sim_marker_p",
        "sim_tool_call_p",
        "sim_p_rate_limit",
        "sim_p_timeout",
        "sim_p_malformed",
    }
)


@dataclass(slots=True)
class SimResult:
    """What the simulated server answers (before client-side parsing)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    arrival: float
    queue_wait: float | None
    first_token: float
    end: float
    finish_reason: str = "stop"
    # (id, name, arguments as a JSON string — possibly malformed on purpose)
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)
    fault: str | None = None  # None, "rate_limited", "timeout"
    fault_at: float = 0.0  # when the fault is reported


class SimServer:
    """State of one simulated server (slots, buckets, totals). See the module docstring."""

    def __init__(self, profile: SimProfile, seed: int, clock: Clock) -> None:
        self.profile = profile
        self.seed = seed
        self.clock = clock
        self._free: list[float] = [-math.inf] * profile.slots  # heap of slot free times
        self._active: list[tuple[float, float, int]] = []  # (start, end, tokens) not yet done
        self._instant = (
            profile.slots == 0
            and profile.prefill_tps == 0
            and profile.decode_tps == 0
            and profile.overhead_s == 0
            and profile.rpm == 0
            and profile.tpm == 0
        )
        self._rpm_level = profile.rpm / 60.0 * profile.burst_s
        self._tpm_level = profile.tpm / 60.0 * profile.burst_s
        self._bucket_t = clock.now()
        # counters (vLLM-like)
        self.requests_total = 0
        self.rejected_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0  # finished requests only
        self._scheduled_tokens = 0
        self._rate_t = clock.now()
        self._rate_tokens = 0
        self._client_free = -math.inf  # when the calling process's CPU is next free
        self._client_draws = 0

    async def dispatch(self) -> None:
        """Spend the client-side CPU of one request (``client_overhead_s``), serially.

        Requests issued together (a fan-out) are sent one after another, each costing a
        log-normally jittered share of CPU (deterministic per seed), so their start times
        differ by milliseconds as they do with a real client, never by exactly zero.
        """
        mean = self.profile.client_overhead_s
        if mean <= 0:
            return
        self._client_draws += 1
        u = Rng(self.seed * 1_000_003 + self._client_draws).random()
        # log-normal with sigma 0.5 via the inverse normal CDF of u (mean-preserving)
        cost = mean * math.exp(0.5 * NormalDist().inv_cdf(min(max(u, 1e-9), 1 - 1e-9)) - 0.125)
        now = self.clock.now()
        ready = max(now, self._client_free) + cost
        self._client_free = ready
        await self.clock.sleep(ready - now)

    # --- persistence -----------------------------------------------------------------

    def export_state(self) -> dict[str, Any]:
        """Everything that shapes this server's future answers and timings, JSON-safe.

        Slot free times, requests still active, quota buckets, counters and the client-CPU
        draw counter; content randomness derives from request hashes, so it needs nothing.
        A resumed society restores this (see :meth:`restore_state`) so that its calls get
        the same queue waits and start times as in an uninterrupted run.
        """
        return {
            "schema_version": 1,
            "free": [_jf(f) for f in self._free],
            "active": [[_jf(a), _jf(b), n] for a, b, n in self._active],
            "rpm_level": self._rpm_level,
            "tpm_level": self._tpm_level,
            "bucket_t": _jf(self._bucket_t),
            "requests_total": self.requests_total,
            "rejected_total": self.rejected_total,
            "prompt_tokens_total": self.prompt_tokens_total,
            "generation_tokens_total": self.generation_tokens_total,
            "scheduled_tokens": self._scheduled_tokens,
            "rate_t": _jf(self._rate_t),
            "rate_tokens": self._rate_tokens,
            "client_free": _jf(self._client_free),
            "client_draws": self._client_draws,
        }

    def restore_state(self, state: dict[str, Any]) -> None:
        """Load :meth:`export_state` output into this (same-profile) server.

        Raises:
            ConfigError: the state has a different number of slots than the profile.
        """
        free = [float(f) for f in state["free"]]
        if len(free) != len(self._free):
            raise ConfigError(
                f"simulated server state has {len(free)} slots; profile "
                f"{self.profile.name!r} has {len(self._free)}"
            )
        self._free = free  # exported in heap layout: kept as is, so pops repeat exactly
        self._active = [(float(a), float(b), int(n)) for a, b, n in state["active"]]
        self._rpm_level = float(state["rpm_level"])
        self._tpm_level = float(state["tpm_level"])
        self._bucket_t = float(state["bucket_t"])
        self.requests_total = int(state["requests_total"])
        self.rejected_total = int(state["rejected_total"])
        self.prompt_tokens_total = int(state["prompt_tokens_total"])
        self.generation_tokens_total = int(state["generation_tokens_total"])
        self._scheduled_tokens = int(state["scheduled_tokens"])
        self._rate_t = float(state["rate_t"])
        self._rate_tokens = int(state["rate_tokens"])
        self._client_free = float(state["client_free"])
        self._client_draws = int(state["client_draws"])

    # --- planning --------------------------------------------------------------------

    def plan(
        self,
        messages: list[dict[str, Any]],
        *,
        attempt: int = 0,
        spec: OutputSpec | None = None,
        tools: list[dict[str, Any]] | None = None,
        params: dict[str, Any] | None = None,
        timeout: float = math.inf,
    ) -> SimResult:
        """Decide content, faults and timings of one attempt (no waiting happens here)."""
        p = self.profile
        params = params or {}
        now = self.clock.now()
        extra = ""
        if spec is not None:
            extra = spec.name
        if tools:
            extra += "|" + ",".join(str(t.get("function", t).get("name")) for t in tools)
        h = request_hash(self.seed, messages, extra)
        prompt_tokens = 4 * len(messages)
        for m in messages:
            c = m.get("content")
            prompt_tokens += len(c) // 4 if isinstance(c, str) else 16
        if tools:
            prompt_tokens += len(json.dumps(tools)) // 4
        self.requests_total += 1

        # Faults are drawn per attempt, so a retry can succeed; content is not.
        fault = None
        p_rl = float(params.get("sim_p_rate_limit", p.p_rate_limit))
        p_to = float(params.get("sim_p_timeout", p.p_timeout))
        p_mal = float(params.get("sim_p_malformed", p.p_malformed))
        malformed = False
        if p_rl or p_to or p_mal:
            u = Rng(h * 1000003 + attempt + 1).random()
            if u < p_rl:
                fault = "rate_limited"
            elif u < p_rl + p_to:
                fault = "timeout"
            elif u < p_rl + p_to + p_mal:
                malformed = True

        rng = Rng(h)
        text, calls, n = self._content(rng, spec, tools, params, malformed)
        res = SimResult(text, prompt_tokens, n, now, 0.0, now, now, tool_calls=calls)
        if malformed:
            res.finish_reason = "length"
        if self._instant and fault is None:
            self.prompt_tokens_total += prompt_tokens
            self.generation_tokens_total += n
            return res
        if fault is None and not self._take_quota(now, prompt_tokens + n):
            fault = "rate_limited"
        if fault == "rate_limited":
            self.rejected_total += 1
            res.fault, res.fault_at = fault, now + p.rate_limit_s
            return res
        if fault == "timeout":
            res.fault, res.fault_at = fault, now + min(p.hang_s, timeout)
            return res
        self._schedule(res, now, timeout)
        return res

    def _content(
        self,
        rng: Rng,
        spec: OutputSpec | None,
        tools: list[dict[str, Any]] | None,
        params: dict[str, Any],
        malformed: bool,
    ) -> tuple[str, list[tuple[str, str, str]], int]:
        p = self.profile
        bool_p = float(params.get("sim_bool_p", p.bool_p))
        if tools:
            choice = params.get("tool_choice", "auto")
            forced = None
            if isinstance(choice, dict):
                forced = choice.get("function", {}).get("name")
            tool_p = float(params.get("sim_tool_call_p", p.tool_call_p))
            if choice != "none" and (choice == "required" or forced or rng.random() < tool_p):
                name, args = gen_tool_call(tools, rng, bool_p=bool_p, name=forced)
                raw = json.dumps(args)
                if malformed:
                    raw = raw[: max(1, len(raw) // 2)]
                call_id = f"call_{rng.randint(1 << 30):08x}"
                return "", [(call_id, name, raw)], max(1, len(raw) // 4 + 8)
        if spec is not None:
            text = json.dumps(gen_value(spec.schema, rng, bool_p=bool_p))
            if malformed:
                text = text[: max(1, len(text) // 2)]
            return text, [], max(1, len(text) // 4)
        if malformed:
            return "", [], 0
        n_fixed = params.get("sim_completion_tokens")
        if n_fixed is not None:
            n = int(n_fixed)
        else:
            n = int(p.completion_median * math.exp(p.completion_sigma * rng.normal()) + 0.5)
        cap = params.get("max_tokens") or params.get("max_completion_tokens") or p.max_completion
        n = max(1, min(n, int(cap)))
        # free text only: a marker the caller parses ("[CONSENSUS]"), at rate sim_marker_p
        marker = params.get("sim_marker")
        text = append_marker(gen_text(rng, n), rng, marker, float(params.get("sim_marker_p", 1.0)))
        return text, [], n

    def _take_quota(self, now: float, tokens: int) -> bool:
        p = self.profile
        if p.rpm == 0 and p.tpm == 0:
            return True
        dt = max(0.0, now - self._bucket_t)
        self._bucket_t = now
        if p.rpm:
            self._rpm_level = min(p.rpm / 60.0 * p.burst_s, self._rpm_level + dt * p.rpm / 60.0)
            if self._rpm_level < 1.0:
                return False
        if p.tpm:
            cap = p.tpm / 60.0 * p.burst_s
            self._tpm_level = min(cap, self._tpm_level + dt * p.tpm / 60.0)
            if self._tpm_level < min(tokens, cap):
                return False
            self._tpm_level -= tokens
        if p.rpm:
            self._rpm_level -= 1.0
        return True

    def _schedule(self, res: SimResult, now: float, timeout: float) -> None:
        p = self.profile
        start = now
        running = 1
        if p.slots > 0:
            start = max(now, heapq.heappop(self._free))
            running += sum(1 for f in self._free if f > start)
        rate = p.decode_tps / (1.0 + p.decode_degrade * (running - 1)) if p.decode_tps else 0.0
        tpot = 1.0 / rate if rate else 0.0
        prefill = res.prompt_tokens / p.prefill_tps if p.prefill_tps else 0.0
        first = start + p.overhead_s + prefill + tpot
        end = first + (res.completion_tokens - 1) * tpot
        deadline = now + timeout
        slot_end = end
        if end > deadline:
            res.fault, res.fault_at = "timeout", deadline
            slot_end = max(start, deadline) if deadline > start else start
        if p.slots > 0:
            heapq.heappush(self._free, slot_end)
        res.queue_wait = start - now
        res.first_token, res.end = first, end
        self.prompt_tokens_total += res.prompt_tokens
        done = res.completion_tokens if res.fault is None else 0
        self._active.append((start, slot_end, done))
        if len(self._active) > 64 + 4 * p.slots:
            self._prune(now)

    def _prune(self, now: float) -> None:
        keep = []
        for item in self._active:
            if item[1] <= now:
                self.generation_tokens_total += item[2]
            else:
                keep.append(item)
        self._active = keep

    # --- running a planned attempt ------------------------------------------------------

    async def wait(self, res: SimResult, model: str) -> SimResult:
        """Sleep until the planned end (or raise the planned fault when it is due)."""
        clock = self.clock
        if res.fault is not None:
            delay = res.fault_at - clock.now()
            if delay > 0:
                await clock.sleep(delay)
            raise self._fault_error(res, model)
        delay = res.end - clock.now()
        if delay > 0:
            await clock.sleep(delay)
        return res

    async def chunks(self, res: SimResult, model: str) -> AsyncIterator[str]:
        """Yield the text in about ``stream_chunks`` pieces at their planned times."""
        clock = self.clock
        if res.fault == "rate_limited" or (res.fault and res.fault_at <= res.first_token):
            await self.wait(res, model)  # raises
        text = res.text
        k = max(1, min(self.profile.stream_chunks, res.completion_tokens, len(text) or 1))
        span = res.end - res.first_token
        for i in range(k):
            t = res.first_token + (span * i / (k - 1) if k > 1 else 0.0)
            if res.fault is not None and t > res.fault_at:
                await self.wait(res, model)  # raises the timeout mid-stream
            delay = t - clock.now()
            if delay > 0:
                await clock.sleep(delay)
            piece = text[len(text) * i // k : len(text) * (i + 1) // k]
            if piece or i == 0:
                yield piece
        if res.fault is not None:
            await self.wait(res, model)

    def _fault_error(self, res: SimResult, model: str) -> Exception:
        if res.fault == "rate_limited":
            return RateLimitError(f"{model}: rate limited (simulated 429)")
        return LLMTimeoutError(f"{model}: no complete answer before the timeout (simulated)")

    # --- metrics ------------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """vLLM-like server metrics at the clock's current time."""
        now = self.clock.now()
        self._prune(now)
        running = sum(1 for s, e, _ in self._active if s <= now < e)
        waiting = sum(1 for s, _, _ in self._active if s > now)
        dt = now - self._rate_t
        tps = (self.generation_tokens_total - self._rate_tokens) / dt if dt > 0 else 0.0
        self._rate_t, self._rate_tokens = now, self.generation_tokens_total
        return {
            "num_requests_running": running,
            "num_requests_waiting": waiting,
            "slots": self.profile.slots,
            "generation_tokens_per_s": tps,
            "requests_total": self.requests_total,
            "rejected_total": self.rejected_total,
            "prompt_tokens_total": self.prompt_tokens_total,
            "generation_tokens_total": self.generation_tokens_total,
        }


def _jf(v: float) -> float | str:
    # JSON has no infinity (idle slots are free since -inf); float("-inf") reads it back.
    return str(v) if math.isinf(v) else v


def check_sim_overrides(params: dict[str, Any]) -> None:
    """Raise ConfigError for an unknown ``sim_*`` override (typos fail loudly)."""
    for k in params:
        if k.startswith("sim_") and k not in SIM_OVERRIDES:
            raise ConfigError(
                f"unknown simulator override {k!r}; valid: {', '.join(sorted(SIM_OVERRIDES))}"
            )
