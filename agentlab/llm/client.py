"""``LLMClient``: a small serialisable config with ``complete``/``stream`` for any backend.

The client holds configuration only; its limiter, simulated server and usage live in the
per-process registry of :mod:`agentlab.llm._live`, so a client pickled into a Ray task finds
the state its worker already learned. ``sim/<profile>`` models are served in-process by
:mod:`agentlab.llm.sim_backend` (microseconds per call); anything else goes through litellm.
"""

from __future__ import annotations

import asyncio
import json
import types
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Generator
from typing import Any, cast

from agentlab.core.clock import Clock, RealClock
from agentlab.core.records import SCHEMA_VERSION as RECORD_SCHEMA_VERSION
from agentlab.core.records import CallRecord, LLMResponse, ToolCall, Usage
from agentlab.errors import BadResponseError, ConfigError, LLMError, RateLimitError
from agentlab.llm._live import REAL_CLOCK, Live, get_live
from agentlab.llm.sim_backend import SimResult, check_sim_overrides
from agentlab.llm.sim_content import Rng
from agentlab.llm.sim_profiles import SimProfile, get_profile, profile_field_names
from agentlab.llm.structured import OutputSpec, output_spec

__all__ = ["LLMClient", "LLMStream"]

SCHEMA_VERSION = 1
# client defaults that configure the limiter rather than the request
_LIMITER_KEYS = {
    "aimd_initial": "initial",
    "aimd_latency_factor": "latency_factor",
    "aimd_slow_s": "slow_s",
    "aimd_backoff": "backoff",
}
_BACKOFF_BASE_S = 0.5
_BACKOFF_CAP_S = 30.0


class LLMClient:
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

    model: str
    base_url: str | None
    api_key_env: str | None
    seed: int | None
    timeout: float
    max_retries: int
    _clock: Clock
    _defaults: dict[str, Any]
    _key: str
    _limiter_opts: dict[str, Any]
    _live: Live | None
    _profile: SimProfile | None
    _req_defaults: dict[str, Any]
    _transport: Any
    _wire_model: str
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
        if not isinstance(model, str) or not model:
            raise ConfigError(f"model must be a non-empty string, got {model!r}")
        if timeout <= 0 or max_retries < 0:
            raise ConfigError(
                f"need timeout > 0 and max_retries >= 0, got {timeout}, {max_retries}"
            )
        s = object.__setattr__
        s(self, "model", model)
        s(self, "base_url", base_url)
        s(self, "api_key_env", api_key_env)
        s(self, "seed", None if seed is None else int(seed))
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
    def limiter(self) -> Any:
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
        response_format: Any = None,
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
        live = self._live or self._get_live()
        params = {**self._req_defaults, **overrides} if overrides else self._req_defaults
        if overrides:
            check_sim_overrides(overrides)
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
        live = self._live or self._get_live()
        server = live.server
        if server is None or not server.instant:
            return None
        try:
            return self._now(live, messages, self._req_defaults, agent_id,
                             dict(labels) if labels else {})  # fmt: skip
        except RuntimeError:  # checked only here: the hot path pays nothing for it
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                raise ConfigError(
                    "complete_now() needs a running event loop (the concurrency gate is "
                    "per loop); in plain code use complete_sync(...)"
                ) from None
            raise

    def _now(
        self,
        live: Live,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        agent_id: str | None,
        labels: dict[str, Any],
    ) -> LLMResponse | None:
        """The retry loop of :meth:`_call` for a free-text call on an instant server, when
        it finishes at its first attempt (``SimServer.plan_instant``); else ``None``, with
        nothing done. ``labels`` (a dict of the caller's own) becomes the record's.

        Most calls of a simulated society are of this kind; this path makes them with no
        coroutine, no ``SimResult`` and no retry bookkeeping, for the same outcome.
        """
        gate = live.gate()
        limiter = live.limiter
        # The slot would be taken and handed back with no await in between, so nothing
        # can see it: only check that one is free with nobody queued ahead (the limit is
        # at least 1, so with nothing in flight it need not be looked at).
        in_flight = gate.in_flight
        if gate.waiters or (in_flight and in_flight >= limiter.limit):
            return None
        clock = self._clock
        start = clock.now()
        planned = live.server.plan_instant(messages, params, labels)  # type: ignore[union-attr]
        if planned is None:
            return None
        text, prompt_tokens, n, finish = planned
        end = clock.now()
        limiter.on_success(end - start, n, in_flight + 1, limiter.epoch, end, prompt_tokens)
        # every field in order (records.CallRecord): no keyword matching, no default factory
        rec = CallRecord(live.next_id(), self._wire_model, start, end, start, 0.0, agent_id,
                         labels, prompt_tokens, n, "ok", None, 1, False,
                         RECORD_SCHEMA_VERSION, [])  # fmt: skip
        usage = live.usage
        usage.prompt_tokens += prompt_tokens
        usage.completion_tokens += n
        usage.calls += 1
        return LLMResponse(text, rec, [], None, finish)

    async def _call(
        self,
        live: Live,
        messages: list[dict[str, Any]],
        spec: OutputSpec | None,
        tools: list[dict[str, Any]] | None,
        params: dict[str, Any],
        agent_id: str | None,
        labels: dict[str, Any] | None,
        prior: int,
        pipe: _Pipe | None,
    ) -> LLMResponse:
        """The one retry/limiter loop of ``complete`` and ``stream`` (``pipe`` set).

        Each attempt takes a limiter slot and runs; a call that needs more than one lists
        them all in ``record.tries`` (a first-attempt success leaves it empty). A
        rate limit, timeout or provider error feeds the limiter, backs off and retries; a
        malformed reply (unparseable tool arguments or structured output, empty text) is
        retried at once — unless a stream already delivered text, which a retry would
        duplicate. After ``max_retries`` retries the last error is raised.
        """
        server = live.server
        if pipe is None and spec is None and not tools and server is not None and server.instant:
            resp = self._now(live, messages, params, agent_id, dict(labels) if labels else {})
            if resp is not None:
                return resp
        if server is not None and server.profile.client_overhead_s > 0:
            await server.dispatch()
        rec = self._open(live, self._clock.now(), agent_id, labels, pipe is not None)
        return await self._serve(live, rec, messages, spec, tools, params, prior, pipe)

    def _open(
        self,
        live: Live,
        start: float,
        agent_id: str | None,
        labels: dict[str, Any] | None,
        stream: bool,
    ) -> CallRecord:
        """The front half of a call, at an explicit time: its request id and record.

        ``start`` is when the request was sent (after its client-CPU share,
        :meth:`SimServer.dispatch_at`). Ids are drawn in call order, as the shares are.
        """
        rec = CallRecord(live.next_id(), self._wire_model, start, agent_id=agent_id,
                         labels=dict(labels) if labels else {})  # fmt: skip
        if stream:
            rec.stream = True
        return rec

    async def _serve(
        self,
        live: Live,
        rec: CallRecord,
        messages: list[dict[str, Any]],
        spec: OutputSpec | None,
        tools: list[dict[str, Any]] | None,
        params: dict[str, Any],
        prior: int,
        pipe: _Pipe | None,
    ) -> LLMResponse:
        """The back half of a call opened by :meth:`_open`, from its first gate entry on.

        Every attempt queues (FIFO) for a limiter slot, runs, and feeds the limiter; see
        :meth:`_call` for the retry rules. Everything here reads the clock as it runs.
        """
        server = live.server
        clock = self._clock
        gate = live.gate()
        limiter = live.limiter
        tries = rec.tries
        attempt = 0
        while True:
            epoch = gate.try_acquire()
            if epoch is None:  # no free slot: queue (FIFO) for one
                epoch = await gate.acquire()
            t0 = clock.now()
            try:
                if pipe is not None:
                    res = await pipe.send(
                        self, live, messages, spec, tools, params, prior + attempt, rec.labels
                    )
                elif server is not None:
                    res = server.plan(
                        messages,
                        attempt=prior + attempt,
                        spec=spec,
                        tools=tools,
                        params=params,
                        timeout=self.timeout,
                        labels=rec.labels,
                    )
                    # An instant answer that is already due needs no wait (no coroutine).
                    if res.fault is not None or res.req is not None or res.end > clock.now():
                        res = await server.wait(res, self.model)
                else:
                    res = await self._transport.acall(
                        clock, **self._lkw(messages, spec, tools, params, prior + attempt)
                    )
            except LLMError as exc:
                gate.release()
                t1 = clock.now()
                tries.append((attempt + 1, exc.code, t0, t1, str(exc)[:300]))
                if isinstance(exc, RateLimitError):
                    limiter.on_rate_limit(epoch, t1)
                elif exc.code == "timeout":
                    limiter.on_timeout(epoch, t1)
                if (
                    not exc.retryable
                    or attempt >= self.max_retries
                    or (pipe is not None and pipe.delivered)
                ):
                    self._fail(rec, exc, attempt, live)
                await self._backoff(rec, attempt)
                attempt += 1
                continue
            except BaseException:
                gate.release()
                raise
            in_flight = gate.in_flight
            gate.release()
            t1 = clock.now()
            limiter.on_success(t1 - t0, res.completion_tokens, in_flight, epoch, t1,
                               res.prompt_tokens - getattr(res, "cached_tokens", 0))  # fmt: skip
            try:
                if spec is None and res.text and not res.tool_calls:
                    resp = LLMResponse(res.text, rec, finish_reason=res.finish_reason)
                else:
                    resp = self._parse(res, rec, spec)
            except BadResponseError as exc:
                # The server answered (so the limiter saw a healthy completion), but the
                # reply is unusable: retry at once, the draw of the next attempt differs.
                tries.append((attempt + 1, exc.code, t0, t1, str(exc)[:300]))
                if attempt >= self.max_retries or (pipe is not None and pipe.delivered):
                    self._fail(rec, exc, attempt, live)
                attempt += 1
                continue
            if attempt:  # a first-attempt success leaves ``tries`` empty (nothing to add)
                tries.append((attempt + 1, "ok", t0, t1, None))
            rec.attempts = attempt + 1
            rec.end = clock.now()
            # not observable without streaming for real providers
            rec.first_token = res.first_token if server is not None or pipe is not None else None
            rec.queue_wait = res.queue_wait
            rec.prompt_tokens = res.prompt_tokens
            rec.cached_tokens = getattr(res, "cached_tokens", 0)
            rec.completion_tokens = res.completion_tokens
            usage = live.usage
            usage.prompt_tokens += res.prompt_tokens
            usage.completion_tokens += res.completion_tokens
            usage.calls += 1
            return resp

    def _lkw(
        self,
        messages: list[dict[str, Any]],
        spec: OutputSpec | None,
        tools: list[dict[str, Any]] | None,
        params: dict[str, Any],
        attempt: int,
    ) -> dict[str, Any]:
        # ``attempt`` (0 = first, counting the agent-step's earlier attempts) goes out as
        # the X-Agentlab-Attempt header, so sim-serve's fault draw follows the attempt.
        return {
            "model": self._wire_model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "messages": messages,
            "spec": spec,
            "tools": tools,
            "params": params,
            "seed": self.seed,
            "timeout": self.timeout,
            "attempt": attempt,
        }

    async def _backoff(self, rec: CallRecord, attempt: int) -> None:
        # Exponential backoff with jitter, drawn from a seeded stream so virtual runs repeat.
        u = Rng(hash(rec.request_id) if not self._clock.is_virtual else attempt * 7919).random()
        delay = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**attempt) * (0.5 + 0.5 * u)
        await self._clock.sleep(delay)

    def _fail(self, rec: CallRecord, exc: LLMError, attempt: int, live: Live) -> None:
        rec.end = self._clock.now()
        rec.outcome = exc.code
        rec.error = str(exc)
        rec.attempts = attempt + 1
        live.usage.calls += 1
        live.usage.errors += 1
        exc.record = rec  # type: ignore[attr-defined]
        raise exc

    def _parse(self, res: SimResult, rec: CallRecord, spec: OutputSpec | None) -> LLMResponse:
        """The response of a served attempt; raises ``BadResponseError`` if malformed."""
        resp = LLMResponse(res.text, rec, finish_reason=res.finish_reason)
        if res.tool_calls:
            resp.tool_calls = [_tool_call(*tc) for tc in res.tool_calls]
        elif spec is not None:
            resp.parsed = spec.parse(res.text)
        elif not res.text:
            raise BadResponseError(f"{self._wire_model}: empty completion (no text, no tool call)")
        return resp

    def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        response_format: Any = None,
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
        if overrides:
            check_sim_overrides(overrides)
        args = (messages, output_spec(response_format), tools, agent_id, labels, prior_attempts)
        return LLMStream(self, args, overrides)

    def complete_sync(self, messages: list[dict[str, Any]], **kwargs: Any) -> LLMResponse:
        """Blocking :meth:`complete` for scripts.

        Raises:
            ConfigError: called while an event loop is running (e.g. in Jupyter) — there,
                write ``await client.complete(...)`` instead.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.complete(messages, **kwargs))
        raise ConfigError(
            "complete_sync() cannot run inside a running event loop (Jupyter, async code); "
            "use `await client.complete(...)` instead"
        )


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


def _tool_call(call_id: str, name: str, raw: str) -> ToolCall:
    try:
        args = json.loads(raw) if raw else {}
    except ValueError:
        raise BadResponseError(
            f"tool call {name!r} has malformed JSON arguments: {raw[:200]!r}"
        ) from None
    if not isinstance(args, dict):
        raise BadResponseError(f"tool call {name!r} arguments are not a JSON object: {raw[:200]!r}")
    return ToolCall(call_id, name, args)


class _Pipe:
    """One stream's transport inside :meth:`LLMClient._call`: its deltas go to the consumer.

    ``_call`` runs inside the :class:`LLMStream` iterator, driven step by step by it (no
    task, no queue). Each attempt builds its transport's delta generator and awaits the
    pipe: that hands the generator to the iterator, which runs it, yields each delta
    straight to the consumer and then resumes the attempt (or throws the transport's
    error into it, for the retry loop). Only that iterator may drive a ``_call`` given a
    pipe (a task would refuse the pipe as a "bad yield").
    """

    __slots__ = ("clock", "delivered", "deltas", "first")

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.deltas: AsyncGenerator[str, None] | None = None
        self.delivered = False  # text reached the consumer: a retry would duplicate it
        self.first: float | None = None

    def __await__(self) -> Generator[_Pipe, None, None]:
        yield self  # to LLMStream._run, which runs self.deltas

    async def send(
        self,
        client: LLMClient,
        live: Live,
        messages: list[dict[str, Any]],
        spec: OutputSpec | None,
        tools: list[dict[str, Any]] | None,
        params: dict[str, Any],
        attempt: int,
        labels: dict[str, Any],
    ) -> SimResult:
        clock = self.clock
        holder: list[SimResult] = []
        if live.server is not None:
            res = live.server.plan(messages, attempt=attempt, spec=spec, tools=tools,
                                   params=params, timeout=client.timeout,
                                   labels=labels)  # fmt: skip
            holder.append(res)
            deltas = cast(AsyncGenerator[str, None], live.server.chunks(res, client.model))
        else:
            deltas = client._transport.astream(
                clock, holder, **client._lkw(messages, spec, tools, params, attempt)
            )
        self.deltas = deltas
        try:
            await self
        except BaseException:
            # The transport failed (then this is a no-op), or the consumer left while it
            # held a delta: the transport is suspended at its yield; close it now
            # (connection, timer) rather than whenever the generator is collected.
            await deltas.aclose()
            raise
        finally:
            self.deltas = None
        res = holder[-1]
        res.first_token = self.first if self.first is not None else clock.now()
        return res


@types.coroutine
def _wait(awaited: Any) -> Generator[Any, Any, Any]:
    # Pass what the attempt awaits (a future, or None for a bare yield) to the task running
    # the consumer, and its answer back: the task waits on it in the attempt's place.
    return (yield awaited)


class LLMStream:
    """An in-progress streamed completion (see :meth:`LLMClient.stream`).

    The attempts run in :meth:`LLMClient._call` (the same retry/limiter loop as
    ``complete``), driven inline by the iterator the caller consumes: each delta the
    transport produces is yielded at once, with no task or queue in between. Closing the
    iterator early (``aclose``, or breaking out and letting it be collected), an error in
    the consumer's loop body, or cancelling the consumer cancels the attempt where it
    stands, which frees its concurrency slot and its connection at once.
    """

    def __init__(self, client: LLMClient, args: tuple[Any, ...], overrides: dict[str, Any]) -> None:
        self._client = client
        self._args = args
        self._overrides = overrides
        self.response: LLMResponse | None = None
        self.chunks = 0

    def __aiter__(self) -> AsyncIterator[str]:
        return self._run()

    async def collect(self) -> LLMResponse:
        """Drain the stream and return the final response."""
        async for _ in self._run():
            pass
        assert self.response is not None
        return self.response

    async def _run(self) -> AsyncIterator[str]:
        c = self._client
        messages, spec, tools, agent_id, labels, prior = self._args
        live = c._get_live()
        params = {**c._req_defaults, **self._overrides}
        pipe = _Pipe(c._clock)
        call = c._call(live, messages, spec, tools, params, agent_id, labels, prior, pipe)
        send, throw = call.send, call.throw
        clock = pipe.clock
        # What to throw into the attempt at its next step (what a task would): the
        # transport's error, the consumer's cancellation, or CancelledError once the
        # consumer has gone (``gone``: why it stopped listening).
        exc: BaseException | None = None
        gone: BaseException | None = None
        # The attempt starts one loop turn after iteration does, where a task running it
        # (the previous design) took its first step: the request id, the gate's FIFO
        # order and so every record stay what they were next to calls made in the same
        # turn (a virtual-clock run repeats across releases). One loop turn, ~3 us.
        try:
            await asyncio.sleep(0)  # in the try: cancelled here, the unstarted call is closed
            while True:
                try:
                    got = send(None) if exc is None else throw(exc)
                except StopIteration as stop:
                    if gone is None:
                        self.response = stop.value
                        return
                    raise gone from None
                except asyncio.CancelledError:
                    if gone is None:
                        raise
                    raise gone from None
                exc = None
                if got is not pipe:  # the attempt waits (a slot, a backoff): so do we
                    try:
                        await _wait(got)
                    except BaseException as why:  # e.g. the consumer's task was cancelled
                        exc = why
                    continue
                # The attempt streams: run its transport here, each delta straight out.
                try:
                    async for d in pipe.deltas:  # type: ignore[union-attr]
                        if d and pipe.first is None:  # the first text of the stream
                            pipe.first = clock.now()
                            pipe.delivered = True
                        self.chunks += 1
                        try:
                            yield d
                        except BaseException as why:  # GeneratorExit (closed early), athrow
                            gone, exc = why, asyncio.CancelledError()
                            break
                except BaseException as why:  # the transport's error: the retry loop's
                    exc = why
        finally:
            call.close()  # a no-op once finished; else (left some other way) no awaits now
