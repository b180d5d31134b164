"""``step_agent_batch``: the unit of work of a tick (one coroutine or one Ray task).

A batch carries only specs — agent ids and type names, plus the classes another process
could not import (notebook-defined agents) — and the ``RunServices``. Inside, each agent
is rebuilt from its workspace at the committed tick, stepped concurrently with its
batch-mates, and persisted as the version of the new tick. A failed step is retried per
:class:`RetryPolicy` from a fresh rebuild, and every failed attempt is recorded in the
``agent_errors`` dataset and as a span; the final outcome of every agent is a row in
``agent_states``. The batch flushes its rows before it returns, so the driver can take
log offsets right after the last batch.
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from agentlab.agents.base import AgentBase, load_agent
from agentlab.agents.registry import ensure_registered, get_agent_class
from agentlab.agents.workspace import Workspace, preload
from agentlab.errors import ConfigError
from agentlab.runtime.batch_log import BatchLog
from agentlab.runtime.services import AgentContext
from agentlab.store.catalog import STATE_ROW_KEYS
from agentlab.store.trace import genai_agent_attrs

if TYPE_CHECKING:
    from agentlab.runtime.services import RunServices
    from agentlab.store.agent_store import AgentStore
    from agentlab.store.trace import Tracer

__all__ = [
    "AgentSpec",
    "AgentSpecs",
    "BatchResult",
    "BatchSpec",
    "RetryPolicy",
    "step_agent_batch",
]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often a failed agent step is retried.

    Args:
        max_attempts: attempts per agent per tick (1 = no retry).
        backoff_s: clock seconds to wait before attempt ``n`` (times ``n - 1``).
        timeout_s: per-attempt limit on ``step`` (``None``: no limit).
    """

    max_attempts: int = 2
    backoff_s: float = 0.0
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"RetryPolicy.max_attempts must be >= 1, got {self.max_attempts}")


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """One agent of a batch: its id and registered type name."""

    agent_id: str
    type: str


class AgentSpecs(Sequence[AgentSpec]):
    """Many agents as two tuples of ``str`` (ids, types): a ``Sequence[AgentSpec]`` whose
    items are built when read.

    Why: one ``AgentSpec`` per agent (and the ``[id, type]`` lists of ``SOCIETY.json``)
    was 2 objects per agent that the cyclic garbage collector tracks; at N = 1M each full
    collection walked them all (~360 ms), so the step got dearer with N (runtime/README.md,
    "1M vs 10k"). A list of ``str`` would still be walked item by item (a cache miss per
    item); a tuple of ``str`` is untracked by the first collection that sees it, and then
    never walked. A slice is an ``AgentSpecs`` of its own (a batch pickles only its agents).
    """

    __slots__ = ("ids", "types")

    def __init__(self, ids: Sequence[str], types: Sequence[str]) -> None:
        if len(ids) != len(types):
            raise ValueError(f"AgentSpecs: {len(ids)} ids but {len(types)} types")
        self.ids: tuple[str, ...] = tuple(ids)
        self.types: tuple[str, ...] = tuple(types)

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, i: int) -> AgentSpec: ...
    @overload
    def __getitem__(self, i: slice) -> AgentSpecs: ...
    def __getitem__(self, i: int | slice) -> AgentSpec | AgentSpecs:
        if isinstance(i, slice):
            return AgentSpecs(self.ids[i], self.types[i])
        return AgentSpec(self.ids[i], self.types[i])

    def __iter__(self) -> Iterator[AgentSpec]:
        return map(AgentSpec, self.ids, self.types)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AgentSpecs):
            return self.ids == other.ids and self.types == other.types
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __repr__(self) -> str:
        return f"AgentSpecs({len(self)} agents)"


@dataclass(slots=True)
class BatchSpec:
    """Everything a batch task needs besides the ``RunServices``.

    ``agents``: a list of :class:`AgentSpec` or an :class:`AgentSpecs` (what a society
    gives its batches). ``parent``: the ``society.tick`` span's ``context`` (the batch's
    span goes under it, in any process).
    """

    tick: int
    committed: int
    agents: Sequence[AgentSpec]
    classes: dict[str, type[AgentBase]] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    parent: dict[str, str] | None = None


@dataclass(slots=True)
class BatchResult:
    """Counters of one batch, summed by the driver into the ``timeline`` row."""

    steps: int = 0
    errors: int = 0  # failed attempts (retried or not)
    failed: list[str] = field(default_factory=list)  # agents whose every attempt failed
    llm_calls: int = 0
    llm_errors: int = 0
    tokens: int = 0
    latency_us: int = 0  # the answered calls' latencies summed, whole µs (exact in any order)
    wall_s: float = 0.0

    def __iadd__(self, other: BatchResult) -> BatchResult:
        self.steps += other.steps
        self.errors += other.errors
        self.failed.extend(other.failed)
        self.llm_calls += other.llm_calls
        self.llm_errors += other.llm_errors
        self.tokens += other.tokens
        self.latency_us += other.latency_us
        self.wall_s = max(self.wall_s, other.wall_s)
        return self


class _Countdown:
    """Wakes the batch when its last agent's step has finished (``gather`` without its
    per-task done callback: one event-loop handle and one Python call less per agent).

    ``tasks`` holds the batch's step tasks for its error path (cancel what still runs); a
    step that finished normally clears its own entry, so its task, coroutine and context
    are freed at once instead of surviving to the end of the batch: three objects per
    agent-step less for the cyclic GC to promote and walk again (fewer full collections).
    """

    __slots__ = ("left", "tasks", "waiter")

    def __init__(self, waiter: asyncio.Future[None]) -> None:
        self.left = 0
        self.waiter = waiter
        self.tasks: list[asyncio.Task[None] | None] = []

    def done(self) -> None:
        self.left -= 1
        if not self.left and not self.waiter.done():
            self.waiter.set_result(None)

    def fail(self, exc: BaseException) -> None:
        # What escaped a step (its own handler keeps every Exception): the batch raises it,
        # as ``gather`` did, and cancels the batch-mates still running.
        if not self.waiter.done():
            self.waiter.set_exception(exc)


def _count(result: BatchResult, ctx: AgentContext) -> None:
    result.llm_calls += ctx.llm_calls
    result.llm_errors += ctx.llm_errors
    result.tokens += ctx.tokens
    result.latency_us += ctx.latency_us


def _state_row(agent_id: str, type_name: str, tick: int, ok: bool, attempt: int,
               summary: Any) -> dict[str, Any]:  # fmt: skip
    # its keys are catalog.STATE_ROW_KEYS (test_catalog), so BatchLog.state may trust them:
    # the agent's agent_states row goes to log.state(row, STATE_ROW_KEYS)
    return {"agent_id": agent_id, "type": type_name, "tick": tick, "ok": ok,
            "attempts": attempt, "summary": summary}  # fmt: skip


async def _step_one(
    agent_id: str,
    type_name: str,
    cls: type[AgentBase],
    loaded: tuple[bytes | None, bytes | None] | None,
    batch: BatchSpec,
    proxy: RunServices,
    result: BatchResult,
    log: BatchLog,
    countdown: _Countdown,
    store: AgentStore,
    index: int,
    parent: tuple[str | None, str | None],
    tracer: Tracer,
) -> None:
    failed = False
    try:
        tick, policy = batch.tick, batch.retry
        for attempt in range(1, policy.max_attempts + 1):
            ctx = AgentContext(proxy, agent_id, tick, attempt, log)
            agent: AgentBase | None = None
            # invoke_agent (GenAI conventions): its LLM and tool spans go under it; under
            # the batch's span, whose ids the batch took once (Tracer.parent_ids)
            attrs = genai_agent_attrs(agent_id, type_name)
            attrs["agentlab.tick"], attrs["agentlab.attempt"] = tick, attempt
            span = tracer.child_span("agent.step", parent, attrs)
            token = tracer.activate(span)
            try:
                if loaded is not None and attempt == 1:
                    ws = Workspace.of_known(store, agent_id)  # ids checked at create
                    agent = load_agent(cls, ws, ctx, batch.committed, loaded[0], loaded[1])
                else:  # a retry starts from a fresh load (the failed try may have written keys)
                    agent = cls.from_workspace(
                        (store, agent_id), ctx, committed_tick=batch.committed, agent_class=cls
                    )
                if policy.timeout_s is None:
                    await agent.step(tick)
                else:
                    await asyncio.wait_for(agent.step(tick), policy.timeout_s)
                # Sync file IO on purpose: one small write per agent is cheaper than a thread hop.
                agent.to_workspace(tick)
            except Exception as exc:
                _count(result, ctx)
                result.errors += 1
                final = attempt == policy.max_attempts
                err: dict[str, Any] = {
                    "agent_id": agent_id,
                    "type": type_name,
                    "tick": tick,
                    "attempt": attempt,
                    "final": final,
                    "error_class": type(exc).__name__,
                    "error": str(exc)[:500],
                }
                # the step's own frames only: the implicit context of whatever the driver was
                # handling when it started the step (e.g. run_sync's "no running event loop")
                # is not this error's story
                tb = _clip_traceback("".join(traceback.format_exception(exc, chain=False)))
                log.add("agent_errors", {**err, "traceback": tb})
                tracer.record_event("agent.error", **err)
                if agent is not None:
                    try:
                        agent.log("errors", {**err, "traceback": tb})
                    except OSError:
                        pass
                tracer.deactivate(token)
                log.span(tracer.finish_row(span, "error", err["error_class"]))
                if final:
                    result.failed.append(agent_id)
                    log.state(
                        _state_row(agent_id, type_name, tick, False, attempt, {}), STATE_ROW_KEYS
                    )
                    return
                if policy.backoff_s:
                    await proxy.clock.sleep(policy.backoff_s * attempt)
                continue
            tracer.deactivate(token)
            log.span(tracer.finish_row(span))
            _count(result, ctx)
            result.steps += 1
            log.state(_state_row(agent_id, type_name, tick, True, attempt, agent.summary()),
                      STATE_ROW_KEYS)  # fmt: skip
            return
    except BaseException as exc:
        failed = True  # its task stays listed: the batch cancels and awaits the rest
        countdown.fail(exc)
        raise
    finally:
        if not failed:
            countdown.tasks[index] = None
        countdown.done()


# Python 3.12's eager tasks run a step up to its first suspension at once, as a real task:
# an agent that never waits (an instant simulated model) finishes without a trip through
# the event loop, and ``asyncio.current_task()``, ``asyncio.timeout`` and ``TaskGroup``
# entered before its first await still belong to that agent, not to its batch. On 3.11 a
# step is a plain task. (Driving the coroutine by hand in the batch's task saved ~3% of a
# step but bound a timeout entered before the first await to the whole batch.)
_EAGER = sys.version_info >= (3, 12)


async def step_agent_batch(batch: BatchSpec, proxy: RunServices) -> BatchResult:
    """Step every agent of ``batch`` concurrently and persist them (see module docstring)."""
    ensure_registered(batch.classes)
    t0 = time.perf_counter()
    result = BatchResult()
    tracer = proxy.trace
    attrs: dict[str, Any] = {"agentlab.tick": batch.tick, "agentlab.agents": len(batch.agents)}
    span = tracer.start_span("society.batch", batch.parent, **attrs)
    token = tracer.activate(span)
    log = BatchLog(proxy.replay)
    loop = asyncio.get_running_loop()
    countdown = _Countdown(loop.create_future())
    pending = countdown.tasks
    try:
        agents = batch.agents
        ids: Sequence[str]
        type_names: Sequence[str]
        if isinstance(agents, AgentSpecs):  # ids and types as they are: no AgentSpec per agent
            ids, type_names = agents.ids, agents.types
        else:
            ids, type_names = [s.agent_id for s in agents], [s.type for s in agents]
        classes = {t: get_agent_class(t) for t in set(type_names)}
        store = proxy.store
        loaded = preload(store, ids, batch.committed)
        # Counted up front: an eager step that finishes at once must not reach zero early.
        countdown.left = len(batch.agents) + 1
        pending.extend([None] * len(batch.agents))  # each step clears its own entry
        task_of = asyncio.Task
        parent = tracer.parent_ids(span)  # every agent.step span goes under the batch's
        for i, (agent_id, type_name) in enumerate(zip(ids, type_names, strict=True)):
            coro = _step_one(agent_id, type_name, classes[type_name],
                             None if loaded is None else loaded[agent_id],
                             batch, proxy, result, log, countdown, store, i, parent,
                             tracer)  # fmt: skip
            if _EAGER:  # may finish right here (see _EAGER; then its entry is kept: harmless)
                pending[i] = task_of(coro, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]
            else:  # one real task per agent (see _EAGER)
                pending[i] = task_of(coro, loop=loop)
        countdown.done()  # the up-front extra count
        await countdown.waiter
    except BaseException:
        left = [t for t in pending if t is not None]
        for task in left:  # nothing of this batch may keep running after it gave up
            task.cancel()
        if left:
            await asyncio.gather(*left, return_exceptions=True)
        raise
    else:
        log.write(proxy)
    finally:
        result.wall_s = time.perf_counter() - t0
        tracer.deactivate(token)
        tracer.end_span(
            span,
            status="ok" if not result.failed else "error",
            message=f"{len(result.failed)} agents failed" if result.failed else None,
            **{"agentlab.steps": result.steps},
        )
        proxy.flush()
    return result


def run_batch_blocking(batch: BatchSpec, proxy: RunServices) -> BatchResult:
    """Run a batch in a fresh event loop (the body of a Ray task)."""
    return asyncio.run(step_agent_batch(batch, proxy))


#: longest traceback kept in ``agent_errors`` (a deep stack in a long checkout path runs
#: past it)
TRACEBACK_CHARS = 2000


def _clip_traceback(tb: str, limit: int = TRACEBACK_CHARS) -> str:
    """``tb`` within ``limit`` characters: its header line and its innermost frames and
    error (where it failed), the middle frames elided with a marker."""
    if len(tb) <= limit:
        return tb
    head = tb.split("\n", 1)[0] + "\n"
    marker = "  ... (frames elided) ...\n"
    return head + marker + tb[-(limit - len(head) - len(marker)) :]
