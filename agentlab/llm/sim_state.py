"""The simulated server's metrics and saved state: vLLM-like counters
(:meth:`ServerState.metrics`) and everything that affects future calls
(:meth:`ServerState.export_state` / :meth:`ServerState.restore_state`).

A mixin of :class:`~agentlab.llm.sim_backend.SimServer`, which owns the attributes.
"""

from __future__ import annotations

import math
from typing import Any

from agentlab.core.clock import Clock
from agentlab.errors import ConfigError
from agentlab.llm.sim_engine import Engine
from agentlab.llm.sim_profiles import SimProfile

__all__ = ["ServerState"]


class ServerState:
    """Metrics and state of :class:`~agentlab.llm.sim_backend.SimServer`."""

    clock: Clock
    engine: Engine
    profile: SimProfile
    faults: dict[str, int]
    requests_total: int
    rejected_total: int
    prompt_tokens_total: int
    _active: list[tuple[float, float, int]]
    _rpm_level: float
    _tpm_level: float
    _bucket_t: float
    _gen_unbatched: int
    _rate_t: float
    _rate_tokens: int
    _client_free: float
    _client_draws: int

    @property
    def generation_tokens_total(self) -> int:
        """Tokens of finished requests."""
        return self.engine.generated_total + self._gen_unbatched

    def _prune(self, now: float) -> None:
        keep = []
        for item in self._active:
            if item[1] <= now:
                self._gen_unbatched += item[2]
            else:
                keep.append(item)
        self._active = keep

    def metrics(self) -> dict[str, float]:
        """vLLM-like server metrics at the clock's current time."""
        now = self.clock.now()
        self.engine.advance(now)
        self._prune(now)
        running, waiting = self.engine.load()
        kv = self.engine.kv
        running += sum(1 for s, e, _ in self._active if s <= now < e)
        dt = now - self._rate_t
        total = self.generation_tokens_total
        tps = (total - self._rate_tokens) / dt if dt > 0 else 0.0
        self._rate_t, self._rate_tokens = now, total
        return {
            "num_requests_running": running,
            "num_requests_waiting": waiting,
            "slots": self.profile.slots,
            "generation_tokens_per_s": tps,
            "requests_total": self.requests_total,
            "rejected_total": self.rejected_total,
            "faults_rate_limited_total": self.faults["rate_limited"],
            "faults_timeout_total": self.faults["timeout"],
            "faults_malformed_total": self.faults["malformed"],
            "prompt_tokens_total": self.prompt_tokens_total,
            "generation_tokens_total": total,
            "steps_total": self.engine.steps_total,
            "kv_cache_usage_perc": self.engine.kv_usage(),
            "num_preemptions_total": self.engine.preemptions_total,
            "prefix_cache_queries_total": 0 if kv is None else kv.query_tokens_total,
            "prefix_cache_hits_total": 0 if kv is None else kv.hit_tokens_total,
        }

    def export_state(self) -> dict[str, Any]:
        """Everything that affects future calls, JSON-able (see :meth:`restore_state`).

        Engine queues and slots, quota buckets, counters, the client-CPU draw counter and
        time. Content draws are a pure function of (seed, request, attempt): no rng state.
        """

        def num(x: float) -> float | None:
            return None if math.isinf(x) else x

        return {
            "schema_version": _STATE_VERSION,
            "engine": self.engine.export_state(),
            "active": [list(a) for a in self._active],
            "rpm_level": self._rpm_level,
            "tpm_level": self._tpm_level,
            "bucket_t": self._bucket_t,
            "requests_total": self.requests_total,
            "rejected_total": self.rejected_total,
            "prompt_tokens_total": self.prompt_tokens_total,
            "gen_unbatched": self._gen_unbatched,
            "rate_t": self._rate_t,
            "rate_tokens": self._rate_tokens,
            "client_free": num(self._client_free),
            "client_draws": self._client_draws,
            "faults": dict(self.faults),
        }

    def restore_state(self, d: dict[str, Any]) -> None:
        """Load the output of :meth:`export_state` (same profile and seed).

        A resumed society restores this so that its calls get the same queue waits and
        times as in an uninterrupted run.

        Raises:
            ConfigError: the state is of another schema version, or holds more running
                sequences than this profile's ``slots``.
        """
        version = d.get("schema_version")
        if version != _STATE_VERSION:
            raise ConfigError(
                f"simulated server state has schema_version {version!r}; this simulator "
                f"reads {_STATE_VERSION} (state saved by another agentlab version)"
            )
        running = len(d.get("engine", {}).get("running", []))
        if self.profile.slots > 0 and running > self.profile.slots:
            raise ConfigError(
                f"simulated server state has {running} running sequences; profile "
                f"{self.profile.name!r} has {self.profile.slots} slots"
            )
        self.engine.restore_state(d.get("engine", {}))
        self._active = [(float(a), float(b), int(c)) for a, b, c in d.get("active", [])]
        self._rpm_level = float(d["rpm_level"])
        self._tpm_level = float(d["tpm_level"])
        self._bucket_t = float(d["bucket_t"])
        self.requests_total = int(d["requests_total"])
        self.rejected_total = int(d["rejected_total"])
        self.prompt_tokens_total = int(d["prompt_tokens_total"])
        self._gen_unbatched = int(d.get("gen_unbatched", 0))
        self._rate_t = float(d["rate_t"])
        self._rate_tokens = int(d["rate_tokens"])
        cf = d.get("client_free")
        self._client_free = -math.inf if cf is None else float(cf)
        self._client_draws = int(d["client_draws"])
        for kind, count in (d.get("faults") or {}).items():
            if kind in self.faults:
                self.faults[kind] = int(count)


#: version of :meth:`SimServer.export_state`'s layout (1: the pre-engine slot heap)
_STATE_VERSION = 2
