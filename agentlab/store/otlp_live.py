"""Live OTLP: push a run's spans to an OTLP/HTTP receiver while the run runs.

```python
with live_otlp(run_dir, "http://127.0.0.1:6006") as live:   # Phoenix, Jaeger, a collector
    society.run_sync(ticks=100)
    society.close()
live.stats   # {"pushed": 2248, "dropped": 0, "failed_requests": 0, ...}
```

or from another terminal, while the run runs: ``agentlab export-otlp RUN --endpoint URL
--follow``.

A background thread follows the run's trace shards (the rows its writers have flushed,
read whole lines only, as the run browser reads them) every ``interval`` seconds. A trace
is pushed once its root span is there: a society's ``society.tick`` ends with the tick, an
experiment's ``experiment.run`` with the repetition, so a tick is pushed after it ran, not
while its batches are still coming; spans of a trace already pushed (another process's
late flush) go in the next request. Traces without a root of their own (a thread system's,
whose root is derived from its slices) are pushed by :meth:`LiveOtlp.stop`.

It never slows or breaks the run: the run's threads only write files, as without it; the
queue of unsent spans is bounded (``max_queue``; the oldest traces are dropped first); a
receiver that refuses or cannot be reached costs one request per ``interval`` (then a
back-off, doubling to 30 s) and its spans are dropped; nothing is raised into the run.
:attr:`LiveOtlp.stats` counts what was pushed and dropped, and :meth:`LiveOtlp.stop`
warns when anything was dropped.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentlab.store.layout import TRACE_DIR
from agentlab.store.otlp import post_spans, traces_url
from agentlab.store.tail import read_tail

__all__ = ["LiveOtlp", "live_otlp"]

_BACKOFF_MAX_S = 30.0
_SENT_MEMORY = 100_000  # trace ids remembered as pushed (their late spans go straight out)


class LiveOtlp:
    """Follows ``run_dir``'s spans and pushes each finished trace to ``endpoint`` once.

    Args:
        run_dir: the run directory (it may not hold any span yet).
        endpoint: OTLP/HTTP base URL (``/v1/traces`` appended unless given).
        interval: seconds between reads of the trace shards.
        max_queue: most spans held unsent; past it the oldest traces are dropped.
        batch: most spans per request.
        timeout: seconds per request (a receiver that hangs is given up on).
        headers: extra HTTP headers (an API key).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        endpoint: str,
        *,
        interval: float = 0.5,
        max_queue: int = 50_000,
        batch: int = 2000,
        timeout: float = 5.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.url = traces_url(endpoint)
        self.run_dir = Path(run_dir)
        self.interval, self.max_queue, self.batch = interval, max_queue, batch
        self.timeout, self.headers = timeout, dict(headers or {})
        #: ``seen`` (spans read), ``pushed`` (spans sent, derived thread roots included),
        #: ``dropped`` (spans never sent: queue full or receiver failing), ``requests``,
        #: ``failed_requests``, ``last_error``
        self.stats: dict[str, Any] = {"seen": 0, "pushed": 0, "dropped": 0, "requests": 0,
                                      "failed_requests": 0, "last_error": None}  # fmt: skip
        self._cursor: dict[str, int] = {}
        self._pending: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._queued = 0
        self._rooted: set[str] = set()
        self._sent: OrderedDict[str, None] = OrderedDict()
        self._backoff, self._retry_at = 0.0, 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._manifest: dict[str, Any] | None = None

    def start(self) -> LiveOtlp:
        """Start following (a daemon thread); returns ``self``."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="agentlab-otlp-live",
                                            daemon=True)  # fmt: skip
            self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        """Read what is left, push every trace (rooted or not) and stop; returns
        :attr:`stats` (and warns if spans were dropped)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._retry_at = 0.0  # one last try even while backing off
        self._guarded(final=True)
        if self.stats["dropped"]:
            warnings.warn(f"live OTLP push to {self.url}: {self.stats['dropped']} of "
                          f"{self.stats['seen']} spans dropped ({self.stats['last_error']})",
                          RuntimeWarning, stacklevel=2)  # fmt: skip
        return self.stats

    def __enter__(self) -> LiveOtlp:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the follower ----------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._guarded(final=False)

    def _guarded(self, *, final: bool) -> None:
        try:
            self._read()
            self._push(final)
        except Exception as exc:  # never into the run: counted, shown by stop()
            self.stats["last_error"] = f"{type(exc).__name__}: {exc}"[:300]

    def _read(self) -> None:
        res = read_tail(self.run_dir / TRACE_DIR, self._cursor)
        self._cursor = res.cursor
        for row in res.rows:
            tid = row["trace_id"]
            self._pending.setdefault(tid, []).append(row)
            if not row.get("parent"):
                self._rooted.add(tid)
        self._queued += len(res.rows)
        self.stats["seen"] += len(res.rows)
        while self._queued > self.max_queue and self._pending:  # oldest traces first
            tid, rows = self._pending.popitem(last=False)
            self._rooted.discard(tid)
            self._queued -= len(rows)
            self._drop(len(rows), f"queue full ({self.max_queue} spans)")

    def _push(self, final: bool) -> None:
        if time.monotonic() < self._retry_at:  # backing off: spans wait (bounded) in the queue
            return
        ready = [t for t in self._pending if final or t in self._rooted or t in self._sent]
        chunk: list[dict[str, Any]] = []
        for i, tid in enumerate(ready):
            chunk.extend(self._pending.pop(tid))
            self._rooted.discard(tid)
            self._sent[tid] = None
            if len(self._sent) > _SENT_MEMORY:
                self._sent.popitem(last=False)
            if (len(chunk) >= self.batch or i == len(ready) - 1) and not self._post(chunk):
                break
            if len(chunk) >= self.batch:
                chunk = []
        if final and self._pending:  # the receiver failed at the end: nothing will send them
            left = sum(map(len, self._pending.values()))
            self._pending.clear()
            self._queued = 0
            self._drop(left, self.stats["last_error"])

    def _post(self, rows: list[dict[str, Any]]) -> bool:
        self._queued -= len(rows)
        if self._manifest is None:
            from agentlab.store.manifest import read_manifest

            try:
                self._manifest = read_manifest(self.run_dir)
            except Exception:
                self._manifest = {}
        self.stats["requests"] += 1
        try:
            sent = post_spans(self.url, rows, self._manifest, self.headers, self.timeout)
        except Exception as exc:
            self.stats["failed_requests"] += 1
            self._backoff = min(_BACKOFF_MAX_S, max(self.interval, self._backoff * 2))
            self._retry_at = time.monotonic() + self._backoff
            self._drop(len(rows), f"{type(exc).__name__}: {exc}"[:300])
            return False
        self._backoff = 0.0
        self.stats["pushed"] += sent  # with a thread's derived root (span_tree)
        return True

    def _drop(self, n: int, why: str | None) -> None:
        self.stats["dropped"] += n
        self.stats["last_error"] = why


@contextmanager
def live_otlp(run_dir: str | os.PathLike[str], endpoint: str, **kw: Any) -> Iterator[LiveOtlp]:
    """:class:`LiveOtlp` as a ``with`` block: started on entry, stopped (everything left
    pushed) on exit."""
    live = LiveOtlp(run_dir, endpoint, **kw).start()
    try:
        yield live
    finally:
        live.stop()
