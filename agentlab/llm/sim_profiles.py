"""Profiles of the simulated backend: ``sim/<profile>`` model strings.

A profile is a frozen bundle of server parameters (slots, prefill/decode rates, completion
length distribution, rate limits, fault rates). Any field can be overridden through the
client's defaults, e.g. ``LLMClient("sim/vllm-3b", slots=4)``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from agentlab.errors import ConfigError, UnknownNameError

__all__ = ["PROFILES", "SimProfile", "get_profile", "profile_field_names"]


@dataclass(frozen=True, slots=True)
class SimProfile:
    """Parameters of one simulated LLM server.

    Rates of ``0`` mean "instant" (no time is spent on that phase); ``slots=0`` means
    unlimited concurrency (no queue). ``rpm``/``tpm`` of ``0`` disable rate limiting.
    """

    name: str
    slots: int = 0  # concurrent sequences the server decodes; 0 = unlimited
    prefill_tps: float = 0.0  # prompt tokens per second (whole server, one prompt at a time)
    decode_tps: float = 0.0  # tokens per second for ONE sequence decoding alone
    decode_degrade: float = 0.0  # per extra running sequence: rate / (1 + d * (running - 1))
    overhead_s: float = 0.0  # fixed network + scheduling time before the first token
    # Client-side CPU per request (building, serialising and sending it), spent serially by
    # the calling process before the request starts: litellm costs ~5-20 ms here. It is what
    # spaces out a fan-out of N "simultaneous" calls by a few milliseconds instead of 0.
    client_overhead_s: float = 0.0
    completion_median: float = 32.0  # log-normal completion length: median tokens
    completion_sigma: float = 0.5  # ... and sigma of log(tokens)
    max_completion: int = 1024  # hard cap (like max_tokens)
    rpm: float = 0.0  # requests per minute before 429s; 0 = no limit
    tpm: float = 0.0  # tokens (prompt + completion) per minute before 429s; 0 = no limit
    burst_s: float = 2.0  # token buckets hold this many seconds of rpm/tpm
    rate_limit_s: float = 0.0  # time a 429 answer takes to arrive
    p_rate_limit: float = 0.0  # injected fault rates, per attempt
    p_timeout: float = 0.0
    p_malformed: float = 0.0
    hang_s: float = 1e9  # how long a "timeout" fault hangs (the client's timeout cuts it)
    tool_call_p: float = 0.5  # probability of a tool call when tools are offered
    bool_p: float = 0.5  # probability a boolean JSON field is true
    stream_chunks: int = 12  # a streamed completion arrives in about this many chunks

    def capacity_rps(self, completion_tokens: float, prompt_tokens: float) -> float:
        """Requests/s the server sustains at full load for the given mean request size.

        Used by benchmarks to express throughput as a share of capacity.
        """
        caps: list[float] = []
        if self.slots > 0 and self.decode_tps > 0:
            rate = self.decode_tps / (1.0 + self.decode_degrade * (self.slots - 1))
            service = completion_tokens / rate + self.overhead_s
            if self.prefill_tps > 0:
                service += prompt_tokens / self.prefill_tps
            caps.append(self.slots / service)
        if self.rpm > 0:
            caps.append(self.rpm / 60.0)
        if self.tpm > 0:
            caps.append(self.tpm / 60.0 / max(1.0, completion_tokens + prompt_tokens))
        return min(caps) if caps else math.inf

    def mean_completion(self) -> float:
        """Mean of the (uncapped) log-normal completion length."""
        return self.completion_median * math.exp(self.completion_sigma**2 / 2)

    def replace(self, **changes: Any) -> SimProfile:
        """A copy with some fields changed (values are type-checked loosely)."""
        if not changes:
            return self
        fields = {f.name: f for f in dataclasses.fields(self)}
        clean: dict[str, Any] = {}
        for k, v in changes.items():
            f = fields.get(k)
            if f is None or k == "name":
                raise ConfigError(
                    f"unknown sim profile parameter {k!r}; valid: {', '.join(sorted(fields))}"
                )
            try:
                clean[k] = int(v) if f.type == "int" else float(v)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"sim profile parameter {k}={v!r} is not a number") from exc
            if clean[k] < 0:
                raise ConfigError(f"sim profile parameter {k}={v!r} must be >= 0")
        return dataclasses.replace(self, **clean)


PROFILES: dict[str, SimProfile] = {
    # No latency at all: measures the toolkit's own overhead and throughput.
    "instant": SimProfile(name="instant", tool_call_p=0.5),
    # vLLM serving a ~3B model on a small GPU: 8 sequences at a time, FIFO queue beyond.
    "vllm-3b": SimProfile(
        name="vllm-3b",
        slots=8,
        prefill_tps=4000.0,
        decode_tps=60.0,
        decode_degrade=0.04,
        overhead_s=0.01,
        client_overhead_s=0.004,
        completion_median=120.0,
        completion_sigma=0.6,
        max_completion=1024,
    ),
    # A hosted API: effectively unlimited concurrency but RPM/TPM quotas that answer 429.
    "cloud": SimProfile(
        name="cloud",
        prefill_tps=20000.0,
        decode_tps=80.0,
        overhead_s=0.3,
        client_overhead_s=0.006,
        completion_median=120.0,
        completion_sigma=0.6,
        max_completion=1024,
        rpm=1200.0,
        tpm=600_000.0,
        burst_s=2.0,
        rate_limit_s=0.05,
    ),
}


def profile_field_names() -> frozenset[str]:
    """Names of the overridable profile parameters."""
    return frozenset(f.name for f in dataclasses.fields(SimProfile) if f.name != "name")


def get_profile(name: str, **overrides: Any) -> SimProfile:
    """Look up ``name`` (without the ``sim/`` prefix) and apply parameter overrides.

    Raises:
        UnknownNameError: ``name`` is not a registered profile.
        ConfigError: an override is unknown or not a non-negative number.
    """
    base = PROFILES.get(name)
    if base is None:
        raise UnknownNameError("sim profile", f"sim/{name}", [f"sim/{p}" for p in PROFILES])
    return base.replace(**overrides)
