"""``RunServices``: the one services object every driver records through.

A ``Society`` (every batch task, pickled for Ray), an ``Experiment`` and an ``AgentSystem``
each hold one. It carries configuration only — the run directory, the LLM client config,
the env handle, the seed, the clock kind — and builds its live resources (the LLM client's
limiter and simulated server, the replay sink, the tracer, the agent store) on first use in
each process; they are never pickled.

``services.llm`` is a :class:`~agentlab.runtime.recording.RecordingLLM`: every call and stream, successful or not,
lands in ``llm_calls`` (one row, columns from :mod:`agentlab.store.catalog`), the attempts
of every call that was retried or failed in ``llm_attempts`` (a first-attempt success is
fully described by its ``llm_calls`` row; ``Run.llm_attempts_df()`` lists every attempt),
and one ``llm.call`` span with OpenTelemetry GenAI attributes. ``services.for_agent(...)`` gives the per-agent view an agent sees as
``self.services`` (typed by :class:`agentlab.agents.AgentServices`).
"""

from __future__ import annotations

import os
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.core.clock import Clock, RealClock
from agentlab.core.records import LLMResponse
from agentlab.errors import ConfigError
from agentlab.runtime.recording import RecordingLLM
from agentlab.runtime.step_rng import StepRandom, derive_seed
from agentlab.store import catalog
from agentlab.store.agent_store import AgentStore
from agentlab.store.packed_store import open_agent_store
from agentlab.store.trace import genai_tool_attrs

if TYPE_CHECKING:
    from agentlab.agents.base import AgentEnv, AgentLLM
    from agentlab.messaging import MessageSink
    from agentlab.runtime.batch_log import BatchLog
    from agentlab.store.replay import ReplaySink
    from agentlab.store.trace import Tracer

__all__ = ["AgentContext", "RecordingLLM", "RunServices", "derive_seed"]


def _span_rate(value: float | None) -> float:
    if value is None:
        raw = os.environ.get("AGENTLAB_LLM_SPANS", "1")
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(
                f"AGENTLAB_LLM_SPANS={raw!r}: give a fraction of LLM calls to trace, "
                "1 (every call, the default) to 0 (none)"
            ) from None
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"llm_spans={value!r}: give a fraction from 0 (none) to 1 (every call)")
    return float(value)


class RunServices:
    """Handles for one run, safe to pickle into a Ray task.

    Args:
        run_dir: the run directory.
        llm: an ``LLMClient``, its ``to_dict()`` output, or a model string. A live client
            is used as given in this process (with its clock); a pickled copy rebuilds it
            from its config.
        env: an env handle (``LocalEnvHandle`` / ``RayEnvHandle``) or ``None``.
        seed: the run seed (per-agent RNGs derive from it).
        run_id: id written into ``llm_calls``/``messages`` rows (default: the directory
            name); a call's ``run_id`` label (an experiment's sub-run) takes precedence.
        clock: ``"real"`` or ``"virtual"``; a live clock can be bound in-process with
            :meth:`bind_clock` (the local executor does, the pickled copy gets a real one).
        llm_spans: the fraction of LLM calls that also get an ``llm.call`` span (default
            ``AGENTLAB_LLM_SPANS`` or 1: every call). Chosen by a hash of the agent, tick
            and call number (else the request id), so a rerun traces the same agents'
            calls; the ``llm_calls`` rows are always complete.
        llm_io: also write each call's prompt and reply to the ``llm_io`` dataset
            (default ``AGENTLAB_LLM_IO`` = ``1``/``0``, off): what ``agentlab view`` shows
            behind a call, an error or a message.

    Raises:
        ConfigError: ``llm_spans`` is not a fraction from 0 to 1.
    """

    def __init__(
        self,
        run_dir: str | Path,
        llm: Any,
        env: Any = None,
        *,
        seed: int = 0,
        run_id: str = "",
        clock: str = "real",
        llm_spans: float | None = None,
        llm_io: bool | None = None,
    ) -> None:
        self.run_dir = str(run_dir)
        self._live: dict[str, Any] = {}
        if hasattr(llm, "to_dict") and hasattr(llm, "complete"):
            self._live["client"] = llm
            llm = llm.to_dict()
        self.llm_config: dict[str, Any] | str = llm
        self.env = env
        self.seed = seed
        self.run_id = run_id or Path(run_dir).name
        self.clock_name = clock
        self.llm_spans = _span_rate(llm_spans)
        if llm_io is None:
            llm_io = os.environ.get("AGENTLAB_LLM_IO", "0") not in ("", "0")
        self.llm_io = bool(llm_io)
        #: a Ray handle on the run's human desk (``runtime/ray_human.py``): set in the copy
        #: a Ray task gets, so ``ask_user`` goes through the driver, not the run directory
        self.human_desk: Any = None

    @staticmethod
    def span_rate(value: float | None = None) -> float:
        """The ``llm_spans`` fraction for ``value`` (``None``: ``AGENTLAB_LLM_SPANS`` or 1).

        Raises:
            ConfigError: not a fraction from 0 to 1.
        """
        return _span_rate(value)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_live"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("llm_spans", 1.0)  # pickled by an older version
        state.setdefault("llm_io", False)
        self.__dict__.update(state)
        self.__dict__.setdefault("human_desk", None)

    # --- live resources (per process) --------------------------------------------------

    def bind_clock(self, clock: Clock) -> None:
        """Use this live clock in this process (local executor, virtual time)."""
        self._live["clock"] = clock
        self._live.pop("llm", None)
        self._live.pop("trace", None)

    @property
    def clock(self) -> Clock:
        """The bound clock, or a real clock."""
        clock = self._live.get("clock")
        if clock is None:
            given = self._live.get("client")
            clock = self._live["clock"] = given.clock if given is not None else RealClock()
        return clock  # type: ignore[no-any-return]

    @property
    def llm(self) -> RecordingLLM:
        """The recording LLM wrapper of this process (built on first use)."""
        llm = self._live.get("llm")
        if llm is None:
            from agentlab.llm import LLMClient

            client = self._live.get("client")
            if client is None:
                cfg = self.llm_config
                client = LLMClient(cfg) if isinstance(cfg, str) else LLMClient.from_dict(cfg)
            if client.clock is not self.clock:
                client = client.with_clock(self.clock)
            # real providers also record a response cache in the run dir (llm="cache:RUN")
            client = client.with_cache(str(self._live.get("stage_root", self.run_dir)))
            # declared before the first row, so no column type is ever inferred
            catalog.register(self.replay, self._llm_datasets(), module=__name__)
            llm = self._live["llm"] = RecordingLLM(client, self)
        return llm  # type: ignore[no-any-return]

    def bind_llm(self, client: Any) -> None:
        """Record ``client``'s calls in this process instead of the run's ``LLMClient``'s
        (a virtual batch on Ray, whose calls the time server answers:
        ``runtime/vclock_worker.py``)."""
        catalog.register(self.replay, self._llm_datasets(), module=__name__)
        self._live["llm"] = RecordingLLM(client, self)

    def _llm_datasets(self) -> tuple[str, ...]:
        return (
            ("llm_calls", "llm_attempts", "llm_io")
            if self.llm_io
            else ("llm_calls", "llm_attempts")
        )

    @property
    def replay(self) -> ReplaySink:
        """This process's ``ReplaySink`` for the run."""
        sink = self._live.get("replay")
        if sink is None:
            from agentlab.store.replay import get_replay_sink

            sink = self._live["replay"] = get_replay_sink(self.run_dir)
        return sink  # type: ignore[no-any-return]

    @property
    def trace(self) -> Tracer:
        """This process's ``Tracer`` for the run."""
        tracer = self._live.get("trace")
        if tracer is None:
            from agentlab.store.trace import get_tracer

            tracer = self._live["trace"] = get_tracer(self.run_dir, clock=self.clock)
        return tracer  # type: ignore[no-any-return]

    @property
    def store(self) -> AgentStore:
        """The agent store (``<run>/agents``, or ``<run>/agents.sqlite`` when packed)."""
        store = self._live.get("store")
        if store is None:
            # group commit: one transaction per batch, written by flush() below
            store = self._live["store"] = open_agent_store(self.run_dir, group_commit=True)
        return store  # type: ignore[no-any-return]

    def message_sink(self, run_id: str | None = None) -> MessageSink:
        """A ``MessageSink`` writing the run's ``messages`` dataset (give it to a ``MsgHub``)."""
        from agentlab.messaging import ReplayMessageSink

        rid = run_id or self.run_id
        sinks: dict[str, MessageSink] = self._live.setdefault("message_sinks", {})
        sink = sinks.get(rid)
        if sink is None:  # one per run id: registering takes the catalogue's file lock
            sink = sinks[rid] = ReplayMessageSink(self.replay, run_id=rid)
        return sink

    def flush(self) -> None:
        """Make this process's rows and spans durable (before a batch returns)."""
        store_flush = getattr(self._live.get("store"), "flush", None)
        if store_flush is not None:  # a packed store's batch of agent writes
            store_flush()
        if "replay" in self._live:
            self._live["replay"].flush()
        if "trace" in self._live:
            self._live["trace"].flush()

    def stage(
        self,
        *,
        replay: ReplaySink,
        trace: Tracer,
        store: AgentStore | None = None,
        root: Path | None = None,
    ) -> None:
        """Use these sink, tracer and agent store in this process instead of the run's.

        A staged Ray batch or the Ray env actor (``runtime/staging.py``) writes nowhere in
        the run directory; the driver commits what it returns. ``root`` (the staging
        directory) also takes a real provider's response cache.
        """
        self._live.update(replay=replay, trace=trace)
        if store is not None:
            self._live["store"] = store
        if root is not None:
            self._live["stage_root"] = root
            self._live.pop("llm", None)  # rebuilt with the cache under root
        self._live.pop("message_sinks", None)

    def for_agent(
        self, agent_id: str, tick: int, attempt: int = 1, log: BatchLog | None = None
    ) -> AgentContext:
        """The services one agent sees during one step.

        ``log``: the batch's row buffer; the step's ``llm_calls`` rows and spans go there
        and are written when the batch ends (``None``: written one by one).
        """
        return AgentContext(self, agent_id, tick, attempt, log)


class _AgentLLM:
    __slots__ = ("_ctx",)

    def __init__(self, ctx: AgentContext) -> None:
        self._ctx = ctx

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        labels: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, LLMResponse]:
        """``RecordingLLM.complete`` with the agent's id, tick and counters filled in.

        A plain method returning the call's coroutine (``await`` it): one coroutine frame
        less per LLM call of every agent, and its arguments passed positionally.
        """
        ctx = self._ctx
        agent_id = kwargs.pop("agent_id", ctx.agent_id)
        labels = dict(labels) if labels else {}
        labels.setdefault("tick", ctx.tick)
        llm = ctx.proxy.llm
        if ctx.attempt > 1:
            # A retried step must not meet the same simulated faults again: its calls
            # continue the attempt count where the failed step's left off.
            kwargs.setdefault("prior_attempts", (ctx.attempt - 1) * (llm.client.max_retries + 1))
        if kwargs and ("tick" in kwargs or "counter" in kwargs):  # the caller's TypeError
            return llm.complete(messages, agent_id=agent_id, labels=labels, tick=ctx.tick,
                                counter=ctx, **kwargs)  # fmt: skip
        return llm._complete(messages, agent_id, labels, ctx.tick, ctx, kwargs)


class _AgentEnv:
    """The env as one agent sees it: ``call``/``observe`` carry the agent id."""

    __slots__ = ("_ctx", "_handle")

    def __init__(self, ctx: AgentContext, handle: Any) -> None:
        self._ctx, self._handle = ctx, handle

    def tools(self) -> list[dict[str, Any]]:
        return self._handle.tools()  # type: ignore[no-any-return]

    def describe(self) -> str:
        return self._handle.describe()  # type: ignore[no-any-return]

    async def call(
        self, name: str, arguments: dict[str, Any] | None = None, *, call_id: str | None = None
    ) -> Any:
        ctx = self._ctx
        tracer = ctx.proxy.trace
        attrs = genai_tool_attrs(name, call_id, ctx.agent_id)
        attrs["agentlab.tick"] = ctx.tick
        span = tracer.start_span("env.tool", **attrs)
        try:
            result = await self._handle.call(ctx.agent_id, name, arguments or {}, ctx.tick)
        except Exception as exc:
            tracer.end_span(span, status="error", message=f"{type(exc).__name__}: {exc}"[:300])
            raise
        tracer.end_span(span, status="ok")
        return result

    async def ask(self, text: str, *, module: str | None = None) -> dict[str, Any]:
        """Ask the *environment* in natural language; its configured router (``react``,
        ``codegen``, ``plan``, ``two_tier``) turns the request into tool calls.

        Not :meth:`AgentContext.ask_user`, which asks a person. Returns
        ``RouteResult.to_dict()``: ``ok``, ``observation`` (text for the agent), ``calls``,
        ``value``, ``error``... A refused or failed request is a result, not an exception.
        Recorded in ``env_requests``; the router's LLM calls land in ``llm_calls``.
        """
        ctx = self._ctx
        tracer = ctx.proxy.trace
        attrs: dict[str, Any] = {"gen_ai.agent.id": ctx.agent_id, "agentlab.tick": ctx.tick}
        span = tracer.start_span("env.ask", **attrs)
        token = tracer.activate(span)  # the router's LLM calls go under it
        try:
            out = await self._handle.ask(ctx.agent_id, text, ctx.tick, ctx.proxy, module)
        except Exception as exc:
            tracer.end_span(span, status="error", message=f"{type(exc).__name__}: {exc}"[:300])
            raise
        finally:
            tracer.deactivate(token)
        span.set_attributes(**{
            "agentlab.env.router": out.get("router") or "",
            "agentlab.env.tool_calls": len(out.get("calls") or ()),
            "agentlab.env.llm_calls": out.get("llm_calls") or 0})  # fmt: skip
        tracer.end_span(span, status="ok" if out.get("ok") else "error")
        return out  # type: ignore[no-any-return]

    async def observe(self) -> Any:
        return await self._handle.observe(self._ctx.agent_id, self._ctx.tick)

    async def run_skill_script(
        self, code: str, *, path: str, allowed_tools: list[str]
    ) -> dict[str, Any]:
        """Run an Agent Skill's script where the env lives (this process or the env
        actor), in its sandbox with only ``allowed_tools`` callable; recorded in
        ``env_requests``. The hook of ``agentlab.agents.skills.env_script_runner``.

        Raises:
            UnsafeCodeError: the script breaks the sandbox's rules.
        """
        ctx = self._ctx
        return await self._handle.run_skill_script(  # type: ignore[no-any-return]
            ctx.agent_id, code, path, list(allowed_tools), ctx.tick, ctx.proxy
        )


class AgentContext:
    """What ``agent.services`` is during a step (implements ``agents.AgentServices``)."""

    __slots__ = (
        "_asks",
        "_rng",
        "agent_id",
        "attempt",
        "env",
        "latency_us",
        "llm",
        "llm_calls",
        "llm_errors",
        "log",
        "proxy",
        "tick",
        "tokens",
    )

    llm: AgentLLM
    env: AgentEnv | None

    def __init__(
        self,
        proxy: RunServices,
        agent_id: str,
        tick: int,
        attempt: int,
        log: BatchLog | None = None,
    ) -> None:
        self.proxy = proxy
        self.log = log
        self.agent_id = agent_id
        self.tick = tick
        self.attempt = attempt
        self.llm = _AgentLLM(self)
        self.env = None if proxy.env is None else _AgentEnv(self, proxy.env)
        self._rng: StepRandom | None = None
        self._asks = 0
        self.llm_calls = self.llm_errors = self.tokens = self.latency_us = 0

    async def ask_user(
        self, question: str, schema: Any = None, *, timeout: float | None = None
    ) -> Any:
        """Ask a person (the HumanInput widget answers) and wait for the reply.

        The request id is ``<agent>:<tick>:<n>``, so a step re-run after a crash or resume
        finds the answer already in the log instead of asking twice.
        """
        from agentlab.store.human import ask_user

        self._asks += 1
        desk = self.proxy.human_desk
        if desk is not None:  # a Ray task: through the driver (runtime/ray_human.py)
            from agentlab.runtime.ray_human import ask_desk

            return await ask_desk(
                desk,
                question,
                schema,
                ts=self.proxy.clock.now(),
                agent_id=self.agent_id,
                tick=self.tick,
                request_id=f"{self.agent_id}:{self.tick}:{self._asks}",
                timeout=timeout,
            )
        return await ask_user(
            self.proxy.run_dir,
            question,
            schema,
            self.proxy.clock,
            agent_id=self.agent_id,
            tick=self.tick,
            request_id=f"{self.agent_id}:{self.tick}:{self._asks}",
            timeout=timeout,
        )

    def message_sink(self) -> MessageSink:
        """A ``MessageSink`` for a ``MsgHub`` the agent runs: rows land in ``messages``."""
        return self.proxy.message_sink()

    @property
    def rng(self) -> StepRandom:
        """A ``random.Random`` seeded from ``(seed, agent_id, tick)``: the same under every
        executor, batching and resume (a :class:`StepRandom`, built on first use)."""
        rng = self._rng
        if rng is None:
            rng = self._rng = StepRandom(derive_seed(self.proxy.seed, self.agent_id, self.tick))
        return rng

    @property
    def trace(self) -> Tracer:
        """The run's tracer."""
        return self.proxy.trace

    def now(self) -> float:
        """The run clock's time."""
        return self.proxy.clock.now()
