"""``LogProxy``: a picklable handle to the run log for Ray tasks and subprocesses.

It carries only the run directory and writer settings. In whichever process it is used it
resolves to that process's own :class:`ReplaySink` and :class:`Tracer` (so each worker
writes its own shard and no central actor is needed). Call ``flush()`` at the end of each
task: Ray may kill an idle worker without running ``atexit`` handlers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentlab.core.clock import Clock
from agentlab.store.replay import ReplaySink, get_replay_sink
from agentlab.store.trace import Tracer, get_tracer

__all__ = ["LogProxy"]


class LogProxy:
    """Serialisable reference to a run log.

    Args:
        run_dir: the run directory.
        flush_interval: background write interval of the process-local writer.
        max_pending: buffered rows that trigger an early write.
        fsync: fsync after each write.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        flush_interval: float = 0.2,
        max_pending: int = 20_000,
        fsync: bool = False,
    ) -> None:
        self.run_dir = str(Path(run_dir).resolve())
        self.settings: dict[str, Any] = {
            "flush_interval": flush_interval,
            "max_pending": max_pending,
            "fsync": fsync,
        }

    @property
    def replay(self) -> ReplaySink:
        """This process's replay sink for the run."""
        return get_replay_sink(self.run_dir, **self.settings)

    def tracer(self, clock: Clock | None = None) -> Tracer:
        """This process's tracer for the run (timestamps from ``clock``, default real)."""
        return get_tracer(self.run_dir, clock=clock, **self.settings)

    @property
    def trace(self) -> Tracer:
        """This process's real-clock tracer."""
        return self.tracer()

    def append(self, dataset: str, row: dict[str, Any]) -> int:
        """Shortcut for ``proxy.replay.append``."""
        return self.replay.append(dataset, row)

    def flush(self) -> None:
        """Write this process's buffered rows and spans now."""
        self.replay.flush()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.run_dir, self.settings))

    def __repr__(self) -> str:
        return f"LogProxy({self.run_dir!r})"


def _rebuild(run_dir: str, settings: dict[str, Any]) -> LogProxy:
    return LogProxy(run_dir, **settings)
