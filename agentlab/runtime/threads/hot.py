"""A thread's decoded form between slices (``Hot``) and the bounded cache that keeps it
between a thread's turns (``HotCache``).

A slice starts from the stored bytes (state + history). Decoding a history is the one
per-slice cost that grows with the conversation (an ``orjson`` parse of every message, and
fresh strings that the model's prompt hashing must hash again), so the decoded form is
handed on: to the next slice of the same driver or step, and — through :class:`HotCache` —
to the thread's next turn, as long as the store still holds exactly the bytes it was
decoded from.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentlab.runtime.threads.records import ThreadState

__all__ = ["DEFAULT_CACHE_BYTES", "Hot", "HotCache", "same_bytes"]


@dataclass(slots=True)
class Hot:
    """A thread's decoded form as one slice left it.

    ``raw_state``/``stored`` are the exact bytes committed (or read); ``blob`` is the raw
    (uncompressed) history; ``msgs`` the decoded history, or ``None`` if never decoded.
    """

    raw_state: bytes | None
    stored: bytes | bytearray | None  # a MemoryThreadStore's hot history grows in place
    blob: bytes | bytearray
    st: ThreadState
    msgs: list[dict[str, Any]] | None


def same_bytes(a: bytes | bytearray | None, b: bytes | bytearray | None) -> bool:
    """Whether two stored values are the same bytes."""
    # The in-memory store hands back the very object committed (identity, O(1)); other
    # stores return equal copies (one memcmp, far cheaper than decoding).
    return a is b or (a is not None and b is not None and len(a) == len(b) and a == b)


#: default bound of a system's :class:`HotCache`, in raw history bytes of the threads kept
#: (their decoded objects take ~1.15x that: ~64 KiB per 56 KiB history). A constant, not a
#: share per agent: a million idle threads cost it no more than a hundred (an idle thread's
#: entry goes when the store compresses its history), and what it pins after it empties
#: (pymalloc arenas, README "Decoded histories between turns") is bounded by it too.
DEFAULT_CACHE_BYTES = 32 << 20


class HotCache:
    """The decoded form of threads whose turns ended recently, so a thread's next turn
    starts from it instead of decoding its whole history again. An entry is used only while
    the store holds exactly the bytes it was decoded from (:func:`same_bytes`), and is
    dropped as soon as the store compresses that thread's history (a cold thread holds only
    its compressed bytes): the cache never changes what a slice computes, only what it
    decodes.

    Bounded by ``limit`` threads and ``max_bytes`` of raw history. When a thread's entry
    does not fit, the cache keeps what it holds and refuses the newcomer rather than
    dropping its least recently used entry: threads that take turns round-robin (every
    thread once per turn, the Infinity shape) then hit for the ``limit`` threads kept
    instead of missing every time once they outnumber it (LRU's worst case). Entries of
    threads gone idle leave when the store compresses them (``MemoryThreadStore``'s
    ``hot_limit``, or ``compress_cold``), by :meth:`forget`, or at :meth:`clear`; and one
    not kept again for ``stale_s`` seconds gives way to a newcomer that does not fit (a
    store that seldom compresses must not leave the cache full of threads gone idle).

    Args:
        limit: threads kept (0: none; ``None``: bounded by ``max_bytes`` alone).
        store: a store with ``add_cold_listener`` (``MemoryThreadStore``) tells the cache
            which histories it compressed.
        max_bytes: raw history bytes kept, summed over the entries (default:
            :data:`DEFAULT_CACHE_BYTES` when ``limit`` asks for threads, else 0: off).
        stale_s: seconds (``time.monotonic``) after which an entry not kept again may be
            dropped for a newcomer; a round-robin cycle of 20,000 threads takes ~4 s.
    """

    __slots__ = (
        "__weakref__",
        "_entries",
        "_kept",
        "_sizes",
        "limit",
        "max_bytes",
        "nbytes",
        "now",
        "stale_s",
    )

    def __init__(
        self,
        limit: int | None,
        store: Any = None,
        max_bytes: int | None = None,
        stale_s: float = 60.0,
    ) -> None:
        listen: Callable[[Callable[[list[str]], None]], None] | None = getattr(
            store, "add_cold_listener", None
        )
        self.limit = limit
        # Off unless asked for (a thread count or a byte bound): what it saves is CPU (no
        # re-parse of a history per turn) and what it costs is resident memory an idle
        # agent otherwise does not have — at 400-4,000 agents its pinned residue raised
        # KiB per idle agent by 13-50 % (README "Decoded histories between turns").
        if max_bytes is None:
            max_bytes = DEFAULT_CACHE_BYTES if limit is not None and limit > 0 else 0
        self.max_bytes = max_bytes
        self.nbytes = 0  # raw history bytes of the entries
        self.stale_s = stale_s
        self.now: Callable[[], float] = time.monotonic
        # insertion order = order of the last keep (take pops, keep inserts at the end)
        self._entries: dict[str, Hot] = {}
        self._sizes: dict[str, int] = {}
        self._kept: dict[str, float] = {}  # when each entry was kept
        if listen is not None and self.enabled:
            ref = weakref.ref(self)

            def forget(tids: list[str]) -> None:
                cache = ref()
                if cache is not None:
                    cache.forget(tids)

            listen(forget)

    @property
    def enabled(self) -> bool:
        """Whether anything can be kept."""
        return (self.limit is None or self.limit > 0) and self.max_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    def take(self, tid: str) -> Hot | None:
        """The thread's entry, removed from the cache (``None`` if none)."""
        if not self._entries:
            return None
        hot = self._entries.pop(tid, None)
        if hot is not None:
            self.nbytes -= self._sizes.pop(tid)
            del self._kept[tid]
        return hot

    def keep(self, tid: str, hot: Hot | None) -> None:
        """Keep ``hot`` as the thread's entry if it fits (else drop the thread's old one);
        a form never decoded is not kept (its state alone is cheap to decode)."""
        if hot is None or hot.msgs is None:
            self._drop(tid)
            return
        self._drop(tid)  # re-kept at the end: the front is the entry kept longest ago
        entries = self._entries
        size = len(hot.blob)
        now = self.now()
        while not self._fits(size) and entries:
            oldest = next(iter(entries))
            if now - self._kept[oldest] <= self.stale_s:
                return  # refused: what the cache holds is still in use
            self._drop(oldest)
        if not self._fits(size):
            return
        entries[tid] = hot
        self._sizes[tid] = size
        self._kept[tid] = now
        self.nbytes += size

    def _fits(self, size: int) -> bool:
        return self.nbytes + size <= self.max_bytes and (
            self.limit is None or len(self._entries) < self.limit
        )

    def _drop(self, tid: str) -> None:
        if self._entries.pop(tid, None) is not None:
            self.nbytes -= self._sizes.pop(tid)
            del self._kept[tid]

    def forget(self, tids: list[str]) -> None:
        """Drop the entries of ``tids``."""
        if self._entries:
            for tid in tids:
                self._drop(tid)

    def clear(self) -> None:
        """Drop every entry."""
        self._entries.clear()
        self._sizes.clear()
        self._kept.clear()
        self.nbytes = 0
