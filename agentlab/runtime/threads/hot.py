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

import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentlab.runtime.threads.records import ThreadState

__all__ = ["Hot", "HotCache", "same_bytes"]


@dataclass(slots=True)
class Hot:
    """A thread's decoded form as one slice left it.

    ``raw_state``/``stored`` are the exact bytes committed (or read); ``blob`` is the raw
    (uncompressed) history; ``msgs`` the decoded history, or ``None`` if never decoded.
    """

    raw_state: bytes | None
    stored: bytes | None
    blob: bytes
    st: ThreadState
    msgs: list[dict[str, Any]] | None


def same_bytes(a: bytes | None, b: bytes | None) -> bool:
    """Whether two stored values are the same bytes."""
    # The in-memory store hands back the very object committed (identity, O(1)); other
    # stores return equal copies (one memcmp, far cheaper than decoding).
    return a is b or (a is not None and b is not None and len(a) == len(b) and a == b)


class HotCache:
    """The decoded form of the ``limit`` threads whose turns ended last (least recently
    used out first), so a thread's next turn starts from it instead of decoding its whole
    history again. An entry is used only while the store holds exactly the bytes it was
    decoded from (:func:`same_bytes`), and is dropped as soon as the store compresses that
    thread's history (a cold thread holds only its compressed bytes): the cache never
    changes what a slice computes, only what it decodes.

    Args:
        limit: threads kept (0: none).
        store: a store with ``add_cold_listener`` (``MemoryThreadStore``) tells the cache
            which histories it compressed.
    """

    __slots__ = ("__weakref__", "_entries", "limit")

    def __init__(self, limit: int, store: Any = None) -> None:
        self.limit = limit
        self._entries: OrderedDict[str, Hot] = OrderedDict()  # least recently used first
        listen: Callable[[Callable[[list[str]], None]], None] | None = getattr(
            store, "add_cold_listener", None
        )
        if listen is not None and limit > 0:
            ref = weakref.ref(self)

            def forget(tids: list[str]) -> None:
                cache = ref()
                if cache is not None:
                    cache.forget(tids)

            listen(forget)

    def __len__(self) -> int:
        return len(self._entries)

    def take(self, tid: str) -> Hot | None:
        """The thread's entry, removed from the cache (``None`` if none)."""
        return self._entries.pop(tid, None) if self._entries else None

    def keep(self, tid: str, hot: Hot | None) -> None:
        """Keep ``hot`` as the thread's entry, dropping the least recently used past the
        limit."""
        if hot is None or self.limit <= 0:
            return
        entries = self._entries
        entries[tid] = hot
        entries.move_to_end(tid)
        if len(entries) > self.limit:
            entries.popitem(last=False)

    def forget(self, tids: list[str]) -> None:
        """Drop the entries of ``tids``."""
        entries = self._entries
        if entries:
            for tid in tids:
                entries.pop(tid, None)

    def clear(self) -> None:
        """Drop every entry."""
        self._entries.clear()
