"""The package's shape: no import circles inside a package, no module past 600 lines.

``lint-imports`` checks the layers *between* packages; it does not see a circle between two
modules of one package (``agents/base`` -> ``registry`` -> ``base``). This test builds the
import graph with grimp (the library under import-linter; every import counts: module
level, inside functions, and under ``TYPE_CHECKING``), collapses each package's
sub-packages to one node, and lists every strongly connected component of more than one
module. The exceptions below are circles in files other engineers own this round; each
names who removes it.
"""

from __future__ import annotations

from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1] / "agentlab"

#: circles still allowed, each with who removes it (compared exactly: a circle that is
#: gone must be removed from here, a new one fails)
KNOWN_CIRCLES: dict[frozenset[str], str] = {}

#: modules allowed past MAX_LINES, each being split by its owner this round
MAX_LINES = 600
KNOWN_LARGE: dict[str, str] = {}


def _circles() -> set[frozenset[str]]:
    graph = grimp.build_graph("agentlab")
    found: set[frozenset[str]] = set()
    for pkg in sorted(m for m in graph.modules if graph.find_children(m)):
        prefix = pkg + "."

        def node(module: str, prefix: str = prefix) -> str | None:
            if not module.startswith(prefix):
                return None
            return prefix + module[len(prefix) :].split(".")[0]

        edges: dict[str, set[str]] = {k: set() for k in graph.find_children(pkg)}
        for m in graph.modules:
            src = node(m)
            if src is None:
                continue
            for target in graph.find_modules_directly_imported_by(m):
                dst = node(target)
                if dst is not None and dst != src:
                    edges[src].add(dst)
        found |= {c for c in _components(edges) if len(c) > 1}
    return found


def _components(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        x = stack.pop()
                        on_stack.discard(x)
                        comp.add(x)
                        if x == v:
                            break
                    out.append(frozenset(comp))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on_stack.add(w)
                work.append((w, iter(sorted(edges[w]))))
            elif w in on_stack:
                low[v] = min(low[v], index[w])
    return out


def test_no_import_circles_inside_packages() -> None:
    found = _circles()
    new = sorted(sorted(c) for c in found - KNOWN_CIRCLES.keys())
    gone = sorted(sorted(c) for c in KNOWN_CIRCLES.keys() - found)
    assert not new, f"import circles inside a package: {new}"
    assert not gone, f"circles gone: remove them from KNOWN_CIRCLES: {gone}"


def test_components_find_a_circle_and_ignore_a_chain() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert [c for c in _components(edges) if len(c) > 1] == [frozenset("abc")]


def test_no_module_past_the_size_limit() -> None:
    sizes = {
        p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
        for p in ROOT.rglob("*.py")
    }
    large = {rel: n for rel, n in sizes.items() if n > MAX_LINES and rel not in KNOWN_LARGE}
    assert not large, f"modules over {MAX_LINES} lines (split by responsibility): {large}"
    done = sorted(rel for rel in KNOWN_LARGE if sizes.get(rel, 0) <= MAX_LINES)
    assert not done, f"now within {MAX_LINES} lines: remove from KNOWN_LARGE: {done}"
