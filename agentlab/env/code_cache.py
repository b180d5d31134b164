"""The code-generation router's cache, keyed by (agent, request shape, tool signatures).

An agent asks for the same thing with different values ("like post 0.bob.3", "like post
1.carol.0"). The *shape* of a request is its text with the literals — quoted strings,
numbers and ids with digits — replaced by a placeholder, lower-cased, spaces collapsed.
A program generated for one request is reused only for a request that is provably the
same up to its parameters:

- the same **agent** (the LLM wrote the program from that agent's prompt — "You are
  @m" — so it may act as that agent: a program written for ``m`` must never run for
  ``a``), the same tool signatures (stale code never runs against a new API) and the same
  request shape;
- every literal that differs is *rewritten* in the program: it must appear there as a
  constant call argument (an AST rewrite, never text substitution), and nowhere else —
  not as another constant (``items[0]`` for "like post 0") and not inside a longer
  string constant (``post('I like 0.bob.3')``). A literal the program does not use
  (``post('Hello!')`` for "post 'hello'") means the program was not written in terms of
  it, so a request with another value misses.
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
    if len(old) != len(new):
        return None
    if len(set(old)) != len(old):
        return None  # ambiguous: one old literal would map to two new ones
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return None
    args = _call_args(tree)
    rewritten: set[str] = set()
    try:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
                continue
            key = str(node.value)
            if key not in mapping:
                if isinstance(node.value, str) and any(o in key for o in mapping):
                    return None  # the old value inside a longer text: not a parameter
                continue
            if id(node) not in args:
                # the old value also plays another part (``items[0]`` for "post 0"):
                # rewriting could change that part, keeping it could be wrong — miss
                return None
            node.value = _as_like(node.value, mapping[key])
            rewritten.add(key)
    except ValueError:
        return None
    if rewritten != set(mapping):
        return None  # a changed value the program does not take as a parameter
    return ast.unparse(tree)


_Key = tuple[str | None, str, tuple[str, ...]]


class CodeCache:
    """LRU of generated programs by (agent, request shape, tool signatures), with counters.

    Args:
        size: entries kept (0 disables the cache).
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[_Key, tuple[list[str], str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(
        self, request: str, signatures: tuple[str, ...], agent: str | None = None
    ) -> str | None:
        """The program cached for ``agent``'s request of this shape, rewritten to the
        request's literals, or ``None``."""
        if self.size <= 0:
            self.misses += 1
            return None
        shape, literals = request_shape(request)
        key = (agent, shape, signatures)
        entry = self._entries.get(key)
        code = None if entry is None else _rewrite(entry[1], entry[0], literals)
        if code is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return code

    def put(
        self, request: str, signatures: tuple[str, ...], code: str, agent: str | None = None
    ) -> None:
        """Remember ``code`` (a program that ran for ``agent``) for ``request``'s shape."""
        if self.size <= 0:
            return
        shape, literals = request_shape(request)
        key = (agent, shape, signatures)
        self._entries[key] = (literals, code)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: counters and the entries, least recently used first (committed
        with the tick, so a resumed run hits exactly where an uninterrupted one does)."""
        return {
            "hits": self.hits,
            "misses": self.misses,
            "entries": [
                [agent, shape, list(sigs), list(literals), code]
                for (agent, shape, sigs), (literals, code) in self._entries.items()
            ],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (keeps this cache's ``size``)."""
        self.hits, self.misses = int(state["hits"]), int(state["misses"])
        self._entries = OrderedDict(
            ((agent, shape, tuple(sigs)), (list(literals), code))
            for agent, shape, sigs, literals, code in state["entries"]
        )
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def stats(self) -> dict[str, int]:
        """``{"hits", "misses", "entries"}``."""
        return {"hits": self.hits, "misses": self.misses, "entries": len(self._entries)}
