"""Bounded walks over plain data: logical size, and text that stops at a budget.

Containers share references, so ``a = [0]; a = [a, a]`` repeated 40 times builds a value
whose *shallow* size is 2 and whose *logical* size (what ``==``, ``hash``, ``repr`` or
``json.dumps`` walk) is 2⁴⁰. Every operation that walks a value deeply must therefore be
priced by logical size first, and every rendering must stop at a character budget instead
of being built and truncated afterwards. Both walks here cost at most ``limit`` steps, so
they are safe on any value.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["TooLarge", "bounded_json", "bounded_repr", "logical_size"]


class TooLarge(Exception):
    """A walk exceeded its budget (the value is too large or nested too deeply)."""


def logical_size(value: Any, limit: int, max_depth: int = 64) -> int:
    """Nodes a deep walk of ``value`` visits (shared parts counted every time they recur).

    Strings count their length. Stops early: raises :class:`TooLarge` as soon as the count
    passes ``limit`` or nesting passes ``max_depth``, so the cost is at most ``limit``.
    """
    total = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        total += 1
        if isinstance(v, str):
            total += len(v) // 8
        elif isinstance(v, (list, tuple, dict)):
            if depth >= max_depth:
                raise TooLarge(f"nested deeper than {max_depth} levels")
            total += len(v)
            if total > limit:
                raise TooLarge(f"logical size above {limit}")
            if isinstance(v, dict):
                for k, x in v.items():
                    stack.append((k, depth + 1))
                    stack.append((x, depth + 1))
            else:
                stack.extend((x, depth + 1) for x in v)
        if total > limit:
            raise TooLarge(f"logical size above {limit}")
    return total


class _Out:
    __slots__ = ("left", "parts")

    def __init__(self, limit: int) -> None:
        self.parts: list[str] = []
        self.left = limit

    def put(self, text: str) -> None:
        if len(text) >= self.left:
            self.parts.append(text[: self.left])
            self.left = 0
            raise TooLarge
        self.parts.append(text)
        self.left -= len(text)


def _atom(v: Any, style: str) -> str:
    if style == "json":
        if isinstance(v, str):
            # the string is bounded by the sandbox's max_len; cut before encoding anyway
            return json.dumps(v[:100_000], ensure_ascii=False)
        if v is None or isinstance(v, (bool, int, float)):
            return json.dumps(v) if not isinstance(v, int) or v.bit_length() < 4096 else '"<int>"'
        return json.dumps(f"<{type(v).__name__}>")
    if isinstance(v, str):
        return repr(v[:100_000])
    if v is None or isinstance(v, (bool, float)):
        return repr(v)
    if isinstance(v, int):
        return repr(v) if v.bit_length() < 4096 else "<int>"
    return f"<{type(v).__name__}>"


def _write(out: _Out, value: Any, style: str, depth: int) -> None:
    if depth > 64:
        out.put("...")
        return
    if isinstance(value, dict):
        out.put("{")
        for i, (k, v) in enumerate(value.items()):
            if i:
                out.put(", ")
            if style == "json" and not isinstance(k, str):
                out.put(json.dumps(_text(k, style, out.left)))
            else:
                _write(out, k, style, depth + 1)
            out.put(": ")
            _write(out, v, style, depth + 1)
        out.put("}")
    elif isinstance(value, (list, tuple)):
        tup = isinstance(value, tuple) and style != "json"
        out.put("(" if tup else "[")
        for i, v in enumerate(value):
            if i:
                out.put(", ")
            _write(out, v, style, depth + 1)
        out.put(",)" if tup and len(value) == 1 else ")" if tup else "]")
    else:
        out.put(_atom(value, style))


def _text(value: Any, style: str, limit: int) -> str:
    out = _Out(max(limit, 0))
    try:
        _write(out, value, style, 0)
    except TooLarge:
        return "".join(out.parts) + "..."
    return "".join(out.parts)


def bounded_json(value: Any, limit: int) -> str:
    """``json.dumps(value)`` (compact separators aside) cut at ``limit`` characters.

    The text is produced piece by piece and the walk stops at the budget, so a value of any
    logical size costs O(``limit``). A cut result ends with ``...``; tuples render as
    lists, non-string keys as their JSON text, non-plain objects as ``"<type>"``.
    """
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + "..."
    return _text(value, "json", limit)


def bounded_repr(value: Any, limit: int) -> str:
    """``repr(value)`` for plain data, cut at ``limit`` characters (cost O(``limit``))."""
    return _text(value, "repr", limit)
