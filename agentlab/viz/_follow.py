"""Following a run log: sources with cursors, frame coalescing, snapshot+delta journals.

These pieces are plain Python (no widget machinery) so they are unit-tested directly:

- :func:`make_source` turns a run directory / store ``Run`` into ``tail(dataset, cursor)``.
- :class:`Coalescer` caps how often frames go to the browser (≤ ``max_fps``).
- :class:`Journal` keeps a bounded history plus the items added since the last snapshot,
  so the synced state is always *snapshot + delta* = the full (bounded) history. A reload
  or a saved notebook therefore shows everything, while a live frame only carries the
  delta. Snapshots are re-sent at most every ``snapshot_interval`` seconds.
- :class:`Follower` is the background thread that polls sources and emits frames.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar

from agentlab.store.atomic import read_json
from agentlab.store.layout import REPLAY_DIR
from agentlab.store.manifest import MANIFEST_NAME
from agentlab.store.tail import read_tail

__all__ = ["Coalescer", "Follower", "Journal", "RunSource", "make_source", "run_path"]

T = TypeVar("T")

Tail = Callable[[str, Any], tuple[list[dict[str, Any]], Any]]


def run_path(run: Any) -> Path:
    """The run directory of a path, a store ``Run`` or a ``Society``-like object."""
    if isinstance(run, str | os.PathLike):
        return Path(run)
    for attr in ("run_dir", "path", "root", "dir"):
        value = getattr(run, attr, None)
        if isinstance(value, str | os.PathLike):
            return Path(value)
    from agentlab.errors import ConfigError

    raise ConfigError(
        f"cannot find a run directory in {run!r}; pass a path, a Run (open_run) or a Society"
    )


class RunSource:
    """``tail(dataset, cursor) -> (rows, cursor)`` over a run directory, and whether the log
    it read was rewritten since (:meth:`moved`).

    Reads through :func:`agentlab.store.tail.read_tail` (byte-offset cursors over the JSONL
    shards, so each poll costs only the new bytes, and works from any process). A view that
    counted rows is out of date when the log is rewritten under it: the run replaced
    (``exist_ok="replace"``: another ``run.json`` ``created``), an experiment continued
    (another start in ``run.json``'s ``starts``: the rows of the runs in flight went and
    are written again), or a shard cut back or gone under the cursor (a society resumed).
    Still following, it counted those rows twice and read the new run's rows into the old
    one's (a society view said 100 steps for runs of 60 and 80).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rewritten = False  # a shard shrank below its cursor or went
        self._run: tuple[str, int] | None = None  # run.json's created and starts, first seen
        self._stat: tuple[int, int, int] | None = None  # run.json's, when last parsed

    def __call__(self, dataset: str, cursor: Any) -> tuple[list[dict[str, Any]], Any]:
        res = read_tail(self.path / REPLAY_DIR / dataset, cursor)
        self.rewritten = self.rewritten or res.rewritten
        return res.rows, res.cursor

    def moved(self) -> bool:
        """Whether the log was rewritten since this source first read it."""
        if self.rewritten:
            return True
        try:
            st = os.stat(self.path / MANIFEST_NAME)
        except OSError:  # none yet, or the run being replaced: its new run.json decides
            return False
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key == self._stat:
            return False
        self._stat = key
        doc = read_json(self.path / MANIFEST_NAME, default=None)
        if not isinstance(doc, dict) or doc.get("created") is None:
            return False
        starts = doc.get("starts")
        run = (str(doc["created"]), len(starts) if isinstance(starts, list) else 0)
        if self._run is None:
            self._run = run
        return run != self._run


def make_source(run: Any) -> RunSource:
    """The :class:`RunSource` of ``run`` (a path, a store ``Run`` or a ``Society``)."""
    return RunSource(run_path(run))


class Coalescer:
    """Decides when a frame may be sent: only if something changed and ≥ 1/max_fps passed.

    Args:
        max_fps: upper bound on frames per second.
        clock: monotonic time source (injectable for tests).
    """

    def __init__(self, max_fps: float = 20.0, clock: Callable[[], float] = time.monotonic):
        if max_fps <= 0:
            from agentlab.errors import ConfigError

            raise ConfigError(f"max_fps must be > 0, got {max_fps!r}")
        self.min_interval = 1.0 / max_fps
        self.clock = clock
        self.dirty = False
        self.last = -float("inf")
        self.frames = 0

    def mark(self) -> None:
        """Something changed since the last frame."""
        self.dirty = True

    def due(self) -> bool:
        """Whether a frame should be sent now."""
        return self.dirty and self.clock() - self.last >= self.min_interval

    def sent(self) -> None:
        """Record that a frame went out."""
        self.dirty = False
        self.last = self.clock()
        self.frames += 1


class Journal(Generic[T]):
    """A bounded history with snapshot + delta bookkeeping (see module docstring).

    Args:
        max_items: history bound (oldest items drop out).
        snapshot_interval: seconds between full snapshots.
        max_delta: a delta longer than this forces a snapshot (keeps frames small).
        clock: monotonic time source.
    """

    def __init__(
        self,
        max_items: int = 1000,
        snapshot_interval: float = 1.0,
        max_delta: int = 200,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.items: deque[T] = deque(maxlen=max_items)
        self.delta: list[T] = []
        self.snapshot_interval = snapshot_interval
        self.max_delta = max_delta
        self.clock = clock
        self.last_snapshot = -float("inf")
        self.count = 0  # items ever added (also the next item's key)

    def extend(self, items: Iterable[T]) -> int:
        """Add items; returns how many were added."""
        n = 0
        for it in items:
            self.items.append(it)
            self.delta.append(it)
            n += 1
        self.count += n
        if len(self.delta) > self.items.maxlen:  # type: ignore[operator]
            self.delta = self.delta[-self.items.maxlen :]  # type: ignore[operator]
        return n

    def frame(self, force_snapshot: bool = False) -> tuple[list[T] | None, list[T]]:
        """``(snapshot or None, delta)`` for the next frame.

        With a snapshot the delta is empty (the snapshot already holds it); without, the
        delta holds every item since the last snapshot, so base + delta is always complete.
        """
        now = self.clock()
        if (
            force_snapshot
            or now - self.last_snapshot >= self.snapshot_interval
            or len(self.delta) > self.max_delta
        ):
            self.last_snapshot = now
            self.delta = []
            return list(self.items), []
        return None, list(self.delta)


class Follower:
    """A daemon thread: poll datasets, feed rows to ``ingest``, emit frames when due.

    Args:
        tail: ``tail(dataset, cursor)`` (see :func:`make_source`).
        datasets: datasets to follow.
        ingest: ``ingest(dataset, rows)`` called with each non-empty batch; returns whether
            the visible state changed.
        emit: called (under the follower's lock) to push one frame.
        max_fps: frame cap.
        poll_interval: seconds between polls while data is flowing; idle polls back off to
            ``4 * poll_interval``.
        watch: called on every poll; returning True marks a frame due even without new
            rows (a society's status changing between ticks, say).
        on_rewritten: called once when the source's log was rewritten under it
            (:meth:`RunSource.moved`); the follower then reads no more.
        ready: while it returns False, polls read nothing (``live`` of a run it starts:
            the directory may still hold the run that run replaces).
    """

    def __init__(
        self,
        tail: Tail,
        datasets: Iterable[str],
        ingest: Callable[[str, list[dict[str, Any]]], bool],
        emit: Callable[[], None],
        *,
        max_fps: float = 20.0,
        poll_interval: float = 0.05,
        watch: Callable[[], bool] | None = None,
        on_rewritten: Callable[[], None] | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.tail = tail
        self.ready = ready
        self.watch = watch
        self.on_rewritten = on_rewritten
        self.rewritten = False  # the log was rewritten under it: it reads no more
        self.datasets = list(datasets)
        self.cursors: dict[str, Any] = dict.fromkeys(self.datasets)
        self.ingest = ingest
        self.emit = emit
        self.coalescer = Coalescer(max_fps)
        self.poll_interval = poll_interval
        self.lock = threading.RLock()
        self.rows_seen = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> int:
        """One pass over every dataset; returns the number of new rows."""
        n = 0
        with self.lock:
            if self.ready is not None:
                if not self.ready():
                    return 0
                self.ready = None
            if self.rewritten or self._moved():  # (before reading: not the new run's rows)
                return 0
            for ds in self.datasets:
                try:
                    rows, self.cursors[ds] = self.tail(ds, self.cursors[ds])
                except Exception as e:  # a reader hiccup must not kill the widget
                    self.errors.append(f"{ds}: {e!r}")
                    del self.errors[:-20]
                    continue
                if rows:
                    n += len(rows)
                    if self.ingest(ds, rows):
                        self.coalescer.mark()
            self.rows_seen += n
            self._moved()  # (a cut seen while reading: what it counted may be gone)
            if self.watch is not None:
                try:
                    if self.watch():
                        self.coalescer.mark()
                except Exception as e:  # a watcher hiccup must not kill the widget
                    self.errors.append(f"watch: {e!r}")
                    del self.errors[:-20]
        return n

    def halt(self) -> None:
        """Read no more (another panel's source saw the log rewritten); no join."""
        self.rewritten = True
        self._stop.set()

    def _moved(self) -> bool:
        """Whether the log was rewritten under it; the first time, stop and say so."""
        moved = getattr(self.tail, "moved", None)
        try:
            if moved is None or not moved():
                return False
        except Exception as e:  # a reader hiccup must not kill the widget
            self.errors.append(f"moved: {e!r}")
            del self.errors[:-20]
            return False
        self.rewritten = True
        self._stop.set()
        self.coalescer.mark()
        if self.on_rewritten is not None:
            try:
                self.on_rewritten()
            except Exception as e:
                self.errors.append(f"on_rewritten: {e!r}")
                del self.errors[:-20]
        return True

    def step(self, force: bool = False) -> bool:
        """Poll once and emit a frame if one is due; returns whether a frame went out."""
        self.poll()
        with self.lock:
            if force:
                self.coalescer.mark()
            if force or self.coalescer.due():
                self.emit()
                self.coalescer.sent()
                return True
        return False

    def start(self) -> None:
        """Start the background thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="agentlab-viz", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and send a last frame with whatever arrived."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._thread = None

    @property
    def running(self) -> bool:
        """Whether the background thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        idle = 0
        while not self._stop.is_set():
            got = self.poll()
            with self.lock:
                if self.coalescer.due():
                    try:
                        self.emit()
                    except Exception as e:  # e.g. comm closed: keep the thread alive
                        self.errors.append(f"emit: {e!r}")
                        del self.errors[:-20]
                    self.coalescer.sent()
            idle = 0 if got else idle + 1
            wait = self.poll_interval * (4 if idle > 20 else 1)
            # a pending (coalesced) frame must not wait for the idle back-off
            if self.coalescer.dirty:
                wait = min(wait, self.coalescer.min_interval)
            self._stop.wait(wait)
