"""The code-generation router's cache, keyed by (request shape, tool signatures).

Agents ask for the same thing with different values ("like post 0.bob.3", "like post
1.carol.0"). The *shape* of a request is its text with the literals — quoted strings,
numbers and ids with digits — replaced by a placeholder, lower-cased, spaces collapsed.
A program generated for one request is reused for another request of the same shape
against the same tool signatures, with the old request's literals replaced by the new
ones where they appear as constant call arguments in the program (an AST rewrite, never
text substitution). If an old literal also appears as a constant anywhere else
(``items[0]`` in a program for "like post 0"), the rewrite is ambiguous and the request
misses. A changed tool signature is a different key, so stale code is never run
against a new API.
"""

from __future__ import annotations

import ast
import re
from collections import OrderedDict
from typing import Any

__all__ = ["CodeCache", "request_shape"]

_LITERAL = re.compile(r"\"[^\"\n]*\"|'[^'\n]*'|(?<![\w.])[\w.-]*\d[\w.-]*")


def request_shape(text: str) -> tuple[str, list[str]]:
    """``(shape, literals)`` of a request: the text with literals as ``<v>``, and them."""
    literals: list[str] = []

    def sub(m: re.Match[str]) -> str:
        lit = m.group(0)
        literals.append(lit[1:-1] if lit[:1] in "'\"" else lit.strip(".-"))
        return "<v>"

    shape = " ".join(_LITERAL.sub(sub, text).lower().split())
    return shape, literals


def _as_like(old: Any, new: str) -> Any:
    # The constant's type is kept: an int slot takes the new literal only if it is an int.
    if isinstance(old, bool):
        raise ValueError
    if isinstance(old, int):
        return int(new)
    if isinstance(old, float):
        return float(new)
    return new


def _call_args(tree: ast.AST) -> set[int]:
    """ids of the constants passed directly as call arguments (where request values go)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(arg, ast.Constant):
                    found.add(id(arg))
    return found


def _rewrite(code: str, old: list[str], new: list[str]) -> str | None:
    mapping = {o: n for o, n in zip(old, new, strict=True) if o != n}
    if not mapping:
        return code
    if len(set(old)) != len(old):
        return None  # ambiguous: one old literal would map to two new ones
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return None
    args = _call_args(tree)
    try:
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
                key = str(node.value)
                if key not in mapping:
                    continue
                if id(node) not in args:
                    # the old value also plays another part (``items[0]`` for "post 0"):
                    # rewriting could change that part, keeping it could be wrong — miss
                    return None
                node.value = _as_like(node.value, mapping[key])
    except ValueError:
        return None
    return ast.unparse(tree)


class CodeCache:
    """LRU of generated programs by (request shape, tool signatures), with counters.

    Args:
        size: entries kept (0 disables the cache).
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[str, tuple[str, ...]], tuple[list[str], str]] = (
            OrderedDict()
        )

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, request: str, signatures: tuple[str, ...]) -> str | None:
        """The cached program for ``request`` rewritten to its literals, or ``None``."""
        if self.size <= 0:
            self.misses += 1
            return None
        shape, literals = request_shape(request)
        entry = self._entries.get((shape, signatures))
        code = None if entry is None else _rewrite(entry[1], entry[0], literals)
        if code is None:
            self.misses += 1
            return None
        self._entries.move_to_end((shape, signatures))
        self.hits += 1
        return code

    def put(self, request: str, signatures: tuple[str, ...], code: str) -> None:
        """Remember ``code`` (a program that ran) for ``request``'s shape."""
        if self.size <= 0:
            return
        shape, literals = request_shape(request)
        self._entries[(shape, signatures)] = (literals, code)
        self._entries.move_to_end((shape, signatures))
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def stats(self) -> dict[str, int]:
        """``{"hits", "misses", "entries"}``."""
        return {"hits": self.hits, "misses": self.misses, "entries": len(self._entries)}
