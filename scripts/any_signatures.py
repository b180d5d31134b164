"""Count explicit ``Any`` in a source tree: everywhere, and on public signatures.

A public signature is a function or method whose name, class and module path have no
leading underscore (dunder methods such as ``__init__`` count). For each, every parameter
annotation and the return annotation that mention ``Any`` are counted, and separately
those that are ``Any`` as a whole (``Any``, ``Any | None``): the ones that say nothing.

Usage::

    python scripts/any_signatures.py agentlab            # the three counts
    python scripts/any_signatures.py agentlab --list     # + every whole-Any annotation
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

WHOLE = {"Any", "Any|None", "None|Any", "Optional[Any]"}


def _mentions_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.search(r"\bAny\b", node.value) is not None
    return any(
        (isinstance(n, ast.Name) and n.id == "Any")
        or (isinstance(n, ast.Attribute) and n.attr == "Any")
        for n in ast.walk(node)
    )


def _whole_any(node: ast.expr | None) -> bool:
    return node is not None and ast.unparse(node).strip("'\"").replace(" ", "") in WHOLE


def _public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def count(root: Path) -> tuple[int, int, int, int, list[str]]:
    """``(Any tokens, public signatures with Any, their Any annotations, whole-Any
    annotations, "path:line name [params]" of each signature with a whole-Any one)``."""
    tokens = sigs = annotations = whole = 0
    listing: list[str] = []
    for path in sorted(root.rglob("*.py")):
        src = path.read_text()
        tokens += len(re.findall(r"\bAny\b", src))
        parts = path.relative_to(root).parts
        if any(p.startswith("_") and p != "__init__.py" for p in parts):
            continue
        stack: list[tuple[list[ast.stmt], str]] = [(ast.parse(src).body, "")]
        while stack:
            body, prefix = stack.pop()
            for node in body:
                if isinstance(node, ast.ClassDef) and _public(node.name):
                    stack.append((node.body, f"{prefix}{node.name}."))
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _public(
                    node.name
                ):
                    a = node.args
                    params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
                    params += [p for p in (a.vararg, a.kwarg) if p is not None]
                    k = sum(_mentions_any(p.annotation) for p in params) + _mentions_any(
                        node.returns
                    )
                    w = [p.arg for p in params if _whole_any(p.annotation)]
                    w += ["->"] if _whole_any(node.returns) else []
                    sigs += k > 0
                    annotations += k
                    whole += len(w)
                    if w:
                        listing.append(f"{path}:{node.lineno} {prefix}{node.name} {w}")
    return tokens, sigs, annotations, whole, listing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--list", action="store_true", help="list every whole-Any annotation")
    args = ap.parse_args()
    tokens, sigs, annotations, whole, listing = count(args.root)
    print(f"Any tokens: {tokens}")
    print(f"public signatures with Any: {sigs}; Any annotations on them: {annotations}")
    print(f"annotations that are Any as a whole (Any, Any | None): {whole}")
    if args.list:
        print("\n".join(listing))


if __name__ == "__main__":
    main()
