"""``PrefixSlots``: what the simulator derived from a conversation prefix, kept per conversation.

The simulator answers a call from the whole conversation (its context values, its prompt
tokens). A conversation grows by a few messages per call, so each such value is kept for the
conversation seen last and a call extending it works on the new messages only (issue 26).

Keys are chained hashes of the messages (``key[i] = hash((key[i-1], part of message i))``);
the table is direct-mapped (slot = key mod size; a collision replaces, a conversation that
moves on frees the slot of its shorter prefix), so it is bounded and needs no lock (one list
item read or written at a time).

Memory: each slot holds ONE string (key, then the payload), padded above pymalloc's 512-byte
small-object limit so it is allocated by ``malloc``, not in a pymalloc arena. Kept as Python
objects (tuples of small strings), a few entries pinned ~14 MiB: each small object sat in a
different 1 MiB arena among a call's transient objects, and an arena is returned to the
system only when all of it is free — after the histories were compressed,
``suspended_agents --quick`` (sim) read 66 instead of 31 KiB per idle agent with 2 entries
(38 arenas; 24 once they were dropped).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["FIELD", "ITEM", "PrefixSlots", "holds_separator", "prefix_tokens"]

FIELD, ITEM, _FILL = "\x1e", "\x1f", "\x1d"  # separators of a payload; never stored in one
_PAD = 520  # characters: a str object above 512 bytes comes from malloc, not a pymalloc arena
_SEPARATOR = re.compile("[\x1d-\x1f]")


def holds_separator(text: str) -> bool:
    """Whether ``text`` holds a payload separator (a value taken from it cannot be stored)."""
    return _SEPARATOR.search(text) is not None


class PrefixSlots:
    """A bounded table of ``prefix key -> payload`` (a string without separators' fill)."""

    __slots__ = ("_mask", "_table")

    def __init__(self, slots: int = 1024) -> None:
        if slots < 1 or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two, not {slots}")
        self._mask = slots - 1
        self._table: list[str | None] = [None] * slots

    def __len__(self) -> int:
        """Slots in use."""
        return sum(s is not None for s in self._table)

    @property
    def size(self) -> int:
        return self._mask + 1

    def get(self, key: int) -> str | None:
        """The payload stored for ``key``, or ``None``."""
        slot = self._table[key & self._mask]  # one read: a concurrent put replaces it whole
        tag = f"{key:x}{FIELD}"
        if slot is None or not slot.startswith(tag):
            return None
        return slot[len(tag) :].rstrip(_FILL)

    def longest(self, keys: list[int]) -> tuple[int, str | None]:
        """``(k, payload)`` of the longest stored prefix ``keys[:k]`` (``(0, None)``: none)."""
        for i in range(len(keys) - 1, -1, -1):
            got = self.get(keys[i])
            if got is not None:
                return i + 1, got
        return 0, None

    def put(self, key: int, payload: str, replaces: int | None = None) -> None:
        """Store ``payload`` for ``key``; ``replaces``: the prefix key it extends (freed).
        The payload must not end in the fill character (separators are the caller's)."""
        table, mask = self._table, self._mask
        if replaces is not None and self.get(replaces) is not None:
            table[replaces & mask] = None
        slot = f"{key:x}{FIELD}{payload}"
        table[key & mask] = slot + _FILL * (_PAD - len(slot)) if len(slot) < _PAD else slot

    def slot_sizes(self) -> list[int]:
        """``sys.getsizeof`` of each used slot (all above 512 bytes: outside pymalloc)."""
        import sys

        return [sys.getsizeof(s) for s in self._table if s is not None]


#: prompt tokens (without tools) of each conversation seen last, for additive tokenizers
_tokens = PrefixSlots(1024)


def _calls_key(calls: Any) -> Any:
    """A hashable stand-in for an assistant message's ``tool_calls`` (name and arguments)."""
    if not calls:
        return None
    if isinstance(calls, list):
        out = []
        for c in calls:
            fn = c.get("function", c) if isinstance(c, dict) else None
            args = fn.get("arguments") if fn is not None else None
            if fn is None or not isinstance(args, str):
                return repr(calls)
            out.append((fn.get("name"), args))
        return tuple(out)
    return repr(calls)


def prefix_tokens(tokenizer: Any, messages: list[dict[str, Any]], parts: list[str]) -> int:
    """``tokenizer.prompt_tokens(messages)`` (no tools) for a tokenizer whose count is a sum
    over messages (``CharsTokenizer``), counting only the messages added since the longest
    prefix seen. ``parts``: the request hash's parts (seed, extra, then role and text of each
    message), reused for the prefix keys."""
    keys, h, i = [], 0, 2
    for m in messages:
        calls = m.get("tool_calls")
        h = hash((h, parts[i], parts[i + 1], _calls_key(calls) if calls else None))
        keys.append(h)
        i += 2
    k, payload = _tokens.longest(keys)
    if k == len(keys) and payload is not None:
        return int(payload)
    n = (int(payload) if payload is not None else 0) + tokenizer.prompt_tokens(messages[k:])
    if keys:
        _tokens.put(keys[-1], str(n), keys[k - 1] if k else None)
    return n
