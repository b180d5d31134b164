"""Metrics sampling of an experiment: backend and process series in the run log.

LLM calls and messages are recorded by :class:`agentlab.runtime.RunServices` (the same
services object every driver uses); this module adds what only an experiment samples:
``server_metrics`` (polled in *clock* time, virtual seconds under the virtual clock) and
``process_metrics`` (CPU, RSS, at most every ``process_every_s`` wall seconds). Columns are
declared in :mod:`agentlab.store.catalog`.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any

from agentlab.core.clock import Clock
from agentlab.store import catalog

if TYPE_CHECKING:
    from agentlab.llm import LLMClient
    from agentlab.store.replay import ReplaySink

__all__ = ["METRIC_DATASETS", "sample_metrics"]

SCHEMA_VERSION = 1
#: the catalogued datasets this module writes
METRIC_DATASETS = ("server_metrics", "process_metrics")


def _process_sample(proc: Any) -> dict[str, Any]:
    mem = proc.memory_info()
    return {"cpu_percent": proc.cpu_percent(None), "rss_bytes": mem.rss, "pid": os.getpid()}


async def sample_metrics(
    client: LLMClient,
    clock: Clock,
    replay: ReplaySink,
    state: dict[str, Any],
    interval: float = 1.0,
    process_every_s: float = 0.5,
    first_at: float | None = None,
) -> None:
    """Sample server metrics every ``interval`` clock seconds until cancelled.

    ``state["topology"]`` (set by the experiment) is stamped on each row so the backend
    series can be split per topology; ``state["next_sample"]`` is the clock time of the
    next sample. ``first_at``: the first sample's time (a continued experiment's: the
    interrupted run's next, so the samples, which advance the simulated server's
    schedule as they read it, fall where they did; else now).
    """
    import psutil

    catalog.register(replay, METRIC_DATASETS, module=__name__)
    proc = psutil.Process()
    proc.cpu_percent(None)  # first call primes the counter
    last_wall = 0.0
    if first_at is not None:
        state["next_sample"] = first_at
        try:
            await clock.sleep(first_at - clock.now())
        except asyncio.CancelledError:
            return
    while True:
        now = clock.now()
        row = {"ts": now, "topology": state.get("topology"), "schema_version": SCHEMA_VERSION}
        row.update(client.server_metrics())
        replay.append("server_metrics", row)
        wall = time.monotonic()
        if wall - last_wall >= process_every_s:
            last_wall = wall
            prow = {"ts": now, "wall": time.time(), "topology": state.get("topology"),
                    "schema_version": SCHEMA_VERSION, **_process_sample(proc)}  # fmt: skip
            replay.append("process_metrics", prow)
        state["next_sample"] = clock.now() + interval  # (the deadline the clock computes)
        try:
            await clock.sleep(interval)
        except asyncio.CancelledError:
            return
