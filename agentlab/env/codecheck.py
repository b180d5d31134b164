"""Static half of the sandbox: parse generated code and enforce the AST allow-list.

See :mod:`agentlab.env.sandbox` for the rules; this module only decides whether a program
may run at all (syntax, names, attributes, literal sizes, nesting), before any of it does.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from typing import Any

from agentlab.errors import UnsafeCodeError

__all__ = [
    "ALLOWED_METHODS",
    "PLAIN_TYPES",
    "SAFE_BUILTINS",
    "Limits",
    "check_code",
    "hash_key_ok",
    "is_private_name",
]


@dataclass(frozen=True)
class Limits:
    """Budgets for one program. Defaults suit 'call a few tools' snippets."""

    max_code_chars: int = 4000
    max_nodes: int = 600
    max_depth: int = 40
    max_steps: int = 20_000
    max_seconds: float = 1.0
    max_len: int = 10_000  # longest str/list/dict/range
    max_alloc: int = 200_000  # total items/chars created by one program
    max_int_bits: int = 4096
    max_tool_calls: int = 16
    max_printed: int = 4000
    max_deep: int = 100_000  # logical size a compare/hash/sort/render may walk
    # OS-level guards of an isolated run (SandboxPool): the worker is killed once the
    # program has run this long (tool time excluded), and may not map more than this.
    kill_after_seconds: float = 3.0
    max_memory_mb: int = 512
    # the whole request in a SandboxPool, tool calls and waiting for a worker included
    # (a tool that calls a router again shares its caller's deadline and tool-call count)
    max_request_seconds: float = 20.0


_ALLOWED_NODES: tuple[type[ast.AST], ...] = (
    ast.Module, ast.Expr, ast.Assign, ast.AugAssign, ast.Name, ast.Load, ast.Store,
    ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.BinOp, ast.UnaryOp, ast.BoolOp,
    ast.Compare, ast.IfExp, ast.If, ast.For, ast.While, ast.Break, ast.Continue, ast.Pass,
    ast.Call, ast.keyword, ast.Subscript, ast.Slice, ast.Attribute, ast.ListComp,
    ast.DictComp, ast.GeneratorExp, ast.comprehension, ast.JoinedStr, ast.FormattedValue,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd,
    ast.Not, ast.And, ast.Or, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In,
    ast.NotIn, ast.Is, ast.IsNot,
)  # fmt: skip

ALLOWED_METHODS: dict[type, frozenset[str]] = {
    str: frozenset({"lower", "upper", "strip", "lstrip", "rstrip", "split", "startswith",
                    "endswith", "join", "title", "capitalize", "count", "find", "isdigit",
                    "isalpha"}),
    list: frozenset({"append", "extend", "pop", "index", "count", "insert", "reverse"}),
    dict: frozenset({"get", "keys", "values", "items", "pop", "update", "setdefault"}),
    tuple: frozenset({"count", "index"}),
}  # fmt: skip
ALL_METHOD_NAMES = frozenset().union(*ALLOWED_METHODS.values())

PLAIN_TYPES = (type(None), bool, int, float, str, list, tuple, dict)

#: builtins generated code may call (pure; sizes checked by the interpreter)
SAFE_BUILTINS = frozenset({
    "len", "min", "max", "sum", "abs", "round", "sorted", "reversed", "enumerate", "zip",
    "range", "str", "int", "float", "bool", "list", "dict", "tuple", "any", "all", "print",
})  # fmt: skip


def is_private_name(name: str) -> bool:
    return name.startswith("_") and name != "_"


#: ints hash to themselves below this modulus (2**61 - 1 on 64-bit CPython), so distinct
#: keys in range have distinct hashes; above it ``hash(n) = n % modulus`` is the program's
#: to choose: 10k multiples of it all hash to 0, and building that dict took 13.8 s of C.
HASH_MODULUS = sys.hash_info.modulus


def hash_key_ok(key: Any) -> bool:
    """Whether ``key`` may be stored in a dict built from generated code (or sent by a
    worker): strings (hashes are salted per process), floats, bools, ``None``, ints of
    magnitude below :data:`HASH_MODULUS`, and tuples of those. A colliding full hash turns
    every insertion into a walk over all earlier keys (quadratic); in range, keys collide
    only on their low bits, which CPython's probe sequence resolves in a few steps."""
    if isinstance(key, int) and not isinstance(key, bool):
        return -HASH_MODULUS < key < HASH_MODULUS
    if isinstance(key, tuple):
        return all(hash_key_ok(k) for k in key)
    return True


def check_code(
    code: str, callables: frozenset[str] | set[str], limits: Limits = Limits()
) -> ast.Module:
    """Parse ``code`` and enforce the static allow-list.

    Args:
        code: the generated program.
        callables: names that may be called (tools and safe builtins).
        limits: size budgets.

    Returns:
        The parsed module.

    Raises:
        UnsafeCodeError: the first rule broken, with line number and the allowed set.
    """
    if not isinstance(code, str):
        raise UnsafeCodeError(f"code must be a string, got {type(code).__name__}")
    if len(code) > limits.max_code_chars:
        raise UnsafeCodeError(
            f"code is {len(code)} characters; the limit is {limits.max_code_chars}"
        )
    try:
        tree = ast.parse(code, mode="exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise UnsafeCodeError(f"code is not valid Python: {type(exc).__name__}: {exc}") from None
    assigned: set[str] = set()
    count = 0

    def fail(node: ast.AST, why: str) -> UnsafeCodeError:
        return UnsafeCodeError(f"line {getattr(node, 'lineno', '?')}: {why}")

    def visit(node: ast.AST, depth: int, parent: ast.AST | None) -> None:
        nonlocal count
        count += 1
        if count > limits.max_nodes:
            raise fail(node, f"program too large (more than {limits.max_nodes} syntax nodes)")
        if depth > limits.max_depth:
            raise fail(node, f"nesting deeper than {limits.max_depth} levels")
        if not isinstance(node, _ALLOWED_NODES):
            raise fail(
                node,
                f"{type(node).__name__} is not allowed; generated code may only assign "
                "variables, use if/for/while, plain data and call the exposed tools",
            )
        if isinstance(node, ast.Name):
            if is_private_name(node.id):
                raise fail(node, f"name {node.id!r} is not allowed (no underscore names)")
            if isinstance(node.ctx, ast.Store):
                if node.id in callables:
                    raise fail(node, f"cannot assign to the function name {node.id!r}")
                assigned.add(node.id)
        elif isinstance(node, ast.Attribute):
            if not (isinstance(parent, ast.Call) and parent.func is node):
                raise fail(
                    node, f"attribute access '.{node.attr}' is only allowed as a method call"
                )
            if node.attr not in ALL_METHOD_NAMES:
                raise fail(
                    node,
                    f"method '.{node.attr}()' is not allowed; allowed: {', '.join(sorted(ALL_METHOD_NAMES))}",
                )
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, (ast.Name, ast.Attribute)):
                raise fail(node, "only named functions and allow-listed methods can be called")
            if isinstance(node.func, ast.Name) and node.func.id not in callables:
                raise fail(
                    node,
                    f"function {node.func.id!r} is not available; callable: "
                    f"{', '.join(sorted(callables))}",
                )
            if any(k.arg is None for k in node.keywords):
                raise fail(node, "'**' arguments are not allowed")
        elif isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, (bytes, complex)) or v is Ellipsis:
                raise fail(node, f"{type(v).__name__} literals are not allowed")
            if isinstance(v, str) and len(v) > limits.max_len:
                raise fail(node, f"string literal of {len(v)} characters (limit {limits.max_len})")
            if isinstance(v, int) and v.bit_length() > limits.max_int_bits:
                raise fail(node, "integer literal too large")
        elif isinstance(node, ast.FormattedValue):
            if node.format_spec is not None:
                raise fail(node, "format specs in f-strings are not allowed")
        elif isinstance(node, ast.comprehension) and node.is_async:
            raise fail(node, "async comprehensions are not allowed")
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            pass
        for child in ast.iter_child_nodes(node):
            visit(child, depth + 1, node)

    visit(tree, 0, None)
    return tree
