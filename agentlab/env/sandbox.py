"""A bounded interpreter for LLM-generated tool code.

Generated code is hostile. It is never handed to ``exec``: it is parsed, checked against
an AST allow-list, then *interpreted* node by node by :class:`Sandbox`, which

- knows only plain data (None/bool/int/float/str/list/tuple/dict), the exposed tools and a
  few pure builtins; names with a leading underscore, imports, ``def``/``lambda``/``class``,
  ``with``/``try``/``global``, ``yield``/``await``, ``*``-unpacking do not exist;
- allows attribute syntax only as a call of an allow-listed method on a plain ``str``,
  ``list``, ``dict`` or ``tuple`` (``s.lower()``, ``d.get("k")``) — no attribute ever yields
  a value, so there is no path to ``__class__``/``__globals__``/``__subclasses__``, and
  ``str.format``/``format_map`` (which do attribute lookups) are not on the list;
- never lets a function be a value (no ``f = post``, ``sorted(xs, key=post)``);
- counts every evaluated node (and the size of builtin inputs) against a step budget, so
  ``while True: pass`` stops deterministically; a wall-clock deadline is a second guard;
- checks sizes *before* allocating (``'a' * 10**9``, ``[0] * 10**9``, ``10**10**10``,
  ``range(10**12)``) and keeps a running allocation budget across the whole program;
- bounds nesting depth statically, so deep expressions cannot exhaust the C stack;
- prices every operation that walks a value deeply (``==``/``<``/``in`` on containers,
  hashing a tuple key, ``sorted``/``min``/``max``/``dict``, ``list.index``/``count``,
  rendering with ``str``/``print``/f-strings) by the value's *logical* size — shared
  sub-lists count every time they recur — and refuses it above ``Limits.max_deep``, so
  aliasing (``a = [a, a]`` forty times) cannot turn one C-level step into 10¹² of work;
- renders exception messages with a character budget (a ``KeyError`` of a huge key).

Run hostile code through :class:`~agentlab.env.sandbox_pool.SandboxPool`, which runs this
interpreter in worker processes with OS limits, so even a bug here costs one request.

Anything outside these rules raises :class:`~agentlab.errors.UnsafeCodeError` with a
message saying what was refused and what is allowed.
"""

from __future__ import annotations

import ast
import operator
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentlab.env.codecheck import (
    ALLOWED_METHODS,
    PLAIN_TYPES,
    SAFE_BUILTINS,
    Limits,
    check_code,
    is_private_name,
)
from agentlab.env.render import TooLarge, logical_size
from agentlab.env.sandbox_budget import DEEP_BUILTINS, DEEP_METHODS, Budget, exception_text
from agentlab.errors import ToolError, UnsafeCodeError

__all__ = ["SAFE_BUILTINS", "Limits", "Sandbox", "SandboxResult", "check_code"]

ToolFn = Callable[[list[Any], dict[str, Any]], Awaitable[Any]]
_PLAIN = PLAIN_TYPES

_CMPOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}  # fmt: skip


@dataclass
class SandboxResult:
    """Outcome of one program: the last expression's value, printed lines, steps used."""

    value: Any
    printed: list[str] = field(default_factory=list)
    steps: int = 0
    tool_calls: int = 0


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class Sandbox:
    """Run checked code with the given tools.

    Args:
        tools: name -> ``async fn(args, kwargs)``; results should be plain data (they are
            checked; anything else is refused).
        limits: budgets.
    """

    def __init__(self, tools: Mapping[str, ToolFn], limits: Limits | None = None) -> None:
        bad = [n for n in tools if is_private_name(n) or n in SAFE_BUILTINS]
        if bad:
            raise ToolError(f"tool names {bad} clash with builtins or start with '_'")
        self.tools = dict(tools)
        self.limits = limits or Limits()
        self.callables = frozenset(self.tools) | SAFE_BUILTINS

    async def run(self, code: str) -> SandboxResult:
        """Check and interpret ``code``.

        Raises:
            UnsafeCodeError: disallowed syntax or a budget exceeded.
            ToolError: the program failed at run time (e.g. ``KeyError``) or a tool refused.
        """
        tree = check_code(code, self.callables, self.limits)
        run = _Run(self)
        try:
            value = await run.block(tree.body)
        except (_Break, _Continue):
            raise UnsafeCodeError("'break'/'continue' outside a loop") from None
        except (UnsafeCodeError, ToolError):
            raise
        except RecursionError:
            raise UnsafeCodeError("evaluation nested too deeply") from None
        except MemoryError:
            raise UnsafeCodeError("memory budget exceeded") from None
        except Exception as exc:  # the program's own bug: report it, do not crash the host
            raise ToolError(
                f"generated code failed: {type(exc).__name__}: {exception_text(exc)}"
            ) from None
        # The value leaves the sandbox (observation, run log, repr, pickle to Ray): an
        # aliased value of logical size 10**12 must not leave unpriced, inline or not.
        try:
            logical_size(value, self.limits.max_alloc)
        except TooLarge:
            raise UnsafeCodeError(
                "the program's value is too large to return (logical size above "
                f"{self.limits.max_alloc})"
            ) from None
        return SandboxResult(value, run.printed, run.steps, run.tool_calls)


class _Run(Budget):
    """State of one program run (kept apart from :class:`Sandbox` so runs never share)."""

    def __init__(self, box: Sandbox) -> None:
        super().__init__(box.limits)
        self.box = box
        self.vars: dict[str, Any] = {}
        self.tool_calls = 0
        self.printed: list[str] = []
        self.printed_chars = 0

    # --- statements ----------------------------------------------------------------------

    async def block(self, body: list[ast.stmt]) -> Any:
        value = None
        for stmt in body:
            value = await self.stmt(stmt)
        return value

    async def stmt(self, node: ast.stmt) -> Any:
        self.tick()
        if isinstance(node, ast.Expr):
            return await self.expr(node.value)
        if isinstance(node, ast.Assign):
            value = await self.expr(node.value)
            for target in node.targets:
                await self.assign(target, value)
            return None
        if isinstance(node, ast.AugAssign):
            current = await self.expr(_as_load(node.target))
            value = self.binop(type(node.op), current, await self.expr(node.value))
            await self.assign(node.target, value)
            return None
        if isinstance(node, ast.If):
            branch = node.body if await self.expr(node.test) else node.orelse
            return await self.block(branch)
        if isinstance(node, ast.While):
            while await self.expr(node.test):
                try:
                    await self.block(node.body)
                except _Break:
                    return None
                except _Continue:
                    continue
            return await self.block(node.orelse)
        if isinstance(node, ast.For):
            for item in self.iterable(await self.expr(node.iter)):
                await self.assign(node.target, item)
                try:
                    await self.block(node.body)
                except _Break:
                    return None
                except _Continue:
                    continue
            return await self.block(node.orelse)
        if isinstance(node, ast.Break):
            raise _Break
        if isinstance(node, ast.Continue):
            raise _Continue
        if isinstance(node, ast.Pass):
            return None
        raise UnsafeCodeError(f"{type(node).__name__} is not allowed")

    async def assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.vars[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = list(self.iterable(value))
            if len(items) != len(target.elts):
                raise ToolError(f"cannot unpack {len(items)} values into {len(target.elts)}")
            for t, v in zip(target.elts, items, strict=True):
                await self.assign(t, v)
        elif isinstance(target, ast.Subscript):
            container = await self.expr(target.value)
            if not isinstance(container, (list, dict)):
                raise UnsafeCodeError(f"cannot assign into {type(container).__name__}")
            key = await self.expr(target.slice)
            if isinstance(container, dict):
                self.store_keys("hashing a key", [key])
            container[key] = value
            self.charge(container)
        else:
            raise UnsafeCodeError(f"cannot assign to {type(target).__name__}")

    def iterable(self, value: Any) -> Any:
        if isinstance(value, dict):
            return list(value)
        if not isinstance(value, (list, tuple, str)):
            raise ToolError(f"cannot iterate over {type(value).__name__}")
        return value

    # --- expressions ---------------------------------------------------------------------

    async def expr(self, node: ast.expr) -> Any:
        self.tick()
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in self.vars:
                return self.vars[node.id]
            if node.id in self.box.callables:
                raise UnsafeCodeError(
                    f"function {node.id!r} can only be called, not used as a value"
                )
            raise ToolError(f"name {node.id!r} is not defined")
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [await self.expr(e) for e in node.elts]
            return self.charge(items if isinstance(node, ast.List) else tuple(items))
        if isinstance(node, ast.Dict):
            out: dict[Any, Any] = {}
            for k, v in zip(node.keys, node.values, strict=True):
                if k is None:
                    raise UnsafeCodeError("'**' in dict literals is not allowed")
                key = await self.expr(k)
                self.store_keys("hashing a key", [key])
                out[key] = await self.expr(v)
            return self.charge(out)
        if isinstance(node, ast.BinOp):
            left = await self.expr(node.left)
            return self.binop(type(node.op), left, await self.expr(node.right))
        if isinstance(node, ast.UnaryOp):
            v = await self.expr(node.operand)
            if isinstance(node.op, ast.Not):
                return not v
            return self.charge(-v if isinstance(node.op, ast.USub) else +v)
        if isinstance(node, ast.BoolOp):
            is_and = isinstance(node.op, ast.And)
            result: Any = None
            for e in node.values:
                result = await self.expr(e)
                if (not result) if is_and else result:
                    return result
            return result
        if isinstance(node, ast.Compare):
            left = await self.expr(node.left)
            for op, comp in zip(node.ops, node.comparators, strict=True):
                right = await self.expr(comp)
                if not isinstance(op, (ast.Is, ast.IsNot)):
                    self.deep("comparison", left, right)
                if not _CMPOPS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return await self.expr(node.body if await self.expr(node.test) else node.orelse)
        if isinstance(node, ast.Subscript):
            container = await self.expr(node.value)
            if not isinstance(container, (list, tuple, dict, str)):
                raise ToolError(f"{type(container).__name__} is not subscriptable")
            key = await self.expr(node.slice)
            if isinstance(container, dict):
                self.deep("hashing a key", key)
            value = container[key]
            return self.charge(value) if isinstance(key, slice) else self.check(value)
        if isinstance(node, ast.Slice):
            parts = [
                None if p is None else await self.expr(p)
                for p in (node.lower, node.upper, node.step)
            ]
            return slice(*parts)
        if isinstance(node, ast.JoinedStr):
            pieces = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    pieces.append(str(v.value))
                elif isinstance(v, ast.FormattedValue):
                    x = await self.expr(v.value)
                    self.render_size(x)
                    pieces.append(repr(x) if v.conversion == ord("r") else str(x))
                    self.tick(len(pieces[-1]) // 64)
            return self.charge("".join(pieces))
        if isinstance(node, ast.Call):
            return await self.call(node)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            results: list[Any] = []
            await self.comprehension(node.generators, 0, lambda: self.expr(node.elt), results)
            return self.charge(results)
        if isinstance(node, ast.DictComp):
            pairs: list[Any] = []

            async def pair() -> Any:
                return (await self.expr(node.key), await self.expr(node.value))

            await self.comprehension(node.generators, 0, pair, pairs)
            self.store_keys("hashing keys", [k for k, _ in pairs])
            return self.charge(dict(pairs))
        raise UnsafeCodeError(f"{type(node).__name__} is not allowed")

    async def comprehension(
        self,
        gens: list[ast.comprehension],
        i: int,
        elt: Callable[[], Awaitable[Any]],
        out: list[Any],
    ) -> None:
        gen = gens[i]
        for item in self.iterable(await self.expr(gen.iter)):
            await self.assign(gen.target, item)
            if all([await self.expr(c) for c in gen.ifs]):
                if i + 1 < len(gens):
                    await self.comprehension(gens, i + 1, elt, out)
                else:
                    out.append(await elt())
                    self.size(len(out), "comprehension")
                    self.alloc += 1
                    if self.alloc > self.lim.max_alloc:
                        raise UnsafeCodeError(
                            f"memory budget of {self.lim.max_alloc} items/characters exceeded"
                        )

    async def call(self, node: ast.Call) -> Any:
        args = [await self.expr(a) for a in node.args]
        kwargs = {k.arg: await self.expr(k.value) for k in node.keywords if k.arg is not None}
        func = node.func
        if isinstance(func, ast.Attribute):
            obj = await self.expr(func.value)
            allowed = ALLOWED_METHODS.get(type(obj), frozenset())
            if func.attr not in allowed:
                raise UnsafeCodeError(
                    f"method '.{func.attr}()' is not allowed on {type(obj).__name__}"
                )
            self.tick(
                1
                + sum(len(x) for x in (obj, *args) if isinstance(x, (str, list, tuple, dict))) // 64
            )
            if func.attr in {"append", "insert"} or func.attr in {"extend", "update"}:
                extra = (
                    1
                    if func.attr in {"append", "insert"}
                    else len(args[0])
                    if args and hasattr(args[0], "__len__")
                    else 0
                )
                self.size(len(obj) + extra, type(obj).__name__)
            if func.attr == "join" and isinstance(obj, str):
                self.check_join(obj, args, kwargs)
            if func.attr in DEEP_METHODS:
                self.deep(f".{func.attr}()", obj if isinstance(obj, (list, tuple)) else None, *args)
            if isinstance(obj, dict) and func.attr in {"setdefault", "update"} and args:
                self.store_keys(f".{func.attr}()", _new_keys(func.attr, args[0]))
            result = getattr(obj, func.attr)(*args, **kwargs)
            if func.attr in {"keys", "values", "items"}:
                result = list(result)
            if func.attr in {"append", "extend", "insert", "update", "setdefault"}:
                self.charge(obj)
            return self.charge(result)
        assert isinstance(func, ast.Name)  # guaranteed by check_code
        name = func.id
        if name in self.box.tools:
            # tools validate (pydantic) and may serialise their arguments: price the walk
            self.deep(f"arguments of {name}()", args, kwargs)
            self.tool_calls += 1
            if self.tool_calls > self.lim.max_tool_calls:
                raise UnsafeCodeError(
                    f"more than {self.lim.max_tool_calls} tool calls in one program"
                )
            t0 = time.monotonic()
            try:
                result = await self.box.tools[name](args, kwargs)
            finally:
                self.tool_time += time.monotonic() - t0
            return plain_copy(result, name)
        return self.builtin(name, args, kwargs)

    def builtin(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        cost = sum(len(a) for a in args if isinstance(a, (str, list, tuple, dict)))
        self.tick(1 + cost // 8)
        if name in {"print", "str"}:
            for a in args:
                self.render_size(a)
        if name == "round" and len(args) > 1 and (type(args[1]) is not int or abs(args[1]) > 30):
            raise UnsafeCodeError("round() ndigits must be an integer between -30 and 30")
        if name == "print":
            text = " ".join(str(a) for a in args)
            self.printed_chars += len(text)
            if self.printed_chars > self.lim.max_printed:
                raise UnsafeCodeError(f"printed more than {self.lim.max_printed} characters")
            self.printed.append(text)
            return None
        if name == "range":
            if kwargs or not 1 <= len(args) <= 3 or not all(type(a) is int for a in args):
                raise ToolError("range() takes 1-3 integer arguments")
            r = range(*args)
            self.size(len(r), "range")
            return self.charge(list(r))
        if name in {"sorted", "min", "max"} and "key" in kwargs:
            raise UnsafeCodeError(f"{name}(key=...) is not allowed")
        if name in DEEP_BUILTINS:
            self.deep(f"{name}()", *args, *kwargs.values())
        if name == "dict" and args:
            self.store_keys("dict()", _new_keys("update", args[0]))
        if (
            name == "sum"
            and (len(args) > 1 or kwargs)
            and not isinstance((args[1:] or [kwargs.get("start", 0)])[0], (int, float))
        ):
            raise UnsafeCodeError("sum() start must be a number")
        if (
            name in {"int", "float", "str"}
            and args
            and isinstance(args[0], str)
            and len(args[0]) > 1000
            and name != "str"
        ):
            raise UnsafeCodeError(f"{name}() of a string longer than 1000 characters")
        fn = _BUILTIN_FNS[name]
        result = fn(*args, **kwargs)
        if name in {"reversed", "enumerate", "zip"}:
            result = [tuple(x) if isinstance(x, tuple) else x for x in result]
        return self.charge(result)


_BUILTIN_FNS: dict[str, Callable[..., Any]] = {
    "len": len, "min": min, "max": max, "sum": sum, "abs": abs, "round": round,
    "sorted": sorted, "reversed": reversed, "enumerate": enumerate, "zip": zip,
    "str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict,
    "tuple": tuple, "any": any, "all": all,
}  # fmt: skip


def _new_keys(how: str, source: Any) -> list[Any]:
    """The keys ``d.update(source)`` / ``dict(source)`` / ``d.setdefault(source)`` would
    store (pairs whose first item is the key; a dict's keys; anything else: ``source``)."""
    if how == "setdefault":
        return [source]
    if isinstance(source, dict):
        return list(source)
    if isinstance(source, (list, tuple)):
        return [p[0] for p in source if isinstance(p, (list, tuple)) and len(p) == 2]
    return []


def _as_load(target: ast.expr) -> ast.expr:
    node = ast.fix_missing_locations(ast.copy_location(_copy_with_load(target), target))
    return node


def _copy_with_load(target: ast.expr) -> ast.expr:
    if isinstance(target, ast.Name):
        return ast.Name(id=target.id, ctx=ast.Load())
    if isinstance(target, ast.Subscript):
        return ast.Subscript(value=target.value, slice=target.slice, ctx=ast.Load())
    raise UnsafeCodeError(f"cannot augment-assign to {type(target).__name__}")


def plain_copy(value: Any, tool: str, depth: int = 0) -> Any:
    """A copy of a tool's result that generated code may hold (plain data only).

    Raises:
        ToolError: the result holds a non-plain object or is nested too deeply.
    """
    # Tools are trusted, but their results enter the sandbox: only plain data may pass, and
    # as a copy, so generated code can never mutate the env's own lists and dicts.
    if depth > 20:
        raise ToolError(f"result of tool {tool!r} is nested too deeply")
    if isinstance(value, list):
        return [plain_copy(v, tool, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(plain_copy(v, tool, depth + 1) for v in value)
    if isinstance(value, dict):
        return {
            plain_copy(k, tool, depth + 1): plain_copy(v, tool, depth + 1) for k, v in value.items()
        }
    if not isinstance(value, _PLAIN):
        raise ToolError(
            f"tool {tool!r} returned {type(value).__name__}; tools used from generated code "
            "must return plain data (dict/list/str/number/bool/None)"
        )
    return value
