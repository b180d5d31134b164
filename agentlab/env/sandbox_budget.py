"""Budgets of one sandboxed program: steps, sizes, allocation, logical size of deep walks.

:class:`Budget` is the half of the interpreter (:mod:`agentlab.env.sandbox`) that decides
what an operation may cost *before* it runs: it counts steps (and the clock), checks sizes
before allocating (``*``, ``+``, ``**``, ``str.join``), keeps a running allocation total and
prices every operation that walks a value deeply by the value's logical size
(:func:`~agentlab.env.render.logical_size`), so shared sub-lists cannot hide work.
"""

from __future__ import annotations

import ast
import operator
import time
from collections.abc import Callable
from typing import Any

from agentlab.env.codecheck import HASH_MODULUS, PLAIN_TYPES, Limits, hash_key_ok
from agentlab.env.render import TooLarge, bounded_repr, logical_size
from agentlab.errors import ToolError, UnsafeCodeError

__all__ = ["DEEP_BUILTINS", "DEEP_METHODS", "Budget", "exception_text"]

_PLAIN = PLAIN_TYPES
_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}  # fmt: skip


class Budget:
    """Counters and checks of one run; the interpreter's run state derives from it."""

    def __init__(self, limits: Limits) -> None:
        self.lim = limits
        self.steps = 0
        self.alloc = 0
        self.tool_time = 0.0
        self.start = time.monotonic()
        self.next_clock_check = 256

    def tick(self, cost: int = 1) -> None:
        self.steps += cost
        if self.steps > self.lim.max_steps:
            raise UnsafeCodeError(
                f"step budget of {self.lim.max_steps} exceeded (an endless loop?)"
            )
        if self.steps >= self.next_clock_check:
            self.next_clock_check = self.steps + 256
            if time.monotonic() - self.start - self.tool_time > self.lim.max_seconds:
                raise UnsafeCodeError(f"time budget of {self.lim.max_seconds} s exceeded")

    def size(self, n: int, what: str = "value") -> None:
        if n > self.lim.max_len:
            raise UnsafeCodeError(f"{what} of size {n} exceeds the limit of {self.lim.max_len}")

    def render_size(self, value: Any) -> None:
        """Refuse to render (``str``/f-string/print) a value whose text would be too big."""
        if isinstance(value, str):
            return
        try:
            n = logical_size(value, self.lim.max_len * 4, max_depth=30)
        except TooLarge:
            raise UnsafeCodeError("value too large to convert to text") from None
        self.tick(n // 16)

    def deep(self, what: str, *values: Any) -> None:
        """Price an operation that walks ``values`` deeply (compare, hash, sort, render).

        Charged by logical size (shared parts counted each time they recur); refused above
        ``max_deep`` before the C-level walk starts.
        """
        budget = self.lim.max_deep
        for v in values:
            if not isinstance(v, (list, tuple, dict)):
                continue
            try:
                n = logical_size(v, budget, max_depth=self.lim.max_depth * 2)
            except TooLarge:
                raise UnsafeCodeError(
                    f"{what} on a value of logical size above {self.lim.max_deep} (or nested "
                    f"deeper than {self.lim.max_depth * 2}) is not allowed; shared or nested "
                    "lists count every time they recur"
                ) from None
            budget -= n
            self.tick(n // 16)

    def store_keys(self, what: str, keys: Any) -> None:
        """Price hashing ``keys`` and refuse keys whose hash the program chose (see
        :func:`~agentlab.env.codecheck.hash_key_ok`) before they enter a dict."""
        self.deep(what, list(keys))
        for k in keys:
            if not hash_key_ok(k):
                raise UnsafeCodeError(
                    f"{what}: integer dict keys must be smaller than {HASH_MODULUS} in "
                    "magnitude (larger ones can be chosen to collide)"
                )

    def check(self, value: Any) -> Any:
        if isinstance(value, int) and value.bit_length() > self.lim.max_int_bits:
            raise UnsafeCodeError(f"integer larger than {self.lim.max_int_bits} bits")
        if not isinstance(value, _PLAIN):
            raise UnsafeCodeError(f"values of type {type(value).__name__} are not allowed")
        return value

    def charge(self, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            if value.bit_length() > self.lim.max_int_bits:
                raise UnsafeCodeError(f"integer larger than {self.lim.max_int_bits} bits")
        elif isinstance(value, (str, list, tuple, dict)):
            self.size(len(value))
            self.alloc += len(value)
            if self.alloc > self.lim.max_alloc:
                raise UnsafeCodeError(
                    f"memory budget of {self.lim.max_alloc} items/characters exceeded"
                )
        elif not isinstance(value, _PLAIN):
            raise UnsafeCodeError(f"values of type {type(value).__name__} are not allowed")
        return value

    def check_join(self, sep: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        """Size ``sep.join(x)`` before it allocates: ``x`` may be a list/tuple of strings,
        a string (joins its characters) or a dict (joins its keys)."""
        if kwargs or len(args) != 1:
            raise ToolError("str.join() takes exactly one argument")
        parts = args[0]
        if isinstance(parts, str):
            total = len(parts) + len(sep) * max(len(parts) - 1, 0)
        elif isinstance(parts, (list, tuple, dict)):
            if not all(isinstance(x, str) for x in parts):
                raise ToolError("str.join() needs strings")
            total = len(sep) * max(len(parts) - 1, 0) + sum(len(x) for x in parts)
        else:
            raise ToolError(f"str.join() cannot join a {type(parts).__name__}")
        self.size(total, "joined string")
        self.tick(total // 64)

    def binop(self, op: type, a: Any, b: Any) -> Any:
        lim = self.lim
        if op is ast.Mult:
            for seq, n in ((a, b), (b, a)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    self.size(len(seq) * max(n, 0), "repeated sequence")
            if (
                isinstance(a, int)
                and isinstance(b, int)
                and a.bit_length() + b.bit_length() > lim.max_int_bits
            ):
                raise UnsafeCodeError(f"integer product larger than {lim.max_int_bits} bits")
        elif op is ast.Pow and isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
            if b * a.bit_length() > lim.max_int_bits or b > lim.max_int_bits:
                raise UnsafeCodeError(f"power larger than {lim.max_int_bits} bits")
        elif (
            op is ast.Add
            and isinstance(a, (str, list, tuple))
            and isinstance(b, (str, list, tuple))
        ):
            self.size(len(a) + len(b), "concatenation")
        elif op is ast.Mod and isinstance(a, str):
            raise UnsafeCodeError("'%' string formatting is not allowed; use f-strings")
        if isinstance(a, (str, list, tuple)) or isinstance(b, (str, list, tuple)):
            self.tick(
                max(len(a) if hasattr(a, "__len__") else 0, len(b) if hasattr(b, "__len__") else 0)
                // 64
            )
        return self.charge(_BINOPS[op](a, b))


#: methods / builtins that compare or hash their arguments' contents
DEEP_METHODS = frozenset({"index", "count", "get", "pop", "setdefault", "update"})
DEEP_BUILTINS = frozenset({"sorted", "min", "max", "dict", "sum"})


def exception_text(exc: BaseException, limit: int = 300) -> str:
    """``str(exc)`` of a program's exception, built within ``limit`` characters.

    ``str(KeyError(k))`` is ``repr(k)``, unbounded for a huge or aliased key, so the
    arguments are rendered with :func:`~agentlab.env.render.bounded_repr` instead.
    """
    args = exc.args
    if len(args) == 1 and isinstance(args[0], str) and not isinstance(exc, KeyError):
        text = args[0]
        return text if len(text) <= limit else text[:limit] + "..."
    if len(args) == 1:
        return bounded_repr(args[0], limit)
    return bounded_repr(tuple(args[:8]), limit)


_BUILTIN_FNS: dict[str, Callable[..., Any]] = {
    "len": len, "min": min, "max": max, "sum": sum, "abs": abs, "round": round,
    "sorted": sorted, "reversed": reversed, "enumerate": enumerate, "zip": zip,
    "str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict,
    "tuple": tuple, "any": any, "all": all,
}  # fmt: skip
