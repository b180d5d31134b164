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
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentlab.agents.base import AgentBase
from agentlab.agents.registry import ensure_registered, get_agent_class
from agentlab.errors import ConfigError

if TYPE_CHECKING:
    from agentlab.runtime.services import RunServices

__all__ = ["AgentSpec", "BatchResult", "BatchSpec", "RetryPolicy", "step_agent_batch"]


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


@dataclass(slots=True)
class BatchSpec:
    """Everything a batch task needs besides the ``RunServices``."""

    tick: int
    committed: int
    agents: list[AgentSpec]
    classes: dict[str, type[AgentBase]] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)


@dataclass(slots=True)
class BatchResult:
    """Counters of one batch, summed by the driver into the ``timeline`` row."""

    steps: int = 0
    errors: int = 0  # failed attempts (retried or not)
    failed: list[str] = field(default_factory=list)  # agents whose every attempt failed
    llm_calls: int = 0
    llm_errors: int = 0
    tokens: int = 0
    wall_s: float = 0.0

    def __iadd__(self, other: BatchResult) -> BatchResult:
        self.steps += other.steps
        self.errors += other.errors
        self.failed.extend(other.failed)
        self.llm_calls += other.llm_calls
        self.llm_errors += other.llm_errors
        self.tokens += other.tokens
        self.wall_s = max(self.wall_s, other.wall_s)
        return self


def _count(result: BatchResult, ctx: Any) -> None:
    result.llm_calls += ctx.llm_calls
    result.llm_errors += ctx.llm_errors
    result.tokens += ctx.tokens


async def _step_one(
    spec: AgentSpec, batch: BatchSpec, proxy: RunServices, result: BatchResult
) -> None:
    cls = get_agent_class(spec.type)
    store = proxy.store
    replay = proxy.replay
    tick, policy = batch.tick, batch.retry
    for attempt in range(1, policy.max_attempts + 1):
        ctx = proxy.for_agent(spec.agent_id, tick, attempt)
        agent: AgentBase | None = None
        try:
            agent = cls.from_workspace(
                (store, spec.agent_id), ctx, committed_tick=batch.committed, agent_class=cls
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
                "agent_id": spec.agent_id,
                "type": spec.type,
                "tick": tick,
                "attempt": attempt,
                "final": final,
                "error_class": type(exc).__name__,
                "error": str(exc)[:500],
            }
            replay.append("agent_errors", err)
            proxy.trace.record_event("agent.error", **err)
            if agent is not None:
                try:
                    agent.log("errors", {**err, "traceback": traceback.format_exc()[-2000:]})
                except OSError:
                    pass
            if final:
                result.failed.append(spec.agent_id)
                replay.append(
                    "agent_states",
                    {
                        "agent_id": spec.agent_id,
                        "type": spec.type,
                        "tick": tick,
                        "ok": False,
                        "attempts": attempt,
                        "summary": {},
                    },
                )
                return
            if policy.backoff_s:
                await proxy.clock.sleep(policy.backoff_s * attempt)
            continue
        _count(result, ctx)
        result.steps += 1
        replay.append(
            "agent_states",
            {
                "agent_id": spec.agent_id,
                "type": spec.type,
                "tick": tick,
                "ok": True,
                "attempts": attempt,
                "summary": agent.summary(),
            },
        )
        return


async def step_agent_batch(batch: BatchSpec, proxy: RunServices) -> BatchResult:
    """Step every agent of ``batch`` concurrently and persist them (see module docstring)."""
    ensure_registered(batch.classes)
    t0 = time.perf_counter()
    result = BatchResult()
    tracer = proxy.trace
    span = tracer.start_span("society.batch", tick=batch.tick, agents=len(batch.agents))
    try:
        await asyncio.gather(*(_step_one(s, batch, proxy, result) for s in batch.agents))
    finally:
        result.wall_s = time.perf_counter() - t0
        tracer.end_span(
            span,
            status="ok" if not result.failed else "error",
            message=f"{len(result.failed)} agents failed" if result.failed else None,
            steps=result.steps,
        )
        proxy.flush()
    return result


def run_batch_blocking(batch: BatchSpec, proxy: RunServices) -> BatchResult:
    """Run a batch in a fresh event loop (the body of a Ray task)."""
    return asyncio.run(step_agent_batch(batch, proxy))
