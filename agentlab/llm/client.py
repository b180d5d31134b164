"""``LLMClient``: a small serialisable config with ``complete``/``stream`` for any backend.

The client holds configuration only; its limiter, simulated server and usage live in the
per-process registry of :mod:`agentlab.llm._live`, so a client pickled into a Ray task finds
the state its worker already learned. ``sim/<profile>`` models are served in-process by
:mod:`agentlab.llm.sim_backend` (microseconds per call); anything else goes through litellm.
"""

from __future__ import annotations

import asyncio
import json
import operator
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from agentlab.core.blocking import refuse_in_running_loop
from agentlab.core.clock import Clock, RealClock
from agentlab.core.records import LLMResponse, Usage
from agentlab.errors import ConfigError
from agentlab.llm._live import REAL_CLOCK, Live, get_live
from agentlab.llm.client_retry import _RetryLoop
from agentlab.llm.client_stream import LLMStream
from agentlab.llm.sim_backend import check_sim_overrides
from agentlab.llm.sim_profiles import SimProfile, get_profile, profile_field_names
from agentlab.llm.sim_result import check_sim_request_values
from agentlab.llm.structured import output_spec

if TYPE_CHECKING:
    from pydantic import BaseModel

    from agentlab.llm.aimd import AIMDLimiter

__all__ = ["LLMClient", "LLMStream", "client_on_clock"]

SCHEMA_VERSION = 1
# client defaults that configure the limiter rather than the request
_LIMITER_KEYS = {
    "aimd_initial": "initial",
    "aimd_latency_factor": "latency_factor",
    "aimd_slow_s": "slow_s",
    "aimd_backoff": "backoff",
}


class LLMClient(_RetryLoop):
    """Configuration of an LLM endpoint plus the calls that use it.

    Args:
        model: ``"sim/<profile>"`` (simulated, see ``agentlab.llm.PROFILES``) or any litellm
            model string (``"openai/gpt-4o-mini"``, ``"hosted_vllm/name"``...).
        base_url: API base for OpenAI-compatible servers (vLLM, llama.cpp, ``sim-serve``).
        api_key_env: name of the environment variable holding the API key (the key itself
            is never stored, so configs can be logged and pickled safely).
        seed: seed of the simulator (and passed to providers that accept one).
        timeout: seconds per attempt (clock time: virtual under a ``VirtualClock``).
        max_retries: retries of retryable errors (rate limit, timeout, provider error).
        **defaults: default request parameters (``temperature``, ``max_tokens``, ``sim_*``
            overrides), simulator profile parameters (``slots=4``...), limiter options
            (``aimd_initial``, ``aimd_latency_factor``, ``aimd_slow_s``, ``aimd_backoff``)
            or ``concurrency=N`` for a fixed limit instead of AIMD.

    Raises:
        UnknownNameError: unknown ``sim/`` profile (the message lists the profiles).
        ConfigError: a default is not JSON-serialisable or a profile parameter is invalid.
    """

    __slots__ = (
        "_cache",
        "_clock",
        "_defaults",
        "_key",
        "_limiter_opts",
        "_live",
        "_profile",
        "_req_defaults",
        "_transport",
        "_wire_model",
        "api_key_env",
        "base_url",
        "max_retries",
        "model",
        "seed",
        "timeout",
    )

    _defaults: dict[str, Any]
    _key: str
    _limiter_opts: dict[str, Any]
    _live: Live | None
    _profile: SimProfile | None
    _req_defaults: dict[str, Any]
    _cache: Any

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str | None = None,
        seed: int | None = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        **defaults: Any,
    ) -> None:
        if isinstance(model, SimProfile):  # (a fitted profile, say: it is run by its file)
            raise ConfigError(
                f"LLMClient takes a model name, not the SimProfile {model.name!r}: save it"
                f" (profile.save('{model.name}.toml')) and pass 'sim/{model.name}.toml'"
            )
        if not isinstance(model, str) or not model:
            raise ConfigError(f"model must be a non-empty string, got {model!r}")
        if timeout <= 0 or max_retries < 0:
            raise ConfigError(
                f"need timeout > 0 and max_retries >= 0, got {timeout}, {max_retries}"
            )
        if seed is not None:
            try:  # (a numpy integer too; "3" or 2.5 were taken as 3 and 2)
                seed = operator.index(seed)
            except TypeError:
                raise ConfigError(f"seed must be an integer or None, got {seed!r}") from None
        s = object.__setattr__
        s(self, "model", model)
        s(self, "base_url", base_url)
        s(self, "api_key_env", api_key_env)
        s(self, "seed", seed)
        s(self, "timeout", float(timeout))
        s(self, "max_retries", int(max_retries))
        s(self, "_defaults", dict(defaults))
        try:
            key = json.dumps(self.to_dict(), sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"LLMClient defaults must be JSON-serialisable: {exc}") from None
        s(self, "_key", key)
        s(self, "_wire_model", model)
        s(self, "_cache", None)
        if model.startswith("cache:"):
            # Replay a recorded run: send exactly what it sent (see llm/cache_backend.py).
            from agentlab.llm.cache_backend import source_config

            src = source_config(model[6:])
            s(self, "_wire_model", src["model"])
            s(self, "timeout", float(src.get("timeout", timeout)))
            s(self, "max_retries", int(src.get("max_retries", max_retries)))
            # the recorded transport (e.g. transport="lean") is not this client's: it replays
            recorded = {k: v for k, v in src.get("defaults", {}).items() if k != "transport"}
            defaults = {**recorded, **defaults}
        limiter: dict[str, Any] = {}
        profile_params: dict[str, Any] = {}
        req: dict[str, Any] = {}
        sim_fields = profile_field_names() if model.startswith("sim/") else frozenset()
        for k, v in defaults.items():
            if k in _LIMITER_KEYS:
                limiter[_LIMITER_KEYS[k]] = v
            elif k == "concurrency":
                limiter.update(initial=int(v), adaptive=False)
            elif k in sim_fields:
                profile_params[k] = v
            else:
                req[k] = v
        check_sim_overrides(req)
        if sim_fields:
            check_sim_request_values(req)
        s(self, "_transport", _pick_transport(model, base_url, req.pop("transport", "auto")))
        if model.startswith("cache:"):
            from agentlab.llm.cache_backend import ReplayTransport

            s(self, "_transport", ReplayTransport(model))
        profile = get_profile(model[4:], **profile_params) if model.startswith("sim/") else None
        s(self, "_profile", profile)
        s(self, "_limiter_opts", limiter)
        s(self, "_req_defaults", req)
        s(self, "_clock", REAL_CLOCK)
        s(self, "_live", None)

    # --- config ----------------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"LLMClient is frozen; use with_clock() or a new client ({name})")

    @property
    def defaults(self) -> dict[str, Any]:
        """A copy of the default parameters given at construction."""
        return dict(self._defaults)

    @property
    def clock(self) -> Clock:
        """The clock that times this client's calls."""
        return self._clock

    @property
    def profile(self) -> SimProfile | None:
        """The simulator profile (with overrides applied), or None for real providers."""
        return self._profile

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable config (the clock is not part of it)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "seed": self.seed,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "defaults": dict(self._defaults),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LLMClient:
        """Rebuild a client from :meth:`to_dict` output."""
        return cls(
            d["model"],
            base_url=d.get("base_url"),
            api_key_env=d.get("api_key_env"),
            seed=d.get("seed"),
            timeout=d.get("timeout", 120.0),
            max_retries=d.get("max_retries", 3),
            **d.get("defaults", {}),
        )

    def with_clock(self, clock: Clock) -> LLMClient:
        """The same config timed by ``clock`` (e.g. a ``VirtualClock``)."""
        other = LLMClient.from_dict(self.to_dict())
        object.__setattr__(other, "_clock", REAL_CLOCK if isinstance(clock, RealClock) else clock)
        if self._cache is not None:
            from agentlab.llm.cache_backend import RecordingTransport

            object.__setattr__(other, "_cache", self._cache)
            object.__setattr__(
                other, "_transport", RecordingTransport(other._transport, self._cache)
            )
        return other

    def with_cache(self, run_dir: str) -> LLMClient:
        """The same config recording every real-provider attempt into ``run_dir``'s
        response cache (``llm_cache/``, replayed by ``LLMClient("cache:RUN")``).

        Simulated (``sim/``) and replaying (``cache:``) clients record nothing.
        """
        if self.model.startswith(("sim/", "cache:")) or self._cache is not None:
            return self
        from agentlab.llm.cache_backend import RecordingTransport, get_recorder

        other = self.with_clock(self._clock)
        recorder = get_recorder(run_dir, self.to_dict())
        object.__setattr__(other, "_cache", recorder)
        object.__setattr__(other, "_transport", RecordingTransport(other._transport, recorder))
        return other

    def __reduce__(self) -> tuple[Any, ...]:
        # Virtual clocks hold asyncio futures and cannot travel: fall back to real time.
        return (_rebuild, (self.to_dict(),))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LLMClient) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self._defaults.items())
        seed = f", seed={self.seed}" if self.seed is not None else ""
        return f"LLMClient({self.model!r}{seed}{extra})"

    # --- live state ------------------------------------------------------------------

    def _get_live(self) -> Live:
        live = self._live
        if live is None:
            sim = (self._profile, self.seed or 0) if self._profile is not None else None
            live = get_live(self._key, self._clock, limiter_opts=self._limiter_opts, sim=sim)
            object.__setattr__(self, "_live", live)
        return live

    @property
    def limit(self) -> int:
        """Current AIMD concurrency limit in this process."""
        return self._get_live().limiter.limit

    @property
    def limiter(self) -> AIMDLimiter:
        """This process's :class:`~agentlab.llm.aimd.AIMDLimiter` for this config."""
        return self._get_live().limiter

    @property
    def usage(self) -> Usage:
        """Tokens and calls of this config in this process (a copy; merge with ``+``)."""
        u = self._get_live().usage
        return Usage(u.prompt_tokens, u.completion_tokens, u.calls, u.errors)

    def in_flight(self) -> int:
        """Calls of this config currently in flight in this process."""
        return self._get_live().in_flight()

    def export_state(self) -> dict[str, Any]:
        """What this client learned in this process (and clock), JSON-safe.

        The AIMD limiter, the simulated server (slot free times, queue, quota buckets,
        counters), usage totals and the request-id counter: everything the next call's
        timing and record depend on. ``Society`` stores it in each commit.
        """
        return self._get_live().export_state()

    def restore_state(self, state: dict[str, Any]) -> None:
        """Load :meth:`export_state` output into this client's live state."""
        self._get_live().restore_state(state)

    def server_metrics(self) -> dict[str, Any]:
        """Simulated server metrics (running, waiting, tokens/s, totals) plus client side.

        For real providers only the client-side figures (limit, in flight, usage) appear.
        """
        live = self._get_live()
        out: dict[str, Any] = live.server.metrics() if live.server is not None else {}
        out.update(
            aimd_limit=live.limiter.limit, in_flight=live.in_flight(), **live.usage.to_dict()
        )
        return out

    # --- calls -----------------------------------------------------------------------

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        response_format: type[BaseModel] | dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        stream: bool = False,
        agent_id: str | None = None,
        labels: dict[str, Any] | None = None,
        prior_attempts: int = 0,
        **overrides: Any,
    ) -> Coroutine[Any, Any, LLMResponse]:
        """One chat completion with limiter, retries, timeout and a call record (awaitable).

        A plain method returning the coroutine of the retry loop (``await`` it as usual):
        one coroutine frame less on the hottest path of a simulated run.

        Args:
            prior_attempts: attempts the caller already spent on this request (an agent
                step being retried passes them), so the attempt numbers — and the
                simulator's fault draws, which depend on them — continue instead of
                repeating.

        Returns:
            An :class:`~agentlab.core.records.LLMResponse` whose ``record`` is filled in
            (``record.tries`` lists every attempt and its outcome when there was more
            than one).

        Raises:
            LLMError: a subclass (``RateLimitError``, ``LLMTimeoutError``,
                ``BadResponseError``, ``StructuredOutputError``, ``ProviderError``) after
                the retries are spent; its ``record`` attribute holds the failed call.
        """
        if stream:
            s = self.stream(
                messages,
                response_format=response_format,
                tools=tools,
                agent_id=agent_id,
                labels=labels,
                prior_attempts=prior_attempts,
                **overrides,
            )
            return s.collect()
        self._check_call(messages, overrides)
        live = self._live or self._get_live()
        params = {**self._req_defaults, **overrides} if overrides else self._req_defaults
        spec = output_spec(response_format) if response_format is not None else None
        return self._call(live, messages, spec, tools, params, agent_id, labels,
                          prior_attempts, None)  # fmt: skip

    def complete_now(
        self,
        messages: list[dict[str, Any]],
        *,
        agent_id: str | None = None,
        labels: dict[str, Any] | None = None,
    ) -> LLMResponse | None:
        """``complete(messages, agent_id=..., labels=...)`` done at once, when it can be.

        On a simulated server without latency (``sim/instant``) a call that needs no
        wait, no retry and no queued slot is plain computation: this does it without a
        coroutine and returns what awaiting :meth:`complete` would (the same response and
        record, limiter update, usage and server counters). Any other call — another
        backend, faults that may strike, a full concurrency gate, a program-writing prompt
        — returns ``None`` having done nothing: then await :meth:`complete`. Call it from
        a running event loop (the concurrency gate is per loop).

        Raises:
            ConfigError: no event loop is running (plain code: use :meth:`complete_sync`).
        """
        return self._complete_now(messages, agent_id, dict(labels) if labels else {})

    def _complete_now(
        self, messages: list[dict[str, Any]], agent_id: str | None, labels: dict[str, Any]
    ) -> LLMResponse | None:
        """:meth:`complete_now` with ``labels`` a dict the caller hands over (it becomes
        the record's, uncopied): ``RecordingLLM`` gives its agents' calls' labels, which it
        has just copied, so the instant path copies them once, not twice."""
        live = self._live or self._get_live()
        server = live.server
        if server is None or not server.instant:
            return None
        try:
            return self._now(live, messages, self._req_defaults, agent_id, labels)
        except RuntimeError:  # checked only here: the hot path pays nothing for it
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                raise ConfigError(
                    "complete_now() needs a running event loop (the concurrency gate is "
                    "per loop); in plain code use complete_sync(...)"
                ) from None
            raise

    def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        response_format: type[BaseModel] | dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        agent_id: str | None = None,
        labels: dict[str, Any] | None = None,
        prior_attempts: int = 0,
        **overrides: Any,
    ) -> LLMStream:
        """Start a streamed completion: ``async for delta in client.stream(msgs)``.

        After iteration ``stream.response`` holds the :class:`LLMResponse` (its record has
        ``stream=True`` and ``first_token`` = arrival of the first non-empty chunk).
        """
        self._check_call(messages, overrides)
        spec = output_spec(response_format) if response_format is not None else None
        args = (messages, spec, tools, agent_id, labels, prior_attempts)
        return LLMStream(self, args, overrides)

    def _check_call(self, messages: Any, overrides: dict[str, Any]) -> None:
        """What :meth:`complete` and :meth:`stream` refuse before anything runs: messages
        that are not a non-empty sequence of dicts, unknown or misspelt fields and, on a
        simulated model, sampling values a real server refuses."""
        if not messages or not isinstance(messages, list):
            check_messages(messages)
        if overrides:
            check_sim_overrides(overrides)
            if self._profile is not None:
                check_sim_request_values(overrides)

    def complete_sync(self, messages: list[dict[str, Any]], **kwargs: Any) -> LLMResponse:
        """Blocking :meth:`complete` for scripts.

        Raises:
            ConfigError: called while an event loop is running (e.g. in Jupyter) — there,
                write ``await client.complete(...)`` instead.
        """
        refuse_in_running_loop(
            "complete_sync() cannot run inside a running event loop (Jupyter, async code); "
            "use `await client.complete(...)` instead"
        )
        return asyncio.run(self.complete(messages, **kwargs))


def _pick_transport(model: str, base_url: str | None, transport: str) -> Any:
    """The backend module of a real provider: the lean HTTP path or litellm (lazy import)."""
    from agentlab.llm import openai_http

    if model.startswith("sim/"):  # served in process; the value is still checked
        openai_http.lean_eligible("openai/", "-", transport)
        return None

    if openai_http.lean_eligible(model, base_url, transport):
        return openai_http
    from agentlab.llm import litellm_backend

    return litellm_backend


def _rebuild(d: dict[str, Any]) -> LLMClient:
    return LLMClient.from_dict(d)


def check_messages(messages: Any) -> None:
    """Raise ConfigError unless ``messages`` is a non-empty sequence of message dicts (a
    list, a ``KnownPrefix``, an ``EncodedHistory``): ``complete("hi")`` failed on
    ``'str' object has no attribute 'get'`` deep in the simulator."""
    example = "[{'role': 'user', 'content': 'hi'}]"
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        got = type(messages).__name__
        raise ConfigError(f"messages must be a list of message dicts, e.g. {example}; got {got}")
    if not messages:
        raise ConfigError(f"messages is empty: a chat needs at least one, e.g. {example}")


def client_on_clock(llm: Any, clock: Clock, *, seed: int | None = None) -> Any:
    """``llm`` (a model string, built with ``seed``, or a client) timed by ``clock``: what
    every driver that owns its clock does (``Experiment``, ``recorded_run``). A virtual
    clock needs a simulated model (a real endpoint answers in real time)."""
    client = LLMClient(llm, seed=seed) if isinstance(llm, str) else llm
    if clock.is_virtual and not str(getattr(client, "model", "")).startswith("sim/"):
        raise ConfigError(
            f"clock='virtual' needs a simulated model ('sim/...'), got {client.model!r}; "
            "use clock='real' for real endpoints"
        )
    return client.with_clock(clock) if hasattr(client, "with_clock") else client
