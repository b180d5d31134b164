"""Span trees: ids derived from names, roots derived from their children, a tree check.

A society writes one trace per tick and an experiment one per repetition, each with a real
root span. A thread system cannot: a thread outlives any slice, any driver and any process
(step-mode workers, a restart after ``kill -9``), so no one is there to end its span. Its
slices therefore point at a parent whose ids are *derived* from (run, thread id)
(:func:`derived_ids`: every worker computes the same ones), and :func:`complete_trees`
adds that parent when spans are exported: an ``agent.thread`` span from the first slice's
start to the last one's end, marked ``agentlab.derived``. Its times are its children's,
nothing more.

```python
rows = complete_trees(open_run(run_dir).df("spans").to_dict("records"))
tree_stats(rows)  # {"spans": 40, "traces": 3, "roots": 3, "dangling": 0, "multi_root": 0}
```
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["THREAD_SPAN", "complete_trees", "derived_ids", "tree_stats"]

#: the name of a thread's derived root span
THREAD_SPAN = "agent.thread"
_THREAD_KEY = "agentlab.thread.id"


def derived_ids(*parts: str) -> tuple[str, str]:
    """``(trace_id, span_id)`` (32 and 16 hex digits) fixed by ``parts``: every process
    that names the same thing gets the same ids."""
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=24).hexdigest()
    return digest[:32], digest[32:]


def complete_trees(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``rows`` plus the derived root of each thread whose slices point at it.

    Only parents named by spans carrying ``agentlab.thread.id`` are added; any other
    missing parent (a crashed process's lost buffer) is left missing, as it is.
    """
    out = list(rows)
    have = {r["span_id"] for r in out}
    kids: dict[str, list[Mapping[str, Any]]] = {}
    for r in out:
        parent = _parent(r)
        if parent and parent not in have and _THREAD_KEY in (r.get("attributes") or {}):
            kids.setdefault(parent, []).append(r)
    for span_id, children in kids.items():
        first = children[0]
        tid = first["attributes"][_THREAD_KEY]
        ends = [float(c["end"] if c.get("end") is not None else c["start"]) for c in children]
        out.append({
            "trace_id": first["trace_id"], "span_id": span_id, "parent": None,
            "name": THREAD_SPAN, "kind": "internal",
            "start": min(float(c["start"]) for c in children), "end": max(ends),
            "status": "unset", "status_message": None,
            "attributes": {_THREAD_KEY: tid, "gen_ai.conversation.id": tid,
                           "gen_ai.agent.id": tid, "agentlab.derived": True,
                           "agentlab.slices": len(children)},
            "events": [], "_shard": first.get("_shard"),
        })  # fmt: skip
    return out


def _parent(row: Mapping[str, Any]) -> str | None:
    """The parent span id (``None`` for a root; pandas gives a missing one as NaN)."""
    parent = row.get("parent")
    return parent if isinstance(parent, str) and parent else None


def tree_stats(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How tree-shaped the spans are: ``spans``, ``traces``, ``roots``, ``dangling``
    (spans whose parent is not among them) and ``multi_root`` (traces with more than one
    root). A whole set of trees has ``roots == traces`` and no dangling parent."""
    rows = list(rows)
    ids = {r["span_id"] for r in rows}
    roots: dict[str, int] = {}
    dangling = 0
    for r in rows:
        parent = _parent(r)
        if not parent:
            roots[r["trace_id"]] = roots.get(r["trace_id"], 0) + 1
        elif parent not in ids:
            dangling += 1
    return {
        "spans": len(rows),
        "traces": len({r["trace_id"] for r in rows}),
        "roots": sum(roots.values()),
        "dangling": dangling,
        "multi_root": sum(n > 1 for n in roots.values()),
    }
