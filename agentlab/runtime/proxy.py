"""``ServiceProxy``: the serialisable bundle of handles a batch task needs.

It travels with every ``step_agent_batch`` task (pickled for Ray) and holds only
configuration: the run directory, the LLM client config, the env handle (an in-process
host or a Ray actor handle), the seed and the clock kind. Live resources — the LLM
client's limiter and simulated server, the replay sink, the tracer — are created on
first use in each process and never pickled.

``proxy.llm`` wraps ``LLMClient`` so that every call, successful or not, lands in the
``llm_calls`` dataset and as an ``llm.call`` span. ``proxy.for_agent(...)`` gives the
per-agent view an agent sees as ``self.services``.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

from agentlab.core.clock import Clock, RealClock
from agentlab.store.agent_store import AgentStore
from agentlab.store.packed_store import open_agent_store

__all__ = ["AgentContext", "RecordingLLM", "ServiceProxy", "derive_seed"]

_LABEL_COLUMNS = ("stage", "iteration", "round", "sender", "receiver_role")


def derive_seed(seed: int, agent_id: str, tick: int, salt: str = "") -> int:
    """A 63-bit seed from ``(seed, agent_id, tick)`` — independent of execution order."""
    h = hashlib.blake2b(f"{seed}\x1f{agent_id}\x1f{tick}\x1f{salt}".encode(), digest_size=8)
    return int.from_bytes(h.digest(), "big") >> 1


class RecordingLLM:
    """An ``LLMClient`` whose every call is written to ``llm_calls`` and traced.

    Counters (``calls``, ``errors``, ``tokens``) let the batch runner report totals.
    """

    def __init__(self, client: Any, proxy: ServiceProxy) -> None:
        self.client = client
        self._proxy = proxy
        self.calls = 0
        self.errors = 0
        self.tokens = 0

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        agent_id: str | None = None,
        labels: dict[str, Any] | None = None,
        tick: int | None = None,
        counter: Any = None,
        **kwargs: Any,
    ) -> Any:
        """``LLMClient.complete`` plus the run log (see the class docstring).

        ``counter`` (an :class:`AgentContext`) also gets ``llm_calls``/``llm_errors``/
        ``tokens`` incremented, so concurrent batches in one process count separately.
        """
        from agentlab.errors import LLMError

        proxy = self._proxy
        tracer = proxy.trace
        span = tracer.start_span("llm.call", agent_id=agent_id, tick=tick)
        self.calls += 1
        record = None
        try:
            resp = await self.client.complete(messages, agent_id=agent_id, labels=labels, **kwargs)
            record = resp.record
            return resp
        except LLMError as err:
            record = getattr(err, "record", None)
            self.errors += 1
            raise
        finally:
            status = "ok" if record is None or record.outcome == "ok" else record.outcome
            if counter is not None:
                counter.llm_calls += 1
                counter.llm_errors += status != "ok"
            if record is not None:
                ntok = record.prompt_tokens + record.completion_tokens
                self.tokens += ntok
                if counter is not None:
                    counter.tokens += ntok
                proxy.replay.append("llm_calls", llm_call_row(record, proxy.run_id, tick))
                tracer.end_span(
                    span,
                    status="ok" if status == "ok" else "error",
                    message=None if status == "ok" else status,
                    model=record.model,
                    prompt_tokens=record.prompt_tokens,
                    completion_tokens=record.completion_tokens,
                )
            else:
                tracer.end_span(span, status="error")


_FIELDS: dict[type, tuple[str, ...]] = {}


def _record_fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        import dataclasses

        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def llm_call_row(record: Any, run_id: str, tick: int | None) -> dict[str, Any]:
    """The ``llm_calls`` row of a ``CallRecord`` (labels flattened + ``labels`` JSON)."""
    # Not CallRecord.to_dict(): dataclasses.asdict deep-copies and was ~1/3 of a step.
    row = {name: getattr(record, name) for name in _record_fields(type(record))}
    labels = row["labels"] = dict(row.get("labels") or {})
    for key in _LABEL_COLUMNS:
        row[key] = labels.get(key)
    row["run_id"] = run_id
    row["tick"] = tick
    return row


class ServiceProxy:
    """Handles for one run, safe to pickle into a Ray task.

    Args:
        run_dir: the run directory.
        llm: ``LLMClient.to_dict()`` output (or a model string).
        env: an env handle (``LocalEnvHandle`` / ``RayEnvHandle``) or ``None``.
        seed: the run seed (per-agent RNGs derive from it).
        run_id: id written into ``llm_calls`` rows.
        clock: ``"real"`` or ``"virtual"``; a live clock can be bound in-process with
            :meth:`bind_clock` (the local executor does, the pickled copy gets a real one).
    """

    def __init__(
        self,
        run_dir: str | Path,
        llm: dict[str, Any] | str,
        env: Any = None,
        *,
        seed: int = 0,
        run_id: str = "",
        clock: str = "real",
    ) -> None:
        self.run_dir = str(run_dir)
        self.llm_config = llm
        self.env = env
        self.seed = seed
        self.run_id = run_id or Path(run_dir).name
        self.clock_name = clock
        self._live: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_live"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

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
            clock = self._live["clock"] = RealClock()
        return clock  # type: ignore[no-any-return]

    @property
    def llm(self) -> RecordingLLM:
        """The recording LLM wrapper of this process (built on first use)."""
        llm = self._live.get("llm")
        if llm is None:
            from agentlab.llm import LLMClient

            cfg = self.llm_config
            client = LLMClient(cfg) if isinstance(cfg, str) else LLMClient.from_dict(cfg)
            llm = self._live["llm"] = RecordingLLM(client.with_clock(self.clock), self)
        return llm  # type: ignore[no-any-return]

    @property
    def replay(self) -> Any:
        """This process's ``ReplaySink`` for the run."""
        sink = self._live.get("replay")
        if sink is None:
            from agentlab.store.replay import get_replay_sink

            sink = self._live["replay"] = get_replay_sink(self.run_dir)
        return sink

    @property
    def trace(self) -> Any:
        """This process's ``Tracer`` for the run."""
        tracer = self._live.get("trace")
        if tracer is None:
            from agentlab.store.trace import get_tracer

            clock = self._live.get("clock")
            tracer = self._live["trace"] = get_tracer(self.run_dir, clock=clock)
        return tracer

    @property
    def store(self) -> AgentStore:
        """The agent store (``<run>/agents``, or ``<run>/agents.sqlite`` when packed)."""
        store = self._live.get("store")
        if store is None:
            # group commit: one transaction per batch, written by flush() below
            store = self._live["store"] = open_agent_store(self.run_dir, group_commit=True)
        return store  # type: ignore[no-any-return]

    def flush(self) -> None:
        """Make this process's rows and spans durable (before a batch returns)."""
        store_flush = getattr(self._live.get("store"), "flush", None)
        if store_flush is not None:  # a packed store's batch of agent writes
            store_flush()
        if "replay" in self._live:
            self._live["replay"].flush()
        if "trace" in self._live:
            flush = getattr(self._live["trace"], "flush", None)
            if flush is not None:
                flush()

    def stage(self, *, replay: Any, trace: Any, store: AgentStore) -> None:
        """Use these sink, tracer and agent store in this process instead of the run's.

        A staged Ray batch (``runtime/staging.py``) writes nowhere in the run directory;
        the driver commits what it returns.
        """
        self._live.update(replay=replay, trace=trace, store=store)

    def for_agent(self, agent_id: str, tick: int, attempt: int = 1) -> AgentContext:
        """The services one agent sees during one step."""
        return AgentContext(self, agent_id, tick, attempt)


class _AgentLLM:
    __slots__ = ("_ctx",)

    def __init__(self, ctx: AgentContext) -> None:
        self._ctx = ctx

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        ctx = self._ctx
        kwargs.setdefault("agent_id", ctx.agent_id)
        labels = dict(kwargs.pop("labels", None) or {})
        labels.setdefault("tick", ctx.tick)
        return await ctx.proxy.llm.complete(
            messages, labels=labels, tick=ctx.tick, counter=ctx, **kwargs
        )


class _AgentEnv:
    """The env as one agent sees it: ``call``/``observe`` carry the agent id."""

    __slots__ = ("_ctx", "_handle")

    def __init__(self, ctx: AgentContext, handle: Any) -> None:
        self._ctx, self._handle = ctx, handle

    def tools(self) -> list[dict[str, Any]]:
        return self._handle.tools()  # type: ignore[no-any-return]

    def describe(self) -> str:
        return self._handle.describe()  # type: ignore[no-any-return]

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        ctx = self._ctx
        tracer = ctx.proxy.trace
        span = tracer.start_span("env.tool", agent_id=ctx.agent_id, tick=ctx.tick, tool=name)
        try:
            result = await self._handle.call(ctx.agent_id, name, arguments or {}, ctx.tick)
        except Exception as exc:
            tracer.end_span(span, status="error", message=f"{type(exc).__name__}: {exc}"[:300])
            raise
        tracer.end_span(span, status="ok")
        return result

    async def observe(self) -> Any:
        return await self._handle.observe(self._ctx.agent_id, self._ctx.tick)


class AgentContext:
    """What ``agent.services`` is during a step: llm, env, rng, tick, attempt, clock."""

    __slots__ = (
        "_asks",
        "_rng",
        "agent_id",
        "attempt",
        "env",
        "llm",
        "llm_calls",
        "llm_errors",
        "proxy",
        "tick",
        "tokens",
    )

    def __init__(self, proxy: ServiceProxy, agent_id: str, tick: int, attempt: int) -> None:
        self.proxy = proxy
        self.agent_id = agent_id
        self.tick = tick
        self.attempt = attempt
        self.llm = _AgentLLM(self)
        self.env = None if proxy.env is None else _AgentEnv(self, proxy.env)
        self._rng: random.Random | None = None
        self._asks = 0
        self.llm_calls = self.llm_errors = self.tokens = 0

    async def ask_user(
        self, question: str, schema: Any = None, *, timeout: float | None = None
    ) -> Any:
        """Ask a person (the HumanInput widget answers) and wait for the reply.

        The request id is ``<agent>:<tick>:<n>``, so a step re-run after a crash or resume
        finds the answer already in the log instead of asking twice.
        """
        from agentlab.store.human import ask_user

        self._asks += 1
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

    @property
    def rng(self) -> random.Random:
        """Seeded from ``(seed, agent_id, tick)``: the same under every executor."""
        if self._rng is None:
            self._rng = random.Random(derive_seed(self.proxy.seed, self.agent_id, self.tick))
        return self._rng

    @property
    def trace(self) -> Any:
        return self.proxy.trace

    def now(self) -> float:
        return self.proxy.clock.now()
