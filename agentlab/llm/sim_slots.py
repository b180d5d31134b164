"""``PrefixSlots``: what the simulator derived from a conversation prefix, kept per conversation.

The simulator answers a call from the whole conversation (its context values, its prompt
tokens). A conversation grows by a few messages per call, so each such value is kept for the
conversation seen last and a call extending it works on the new messages only (issue 26).

Keys are hashes of whole prefixes (``hash(tuple(parts of messages[:k]))``);
the table is set-associative (4 slots per bucket; a full bucket replaces one, a conversation
that moves on frees the slot of its shorter prefix), bounded (65,536 conversations by
default: a society's agents each keep theirs between calls) and needs no lock (one list item
read or written at a time).

Memory: each slot holds ONE string (key, then the payload), padded above pymalloc's 512-byte
small-object limit so it is allocated by ``malloc``, not in a pymalloc arena. Kept as Python
objects (tuples of small strings), a few entries pinned ~14 MiB: each small object sat in a
different 1 MiB arena among a call's transient objects, and an arena is returned to the
system only when all of it is free — after the histories were compressed,
``suspended_agents --quick`` (sim) read 66 instead of 31 KiB per idle agent with 2 entries
(38 arenas; 24 once they were dropped).
"""

from __future__ import annotations

import zlib
from array import array
from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import compress, repeat
from typing import Any, TypeVar

from agentlab.llm.encoded_history import EncodedHistory

__all__ = [
    "FIELD",
    "ITEM",
    "LINEAGE",
    "LOOKBACK",
    "CountSlots",
    "KnownPrefix",
    "PrefixSlots",
    "hashable_contents",
    "holds_separator",
    "prefix_digest",
    "vouched",
]

FIELD, ITEM, _FILL = "\x1e", "\x1f", "\x1d"  # separators of a payload; never stored in one
#: a call reuses the stored prefix of its conversation if it adds at most this many messages
#: (a turn adds 1-3); keys are hashes of whole prefixes, so each length tried costs one
#: C-level hash over the messages' (cached) string hashes, no Python loop
LOOKBACK = 8
#: the first part of a lineage key's tuple (:class:`KnownPrefix`; a content key's is a seed,
#: a role or a content: none holds a separator)
LINEAGE = "\x1elineage"
WAYS = 4  # slots per bucket of a PrefixSlots table
_PAD = 520  # characters: a str object above 512 bytes comes from malloc, not a pymalloc arena
_V = TypeVar("_V")


class KnownPrefix(list):  # type: ignore[type-arg]
    """A message list its caller names: message ``k`` of ``lineage`` is the same message in
    every list of that lineage (an append-only history, e.g. a suspended thread's turns).
    The simulator keeps what it derived from a lineage's messages so far (one entry per
    lineage), so a call reads the messages added since the lineage's last call, not the
    whole conversation again (its content hashed: fresh strings after a history is decoded
    cost a pass over every character).

    The first ``committed`` messages (all, when made) are vouched for; ``ref``: the
    caller's own list, of which they are checked to be the same objects (:func:`vouched`):
    a model that edits the list it is handed loses the key. A copy or a slice is a plain
    ``list`` (no key)."""

    __slots__ = ("committed", "lineage", "ref")

    def __init__(self, messages: list[Any], lineage: int) -> None:
        super().__init__(messages)
        self.lineage = lineage
        self.committed = len(messages)
        self.ref = messages

    def __reduce__(self) -> tuple[Any, ...]:
        # a plain list in a copy or another process: lineage numbers are per process
        return list, (list(self),)


def vouched(messages: Sequence[Any]) -> tuple[int, int] | None:
    """``(lineage, committed)`` of a :class:`KnownPrefix` whose first ``committed``
    messages are still its caller's (one pointer comparison per message), or of an
    :class:`~agentlab.llm.encoded_history.EncodedHistory` with a lineage (read-only: all
    of it), else ``None``."""
    if type(messages) is not KnownPrefix:
        if type(messages) is EncodedHistory and messages.lineage and (n := len(messages)):
            return messages.lineage, n
        return None
    k, ref = messages.committed, messages.ref
    if k <= 0 or len(messages) < k or len(ref) < k:
        return None
    # whole lists when no slice is needed (the usual call): no two copies of k pointers
    if (messages if len(messages) == k else messages[:k]) != (ref if len(ref) == k else ref[:k]):
        return None
    return messages.lineage, k


def holds_separator(text: str) -> bool:
    """Whether ``text`` holds a payload separator (a value taken from it cannot be stored)."""
    # three memchr passes: ~50x cheaper than the character class's regex on a 1 KB reply
    return "\x1d" in text or "\x1e" in text or "\x1f" in text


def _lookup(
    get: Callable[[int], _V | None], key_of: Callable[[int], int], n: int
) -> tuple[int, int, _V | None]:
    for k in range(n, max(0, n - LOOKBACK - 1), -1):
        key = key_of(k)
        got = get(key)
        if got is not None:
            return k, key, got
    return 0, 0, None


class PrefixSlots:
    """A bounded table of ``prefix key -> payload`` (a string without separators' fill).

    Set-associative: a key's bucket is :data:`WAYS` adjacent slots; a put takes the key's own
    slot, else a free one, else replaces one chosen by the key's bits. ``slots``: the bound
    on conversations kept (each ~0.6 KB while kept; the slot list itself, 8 bytes a slot, is
    allocated on first use)."""

    __slots__ = ("_mask", "_table")

    def __init__(self, slots: int = 1 << 16) -> None:
        if slots < WAYS or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two >= {WAYS}, not {slots}")
        self._mask = (slots - 1) & ~(WAYS - 1)  # the first slot of a key's bucket
        self._table: list[str | None] = []

    def __len__(self) -> int:
        """Slots in use."""
        return sum(s is not None for s in self._table)

    @property
    def size(self) -> int:
        return self._mask + WAYS

    def _find(self, key: int) -> tuple[int, str | None, str]:
        """``(index, slot, tag)``: the slot holding ``key`` (index -1: none)."""
        tag = f"{key:x}{FIELD}"
        table = self._table
        if table:
            base = key & self._mask
            for i in range(base, base + WAYS):
                slot = table[i]  # one read: a concurrent put replaces it whole
                if slot is not None and slot.startswith(tag):
                    return i, slot, tag
        return -1, None, tag

    def get(self, key: int) -> str | None:
        """The payload stored for ``key``, or ``None``."""
        _, slot, tag = self._find(key)
        if slot is None:
            return None
        # the fill starts at the first fill character when all after it is fill (a payload
        # without one): two C scans, where rstrip tested each of ~400 characters in a loop
        end = slot.find(_FILL, len(tag))
        if end < 0:
            return slot[len(tag) :]
        if slot.count(_FILL, end) == len(slot) - end:
            return slot[len(tag) : end]
        return slot[len(tag) :].rstrip(_FILL)

    def lookup(self, key_of: Callable[[int], int], n: int) -> tuple[int, int, str | None]:
        """``(k, key_of(k), payload)`` of the longest stored prefix of ``n`` messages among
        the last :data:`LOOKBACK` + 1 lengths (``n``, ``n - 1``...); ``(0, 0, None)``: none.
        ``key_of(k)``: the key of the first ``k`` messages (a hash in C over them)."""
        return _lookup(self.get, key_of, n)

    def put(self, key: int, payload: str, replaces: int | None = None) -> None:
        """Store ``payload`` for ``key``; ``replaces``: the prefix key it extends (freed).
        The payload must not end in the fill character (separators are the caller's)."""
        if not self._table:
            self._table = [None] * self.size
        table = self._table
        if replaces is not None:
            i = self._find(replaces)[0]
            if i >= 0:
                table[i] = None
        i, _, tag = self._find(key)
        if i < 0:
            base = key & self._mask
            free = [j for j in range(base, base + WAYS) if table[j] is None]
            i = free[0] if free else base + (key >> 40) % WAYS
        slot = tag + payload
        table[i] = slot + _FILL * (_PAD - len(slot)) if len(slot) < _PAD else slot

    def slot_sizes(self) -> list[int]:
        """``sys.getsizeof`` of each used slot (all above 512 bytes: outside pymalloc)."""
        import sys

        return [sys.getsizeof(s) for s in self._table if s is not None]


class CountSlots:
    """:class:`PrefixSlots` for ``width`` non-negative ints per prefix key, in two
    ``array('q')`` (keys; values, ``width`` a slot): no object per entry at all, 8 bytes x
    (1 + ``width``) a slot, allocated on first use."""

    __slots__ = ("_keys", "_mask", "_vals", "_width")

    def __init__(self, slots: int = 1 << 16, width: int = 1) -> None:
        if slots < WAYS or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two >= {WAYS}, not {slots}")
        self._mask = (slots - 1) & ~(WAYS - 1)
        self._width = width
        self._keys = array("q")
        self._vals = array("q")  # a free slot's first value is -1

    def _find(self, key: int) -> int:
        keys, vals, w = self._keys, self._vals, self._width
        if keys:
            base = key & self._mask
            for i in range(base, base + WAYS):
                if keys[i] == key and vals[i * w] >= 0:
                    return i
        return -1

    def get(self, key: int) -> tuple[int, ...] | None:
        """The values stored for ``key``, or ``None``."""
        return self.get_at(key)[1]

    def get_at(self, key: int) -> tuple[int, tuple[int, ...] | None]:
        """``(slot, values)`` of ``key`` (``(-1, None)``: not stored); the slot is
        :meth:`put`'s ``at`` for the same key while no other put came between."""
        i = self._find(key)
        w = self._width
        return (-1, None) if i < 0 else (i, tuple(self._vals[i * w : i * w + w]))

    def lookup(
        self, key_of: Callable[[int], int], n: int
    ) -> tuple[int, int, tuple[int, ...] | None]:
        """As :meth:`PrefixSlots.lookup`, with the stored values."""
        return _lookup(self.get, key_of, n)

    def put(
        self, key: int, values: tuple[int, ...], replaces: int | None = None, at: int = -1
    ) -> None:
        """Store ``values`` (``width`` ints >= 0) for ``key``; ``replaces``: the prefix key
        it extends (freed); ``at``: the key's slot from :meth:`get_at` (not searched again)."""
        w = self._width
        if at >= 0 and self._keys[at] == key:  # still its slot (no put of another between)
            self._vals[at * w : at * w + w] = array("q", values)
            return
        if not self._keys:
            size = self._mask + WAYS
            self._keys = array("q", bytes(8 * size))
            self._vals = array("q", [-1]) * (size * w)
        keys, vals = self._keys, self._vals
        if replaces is not None and (j := self._find(replaces)) >= 0:
            vals[j * w] = -1
        i = self._find(key)
        if i < 0:
            base = key & self._mask
            free = [j for j in range(base, base + WAYS) if vals[j * w] < 0]
            i = free[0] if free else base + (key >> 40) % WAYS
        keys[i] = key
        vals[i * w : i * w + w] = array("q", values)


#: (request-hash CRC, prompt tokens without tools) of each conversation seen last, keyed
#: with the server's seed and the request's extra (both in the hashed text)
_digests = CountSlots(width=2)


def _calls_key(calls: Any) -> Any:
    """A hashable stand-in for an assistant message's ``tool_calls`` (name and arguments)."""
    if not calls:
        return None
    if type(calls) is list and len(calls) == 1:  # the common shape, without the loop
        fn = calls[0].get("function") if type(calls[0]) is dict else None
        if type(fn) is dict and type(args := fn.get("arguments")) is str:
            return ((fn.get("name"), args),)
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


def hashable_contents(messages: list[dict[str, Any]]) -> tuple[Any, ...] | None:
    """The messages' contents as one hashable tuple, by a C-level map (no Python step per
    message: a conversation is re-read on every call), or ``None`` when a message is not a
    dict or a content is not hashable (content parts)."""
    try:
        contents = tuple(map(dict.get, messages, repeat("content")))
        hash(contents)
    except TypeError:
        return None
    return contents


def _keys_of(messages: list[dict[str, Any]]) -> Callable[[int], tuple[Any, ...]] | None:
    """``parts(k)``: a hashable stand-in for ``messages[:k]`` (roles, contents, tool calls),
    built by C-level maps (no Python step per message but one per tool-calling message),
    or ``None`` when a message is not a dict or a content is not a string or ``None``
    (content parts: the caller keys by rows instead).

    A conversation is re-read whole on every call; keyed this way its per-call cost is a
    few C passes over the messages, not a Python loop over them (issue 26)."""
    contents = hashable_contents(messages)
    if contents is None:  # content parts (lists) are unhashable: keyed by rows instead
        return None
    n = len(messages)
    roles = tuple(map(dict.get, messages, repeat("role")))
    at = list(compress(range(n), map(dict.get, messages, repeat("tool_calls"))))
    calls = tuple((i, _calls_key(messages[i]["tool_calls"])) for i in at)

    def parts(k: int) -> tuple[Any, ...]:
        c = calls if not calls or calls[-1][0] < k else calls[: bisect_left(at, k)]
        return roles[:k], contents[:k], c

    return parts


def prefix_digest(
    seed: str, extra: str, messages: list[dict[str, Any]], tokenizer: Any
) -> tuple[int, int]:
    """``(crc32 of "\\x1f".join([seed, extra, role, text, role, text...]),
    tokenizer.prompt_tokens(messages))`` — ``SimServer._digest``'s hash and count —
    computed over the messages added since the longest prefix seen: the CRC continues from
    the prefix's (``crc32(b, crc32(a)) == crc32(a + b)``), the count adds the new messages'
    (``tokenizer.added_tokens(messages[k:], k)``: ``CharsTokenizer`` sums per message, Llama 3's
    template lays out every message after the system one alike). A message's
    text is its content, or ``repr`` of a content that is not a string; its tool calls
    (name, arguments) are part of the key (they count as tokens).

    A :class:`KnownPrefix` is keyed by its lineage up to its committed messages (no pass
    over the conversation); the messages after them are added on each call, not stored."""
    v = vouched(messages)
    if v is None:
        return _content_digest(seed, extra, messages, tokenizer)
    lineage, c = v
    key = hash((LINEAGE, seed, extra, tokenizer.name, lineage))
    at, got = _digests.get_at(key)  # (k << 32 | crc, tokens) of the lineage's first k
    k = 0 if got is None else got[0] >> 32
    # the vouched messages: all of them, as a rule (no copy; an EncodedHistory's slice
    # from 0 would decode every message)
    whole = c == len(messages)
    head = messages if whole else messages[:c]
    if got is None or k > c:  # a new lineage (or its entry replaced): by content
        crc, tokens = _content_digest(seed, extra, head, tokenizer, keep=False)
    else:
        crc, tokens = got[0] & 0xFFFFFFFF, got[1]
        if k < c:
            crc, tokens = _extend_digest(crc, tokens, head, k, tokenizer)
    if k != c:  # a content lookup above stores nothing (keep=False): ``at`` still holds
        _digests.put(key, (c << 32 | crc, tokens), at=at)
    if whole:
        return crc, tokens
    return _extend_digest(crc, tokens, messages, c, tokenizer)


def _extend_digest(
    crc: int, tokens: int, messages: list[dict[str, Any]], k: int, tokenizer: Any
) -> tuple[int, int]:
    """The digest of ``messages`` from that of ``messages[:k]`` (``k < len(messages)``)."""
    added = messages[k:]  # once: an EncodedHistory's slice decodes the lines it covers
    new = [""]  # the join's leading separator, without a second copy of the text
    for m in added:
        c = m.get("content")
        new += (m.get("role", ""), c if isinstance(c, str) else repr(c))
    crc = zlib.crc32("\x1f".join(new).encode("utf-8", "surrogatepass"), crc)
    return crc, tokens + tokenizer.added_tokens(added, k)


def _content_digest(
    seed: str, extra: str, messages: list[dict[str, Any]], tokenizer: Any, keep: bool = True
) -> tuple[int, int]:
    """:func:`prefix_digest` keyed by the messages' content (hashes of whole prefixes);
    ``keep=False``: looked up, not stored (a lineage's start keeps its own entry)."""
    name = tokenizer.name  # servers of one seed with other tokenizers count otherwise
    parts = _keys_of(messages)
    if parts is None:
        rows = [
            (
                m.get("role", ""),
                c if isinstance(c := m.get("content"), str) else repr(c),
                _calls_key(tc) if (tc := m.get("tool_calls")) else None,
            )
            for m in messages
        ]

        def key_of(k: int) -> int:
            return hash((seed, extra, name, tuple(rows[:k])))

    else:

        def key_of(k: int) -> int:
            return hash((seed, extra, name, parts(k)))

    n = len(messages)
    k, key, got = _digests.lookup(key_of, n)
    if got is not None:
        crc, tokens = got
        if k == n:
            return crc, tokens
    else:
        crc, tokens = zlib.crc32(f"{seed}\x1f{extra}".encode("utf-8", "surrogatepass")), 0
        if not n:
            return crc, tokenizer.prompt_tokens(messages)
    crc, tokens = _extend_digest(crc, tokens, messages, k, tokenizer)
    if keep:
        _digests.put(key_of(n), (crc, tokens), key if k else None)
    return crc, tokens
