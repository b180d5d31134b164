"""``ReplaySink``: append rows to ``replay/<dataset>/<shard>.jsonl``, one shard per process.

```python
sink = get_replay_sink(run_dir)
sink.register("votes", {"agent_id": "VARCHAR", "tick": "BIGINT", "yes": "BOOLEAN"},
              description="one row per vote", module=__name__)
sink.append("votes", {"agent_id": "a1", "tick": 3, "yes": True})
sink.flush()  # durable against a process crash: whole lines, one write per file
```

``append``/``extend`` only copy the row's top level into a buffer (no encoding, no disk IO
once a dataset is known), so they are safe to call from coroutines; a background thread
encodes and writes every ``flush_interval`` seconds. Rows get ``_shard`` and ``_seq`` (monotonic per shard and dataset). Appending to an
unregistered dataset, or a row with a new key, registers the missing columns with types
inferred from the values (register up front to choose types yourself).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agentlab.store._writer import RESERVED, _LogWriter, _Stream, encode_row, get_writer
from agentlab.store.layout import REPLAY_DIR, validate_dataset
from agentlab.store.schema import infer_type, register_dataset

__all__ = ["ReplaySink", "get_replay_sink"]


class _Dataset:
    """What the hot path needs about one dataset: accepted keys and the file stream."""

    __slots__ = ("covers", "gen", "ok", "stream")

    def __init__(self, ok: frozenset[str], stream: _Stream, gen: int) -> None:
        self.ok = ok  # registered columns plus other ``_``-keys seen; never _shard/_seq
        self.stream = stream
        self.gen = gen  # the writer generation ``stream`` belongs to
        #: key sets (``ReplaySink.encode(within=...)``) found inside ``ok``
        self.covers: set[frozenset[str]] = set()


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
        self._ds: dict[str, _Dataset] = {}
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
            self._ds.pop(dataset, None)

    def _prepare(self, dataset: str, rows: list[Mapping[str, Any]]) -> _Dataset:
        """Slow path: register new keys, (re)build the dataset entry; strips reserved keys."""
        known = self._known.get(dataset)
        if known is None:
            validate_dataset(dataset)
            known = frozenset()
        new: dict[str, str] = {}
        private: set[str] = set()
        for i, row in enumerate(rows):
            if not RESERVED.isdisjoint(row):  # the writer sets these; never take them
                row = rows[i] = {k: v for k, v in row.items() if k not in RESERVED}
            for k, v in row.items():
                if k in known or k in new:
                    continue
                if k[:1] == "_":
                    private.add(k)
                else:
                    t = infer_type(v)
                    if t is not None:
                        new[k] = t
        if new or dataset not in self._known:
            merged = register_dataset(self.run_dir, dataset, new, strict=False)
            with self._lock:
                self._known[dataset] = known = frozenset(merged)
        w = self._writer
        with self._lock:
            old = self._ds.get(dataset)
            ok = known | private
            if old is not None and old.gen == w.gen:
                ok |= old.ok  # keep the _-keys seen before
            gen = w.gen
        d = _Dataset(ok, w.stream(f"{REPLAY_DIR}/{dataset}/{w.shard}.jsonl"), gen)
        self._ds[dataset] = d
        return d

    def append(self, dataset: str, row: Mapping[str, Any]) -> int:
        """Buffer one row; returns its ``_seq``.

        The row's top level is copied now; nested values are serialised at the next flush
        (within ``flush_interval``), so do not mutate them after appending.
        """
        d, row = self._checked(dataset, row)
        return self._writer.append(d.stream, row)

    def _checked(self, dataset: str, row: Mapping[str, Any]) -> tuple[_Dataset, Mapping[str, Any]]:
        """``dataset``'s entry and ``row`` as it may be written (new keys registered,
        reserved keys dropped by :meth:`_prepare`; the row itself when its keys are known)."""
        d = self._ds.get(dataset)
        if d is None or d.gen != self._writer.gen or not d.ok.issuperset(row):
            rows = [row]
            d = self._prepare(dataset, rows)
            row = rows[0]
        return d, row

    def extend(self, dataset: str, rows: Iterable[Mapping[str, Any]], *, copy: bool = True) -> int:
        """Buffer many rows at once (cheaper than ``append`` in a loop); returns the last seq.

        Returns -1 when ``rows`` is empty. ``copy=False``: the rows are fresh dicts the
        caller never touches again (not even the list), buffered without a copy.
        """
        batch = rows if type(rows) is list else list(rows)
        if not batch:
            return -1
        d = self._ds.get(dataset)
        w = self._writer
        if d is None or d.gen != w.gen or not d.ok.issuperset(itertools.chain.from_iterable(batch)):
            batch = list(batch)  # _prepare may replace rows; never touch the caller's list
            d = self._prepare(dataset, batch)
        return w.extend(d.stream, batch, copy=copy)

    def encode(
        self, dataset: str, row: Mapping[str, Any], within: frozenset[str] | None = None
    ) -> bytes | Mapping[str, Any]:
        """``row`` checked against ``dataset``'s columns (new keys registered, reserved
        keys dropped, as :meth:`append` does) and encoded now (``_writer.encode_row``), for
        :meth:`extend_encoded`. Do not mutate the row's values afterwards either.

        ``within``: every key the row's builder can give it (e.g.
        :data:`~agentlab.store.catalog.CALL_ROW_KEYS`). Once the dataset's columns hold
        all of them, rows are not checked key by key (~0.8 µs for an ``llm_calls`` row).
        """
        if within is not None and self.covered(dataset, within):
            return encode_row(row)
        d, row = self._checked(dataset, row)
        if within is not None and RESERVED.isdisjoint(within) and d.ok.issuperset(within):
            d.covers.add(within)
        return encode_row(row)

    def covered(self, dataset: str, within: frozenset[str]) -> bool:
        """Whether :meth:`encode` now takes rows of ``dataset`` whose keys lie ``within``
        without checking them (the dataset's columns hold every key of ``within``)."""
        d = self._ds.get(dataset)
        return d is not None and d.gen == self._writer.gen and within in d.covers

    def extend_encoded(self, dataset: str, rows: list[bytes | Mapping[str, Any]]) -> int:
        """Buffer rows from :meth:`encode` of the same ``dataset`` (the list and rows are
        the sink's now); returns the last seq, -1 when ``rows`` is empty."""
        if not rows:
            return -1
        d = self._ds.get(dataset)
        w = self._writer
        if d is None or d.gen != w.gen:  # forked or reset since: the columns are registered
            d = self._prepare(dataset, [])
        return w.extend(d.stream, rows, copy=False)

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
