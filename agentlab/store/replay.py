"""``ReplaySink``: append rows to ``replay/<dataset>/<shard>.jsonl``, one shard per process.

```python
sink = get_replay_sink(run_dir)
sink.register("votes", {"agent_id": "VARCHAR", "tick": "BIGINT", "yes": "BOOLEAN"},
              description="one row per vote", module=__name__)
sink.append("votes", {"agent_id": "a1", "tick": 3, "yes": True})
sink.flush()  # durable against a process crash: whole lines, one write per file
```

``append``/``extend`` only encode and buffer (no disk IO once a dataset is known), so they
are safe to call from coroutines; a background thread writes every ``flush_interval``
seconds. Rows get ``_shard`` and ``_seq`` (monotonic per shard and dataset). Appending to an
unregistered dataset, or a row with a new key, registers the missing columns with types
inferred from the values (register up front to choose types yourself).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agentlab.store._writer import _LogWriter, encode_row, get_writer
from agentlab.store.layout import REPLAY_DIR, validate_dataset
from agentlab.store.schema import infer_type, register_dataset

__all__ = ["ReplaySink", "get_replay_sink"]


class ReplaySink:
    """Process-local writer of replay rows for one run directory.

    Args:
        run_dir: the run directory.
        shard: shard file stem; default ``<hostname>-<pid>``. A forked child always gets a
            shard of its own.
        flush_interval: seconds between background writes.
        max_pending: buffered rows that trigger an early background write.
        fsync: ``os.fsync`` after each write (power-loss safety; slower).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        shard: str | None = None,
        flush_interval: float = 0.2,
        max_pending: int = 20_000,
        fsync: bool = False,
    ) -> None:
        self._writer: _LogWriter = get_writer(
            run_dir, shard, flush_interval=flush_interval, max_pending=max_pending, fsync=fsync
        )
        self._known: dict[str, frozenset[str]] = {}  # dataset -> registered column names
        self._lock = threading.Lock()

    @property
    def run_dir(self) -> Path:
        return self._writer.run_dir

    @property
    def shard(self) -> str:
        """This process's shard name (changes in a forked child)."""
        return self._writer.shard

    def register(
        self,
        dataset: str,
        columns: Mapping[str, str],
        *,
        description: str = "",
        module: str | None = None,
    ) -> None:
        """Declare (or extend) a dataset in ``replay/_schema.json``.

        Args:
            dataset: name, ``[a-z][a-z0-9_]*``.
            columns: ``{column: type}``; types from :data:`agentlab.store.schema.COLUMN_TYPES`
                (``VARCHAR``, ``BIGINT``, ``DOUBLE``, ``BOOLEAN``, ``JSON``, ``VARCHAR[]``…).
            description: one line for the catalog.
            module: who registered it (usually ``__name__``).

        Raises:
            ConfigError: bad name or type, or a column re-registered with another type.
        """
        merged = register_dataset(
            self.run_dir, dataset, columns, description=description, module=module
        )
        with self._lock:
            self._known[dataset] = frozenset(merged)

    def _learn(self, dataset: str, rows: Iterable[Mapping[str, Any]]) -> None:
        known = self._known.get(dataset)
        if known is None:
            validate_dataset(dataset)
            known = frozenset()
        new: dict[str, str] = {}
        for row in rows:
            for k, v in row.items():
                if k not in known and k not in new and k[:1] != "_":
                    t = infer_type(v)
                    if t is not None:
                        new[k] = t
        if new or dataset not in self._known:
            merged = register_dataset(self.run_dir, dataset, new, strict=False)
            with self._lock:
                self._known[dataset] = frozenset(merged)

    def append(self, dataset: str, row: Mapping[str, Any]) -> int:
        """Buffer one row; returns its ``_seq``."""
        known = self._known.get(dataset)
        if known is None or not known.issuperset(row.keys()):
            self._learn(dataset, (row,))
        body = encode_row(row if isinstance(row, dict) else dict(row))
        return self._writer.add(f"{REPLAY_DIR}/{dataset}/{self._writer.shard}.jsonl", (body,))

    def extend(self, dataset: str, rows: Iterable[Mapping[str, Any]]) -> int:
        """Buffer many rows at once (cheaper than ``append`` in a loop); returns the last seq."""
        rows = list(rows)
        if not rows:
            return -1
        known = self._known.get(dataset)
        if known is None or any(not known.issuperset(r.keys()) for r in rows):
            self._learn(dataset, rows)
        bodies = [encode_row(r if isinstance(r, dict) else dict(r)) for r in rows]
        return self._writer.add(f"{REPLAY_DIR}/{dataset}/{self._writer.shard}.jsonl", bodies)

    def flush(self) -> None:
        """Write every buffered row of this process (replay and trace) to disk now."""
        self._writer.flush()

    async def aflush(self) -> None:
        """``flush`` on a worker thread, for coroutines."""
        await asyncio.to_thread(self._writer.flush)

    def close(self) -> None:
        """Flush and release files; the sink stays usable and reopens on the next append."""
        self._writer.close()

    def __repr__(self) -> str:
        return f"ReplaySink({str(self.run_dir)!r}, shard={self.shard!r})"


_SINKS: dict[tuple[str, str | None, int], ReplaySink] = {}
_SINKS_LOCK = threading.Lock()


def get_replay_sink(
    run_dir: str | os.PathLike[str], *, shard: str | None = None, **settings: Any
) -> ReplaySink:
    """The process-wide :class:`ReplaySink` for ``run_dir`` (created on first use).

    ``settings`` (``flush_interval``, ``max_pending``, ``fsync``) apply only on creation.
    """
    key = (str(Path(run_dir).resolve()), shard, os.getpid())
    with _SINKS_LOCK:
        sink = _SINKS.get(key)
        if sink is None:
            sink = _SINKS[key] = ReplaySink(run_dir, shard=shard, **settings)
        return sink


def _in_child() -> None:
    global _SINKS_LOCK
    _SINKS_LOCK = threading.Lock()  # the parent's may have been held at fork time


os.register_at_fork(after_in_child=_in_child)
