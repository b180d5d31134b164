"""One tick of a :class:`~agentlab.runtime.society.Society`: its walk and what it writes.

:func:`run_tick` walks the tick (the walk in ``society.py``'s docstring) and commits it.

The ``timeline`` row (:func:`timeline_row`: steps, calls, tokens, errors, the client's
AIMD limit and calls in flight, env events, router stats) and the commit record
``SOCIETY_STEP.json`` (:func:`commit_record`: the log's byte marks, the env checkpoint,
running totals), plus the best-effort reads of the LLM client a tick makes.
"""

from __future__ import annotations

import asyncio
import numbers
import shutil
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from agentlab.runtime.batch import BatchResult
from agentlab.runtime.datasets import messages_from_events
from agentlab.runtime.services import RunServices
from agentlab.runtime.society_build import mark_store
from agentlab.runtime.society_files import (
    SOCIETY_SCHEMA_VERSION,
    STEP_FILE,
    write_tick_checkpoint,
)
from agentlab.runtime.stop_rule import DEFAULT_MAX_ERROR_SHARE, check_tick
from agentlab.store.atomic import atomic_write_json
from agentlab.store.offsets import log_marks

__all__ = [
    "check_tick_counts",
    "client_calls",
    "client_metrics",
    "commit_record",
    "discard_unfinished_tick",
    "run_tick",
    "timeline_row",
    "uncancel",
]


def timeline_row(
    society: Any,
    tick: int,
    total: BatchResult,
    wall_s: float,
    events: list[dict[str, Any]],
    routers: dict[str, Any] | None,
) -> dict[str, Any]:
    """The ``timeline`` row of ``tick`` (``society``: the Society committing it)."""
    metrics = client_metrics(society.proxy)
    answered = total.llm_calls - total.llm_errors
    return {
        "schema_version": SOCIETY_SCHEMA_VERSION,
        "tick": tick,
        "ts": society.clock.now(),
        "agents": len(society.agent_specs),
        "steps": total.steps,
        "llm_calls": total.llm_calls,
        "tokens": total.tokens,
        "errors": total.errors,
        "wall_s": wall_s,
        "aimd_limit": metrics.get("aimd_limit"),
        "in_flight": metrics.get("in_flight"),
        # the mean latency of the tick's answered calls (a live view's latency chart)
        "latency_mean_s": total.latency_us / answered / 1e6 if answered > 0 else None,
        "env_events": len(events),
        "routers": routers or None,
    }


def commit_record(
    run_dir: Path, previous: dict[str, Any], row: dict[str, Any], ckpt: list[str]
) -> dict[str, Any]:
    """The commit record of ``row``'s tick: the log's marks (continued from the
    ``previous`` commit's), the env checkpoint ``ckpt`` and the running totals."""
    marks = log_marks(run_dir, previous.get("marks"))
    totals = dict(previous.get("totals", {}))
    for k in ("steps", "llm_calls", "tokens", "errors"):
        totals[k] = totals.get(k, 0) + row[k]
    return {
        "schema_version": SOCIETY_SCHEMA_VERSION,
        "tick": row["tick"],
        "ts": row["ts"],
        "offsets": {k: m["bytes"] for k, m in marks.items()},
        "marks": marks,
        "env": ckpt,
        "totals": totals,
    }


def uncancel() -> None:
    """Take back the cancellation that interrupted :meth:`Society.run` (it was handled:
    the run stopped after the committed tick), so the caller's task goes on normally."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return
    if task is not None:
        while task.cancelling():
            task.uncancel()


def client_calls(proxy: RunServices) -> int | None:
    try:
        return int(proxy.llm.client.usage.calls)
    except Exception:  # progress is best effort; never fail a tick for it
        return None


def client_metrics(proxy: RunServices) -> dict[str, Any]:
    try:
        client = proxy.llm.client
        return {"aimd_limit": client.limit, "in_flight": client.in_flight()}
    except Exception:  # metrics are best effort; never fail a tick for them
        return {}


def check_tick_counts(**counts: object) -> None:
    """Refuse ``ticks`` / ``until`` that are not whole numbers >= 0 (``ticks=-1`` ran
    nothing and ``ticks=1.5`` one tick, without a word; numpy ints pass)."""
    from agentlab.errors import ConfigError

    for name, value in counts.items():
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0
        ):
            raise ConfigError(f"{name} must be a whole number >= 0, got {value!r}")


def discard_unfinished_tick(society: Any) -> None:
    """Go back to ``society``'s committed tick, as reopening the run would: cut the log back
    to the commit and, on the virtual clock with the local executor, set the clock and the
    client's state (limiter, simulated server) back to the commit's, so the tick runs again
    as it would have run the first time (a stop in tick 3 had shifted every later call by
    the discarded tick's ~8 s of virtual time). The society stays marked (``_failed``):
    rows a straggler writes later are cut before the next tick too."""
    from agentlab.core.clock import VirtualClock
    from agentlab.store.offsets import truncate_log

    step = society._step
    truncate_log(society.run_dir, step["offsets"], marks=step.get("marks"))
    clock = society.clock
    if (
        isinstance(clock, VirtualClock)
        and society.executor.name == "local"
        # (also when no time passed: calls queued at the tick's first instant)
        and clock.rewind_to(float(step["ts"]))
        and step.get("llm") is not None
    ):
        society.proxy.llm.client.restore_state(step["llm"])


def take_writer_lock(society: Any) -> None:
    """Take ``society``'s writer lock again after :meth:`~Society.close` (a later ``run`` or
    ``step``): only if nobody advanced the run in the meantime; refused read-only."""
    from agentlab.errors import StoreError
    from agentlab.runtime.society_files import STEP_FILE, read_doc

    run_dir = society.run_dir
    if society.read_only:
        raise StoreError(
            f"this Society was opened with read_only=True; use Society.open({str(run_dir)!r}) "
            "to run it"
        )
    lock = society._lock
    lock.check()  # raises when a later Society object of this process took over
    lock.acquire()
    on_disk = read_doc(run_dir, STEP_FILE) or {}
    if on_disk.get("tick") != society.tick:
        lock.release()
        raise StoreError(
            f"{run_dir} is at tick {on_disk.get('tick')} on disk, this Society object at tick "
            f"{society.tick}: another writer advanced it after close(); "
            f"use Society.open({str(run_dir)!r})"
        )


def tick_progress(society: Any) -> dict[str, Any]:
    """``Society.tick_progress``: the tick in progress as this process sees it."""
    p = dict(society._progress)
    calls = client_calls(society.proxy)
    if "calls0" in p and calls is not None:
        p["llm_calls"] = calls - p.pop("calls0")
    p.pop("calls0", None)
    p["in_flight"] = client_metrics(society.proxy).get("in_flight")
    p["clock"] = society.clock.now()
    return p


async def run_tick(
    society: Any, tick: int, span: Any, t0: float, tracer: Any, publish: bool
) -> dict[str, Any]:
    """The walk of one tick (``Society.step``'s body inside its ``society.tick`` span):
    batches, the error-share rule, env step, events, clock, checkpoint, the ``timeline``
    row and the commit (``SOCIETY_STEP.json``, atomic).
    """
    total = BatchResult()
    for r in await society.executor.run_batches(
        society._batches(tick, span.context), society.proxy
    ):
        total += r
    rule = society.meta.get("max_error_share", DEFAULT_MAX_ERROR_SHARE)
    check_tick(str(society.run_dir), tick, len(society.agent_specs), total.steps, total.failed,
               rule, society.proxy.flush)  # fmt: skip
    with tracer.trace_span("env.step", **{"agentlab.tick": tick}) if society.meta.get(
        "env") else nullcontext():  # fmt: skip
        events = await society.executor.env_step(tick)
    routers = await society.executor.env_router_stats()
    sink = society.proxy.replay
    lost = society.executor.lost
    if lost:  # Ray batch attempts lost to dead workers and run again (executors)
        sink.extend("batch_failures", lost)
        lost.clear()
    if events:
        sink.extend("env_events", [{**e, "tick": e.get("tick", tick)} for e in events])
        messages = messages_from_events(events, tick, society.clock.now(), society.proxy.run_id)
        if messages:
            sink.extend("messages", messages)
    if society.tick_seconds:
        await society.clock.sleep(society.tick_seconds)
    ckpt = society.executor.env_checkpoint(str(society.run_dir), tick, publish)
    row = timeline_row(society, tick, total, time.perf_counter() - t0, events, routers)
    sink.append("timeline", row)
    tracer.end_span(span, "ok", **{"agentlab.steps": total.steps, "agentlab.errors": total.errors})
    society.proxy.flush()
    step = commit_record(society.run_dir, society._step, row, ckpt)
    if society._llm_state_kept():
        step["llm"] = society.proxy.llm.client.export_state()
    if society.keep_checkpoints:
        write_tick_checkpoint(society.run_dir, step, society.agent_ids)
    mark_store(society.proxy.store, tick)
    # The commit point. Compact: the step holds the simulated server's state (~175 kB at
    # 300 agents), which ``indent`` would encode in pure Python (46 ms a tick vs 3.6).
    atomic_write_json(society.run_dir / STEP_FILE, step, compact=True)
    society._failed = False
    old = society._step.get("env") or []
    society._step = step
    if old and old != ckpt and not society.keep_checkpoints:
        shutil.rmtree(society.run_dir / Path(old[0]).parent, ignore_errors=True)
    society.last = row
    return row
