"""Task pool of the topology study: ``agentlab.datasets.load("topology_tasks")`` or a fallback.

A task is a dict with ``id``, ``category`` and ``prompt``. The ``topology_tasks`` dataset
has the paper's four categories (math, research, consulting, coding; 25 each); the small
built-in pool, with the same categories, is used when that dataset is not available.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from agentlab.errors import ConfigError

__all__ = ["FALLBACK_TASKS", "load_tasks"]

FALLBACK_TASKS: tuple[dict[str, str], ...] = (
    {"id": "f-math-1", "category": "math", "prompt": "How many ways can 10 be written as an ordered sum of 1s and 2s?"},
    {"id": "f-math-2", "category": "math", "prompt": "Estimate the probability that two of 30 people share a birthday."},
    {"id": "f-research-1", "category": "research", "prompt": "What is known about how batching affects LLM serving latency?"},
    {"id": "f-research-2", "category": "research", "prompt": "Summarise the evidence on heat pumps in cold climates."},
    {"id": "f-consulting-1", "category": "consulting", "prompt": "Plan the migration of a monolith to two services for a 12-person team."},
    {"id": "f-consulting-2", "category": "consulting", "prompt": "Which of three suppliers should a bakery choose, and why?"},
    {"id": "f-coding-1", "category": "coding", "prompt": "Write a function that merges overlapping intervals."},
    {"id": "f-coding-2", "category": "coding", "prompt": "Design a rate limiter for a public REST API."},
)  # fmt: skip


def _check(tasks: Sequence[Any]) -> list[dict[str, Any]]:
    out = []
    for t in tasks:
        if not isinstance(t, dict) or not {"id", "prompt"} <= t.keys():
            raise ConfigError(f"task {t!r} must be a dict with at least 'id' and 'prompt'")
        out.append(dict(t))
    if not out:
        raise ConfigError("the task list is empty; pass tasks=[{'id':..., 'prompt':...}, ...]")
    return out


def load_tasks(tasks: Sequence[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The given tasks, else the ``topology_tasks`` dataset, else :data:`FALLBACK_TASKS`."""
    if tasks is not None:
        return _check(tasks)
    try:
        datasets = importlib.import_module("agentlab.datasets")
        loaded = datasets.load("topology_tasks")
    except (ImportError, AttributeError, KeyError, FileNotFoundError, ConfigError):
        loaded = None
    if loaded:
        rows = loaded.to_dict("records") if hasattr(loaded, "to_dict") else list(loaded)
        return _check(rows)
    return _check(FALLBACK_TASKS)
