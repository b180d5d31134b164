"""``EncodedHistory``: a conversation whose earlier messages are still encoded, decoded only
where they are read.

A suspended agent thread keeps its history as JSON lines (one message a line, each ending
in ``b"\\n"``: :mod:`agentlab.runtime.threads.codec`). Handing its model the conversation
used to mean parsing every line on every turn, to give a model that, keyed by lineage
(:mod:`agentlab.llm.sim_slots`), reads only the messages added since its last call and the
last one or two (issue 26: the parse, its copies and the objects it made and freed were
the largest per-turn cost that grew with the history). This read-only sequence holds the
encoded lines and the messages added since (decoded); an index or slice near the end
decodes the few lines it covers, anything else (iteration, an index far back) decodes all
of them once and keeps the list.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import orjson

__all__ = ["EncodedHistory", "decode_lines"]

#: lines decoded one by one from the end (``rfind``) before a read decodes all of them: a
#: lineage-keyed call reads the one or two messages added since its last call
NEAR = 8


def decode_lines(raw: bytes | bytearray) -> list[dict[str, Any]]:
    """The messages of newline-terminated JSON lines (``b""``: none)."""
    if not raw:
        return []
    # One parse of "[m1,m2,...]" is ~3x faster than parsing line by line; two copies of
    # the lines (replace, join of a view), not four (slice, replace, two concatenations)
    body = raw.replace(b"\n", b",")
    out: list[dict[str, Any]] = orjson.loads(b"".join((b"[", memoryview(body)[:-1], b"]")))
    return out


class EncodedHistory(Sequence[dict[str, Any]]):
    """The ``n`` messages of ``lines`` (its first ``len(lines)`` bytes when made: a buffer
    that grows later by appends only is read as it was) followed by ``tail``.

    Read-only: a model cannot edit what the caller committed, so a non-zero ``lineage``
    (:class:`~agentlab.llm.sim_slots.KnownPrefix`'s meaning: message ``k`` of a lineage is
    the same message in every call of it) vouches for every message. ``lineage`` 0: keyed
    by content. :meth:`as_list` gives a real list (for a transport that serializes it).
    """

    __slots__ = ("_all", "_end", "_len", "_lines", "_n", "_near", "_near_at", "_tail", "lineage")

    def __init__(
        self, lines: bytes | bytearray, n: int, tail: list[dict[str, Any]], lineage: int = 0
    ) -> None:
        self._lines = lines
        self._end = len(lines)
        self._n = n  # the caller's count: bytes.count would read every byte (~2.4 a byte)
        self._tail = list(tail)  # the caller's list goes on growing (the reply)
        self._len = n + len(self._tail)  # asked several times a call (policy, digest, scan)
        self.lineage = lineage
        self._all: list[dict[str, Any]] | None = None  # every message, once decoded
        self._near: list[dict[str, Any]] = []  # the encoded messages from _near_at on
        self._near_at = self._n

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        n = self._n
        if isinstance(i, slice):
            start, stop, step = i.indices(self._len)
            if step != 1 or self._all is not None:
                return self.as_list()[i]
            if stop <= start:
                return []
            if start >= n:
                return self._tail[start - n : stop - n]
            return self._encoded_from(start)[: stop - start] + self._tail[: max(0, stop - n)]
        if i < 0:
            i += self._len
        if i >= n:
            return self._tail[i - n]
        if i < 0:
            raise IndexError("EncodedHistory index out of range")
        if self._all is not None:
            return self._all[i]
        return self._encoded_from(i)[0]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._decoded())

    def as_list(self) -> list[dict[str, Any]]:
        """Every message, in a new list."""
        return list(self._decoded())

    def __reduce__(self) -> tuple[Any, ...]:
        # a plain list in a copy or another process: lineage numbers are per process
        return list, (self.as_list(),)

    def _decoded(self) -> list[dict[str, Any]]:
        out = self._all
        if out is None:
            near = self._near
            cut, lines = self._line_start(self._near_at), self._lines
            head = decode_lines(lines if cut == len(lines) else lines[:cut])
            out = self._all = head + near + self._tail if near else head + self._tail
            self._near = []
        return out

    def _encoded_from(self, start: int) -> list[dict[str, Any]]:
        """The encoded messages ``start`` to the end of the lines, decoded (a few lines near
        the end one by one, else all of them)."""
        if self._all is not None:
            return self._all[start : self._n]
        at = self._near_at
        if start < at:
            if at - start > NEAR:
                return self._decoded()[start : self._n]
            head = self._line_start(start)
            end = self._line_start(at)
            if at - start == 1:  # one line (the usual read): parsed as it is, no array made
                self._near.insert(0, orjson.loads(self._lines[head:end]))
            else:
                self._near = decode_lines(self._lines[head:end]) + self._near
            self._near_at = at = start
        return self._near[start - at :]

    def _line_start(self, k: int) -> int:
        """The offset of line ``k`` (``k <= n``), found from the end of the lines."""
        lines, pos = self._lines, self._end
        if k == self._n:  # the end of the lines (asked on every near read): no range made
            return pos
        for _ in range(self._n - k):
            pos = lines.rfind(b"\n", 0, pos - 1) + 1
        return pos
