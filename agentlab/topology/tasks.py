"""Task pool of the topology study: ``agentlab.datasets.load("topology_tasks")`` or a fallback.

A task is a dict with ``id``, ``category`` and ``prompt``. The small built-in pool is used
when the datasets package (or its ``topology_tasks`` entry) is not available.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from agentlab.errors import ConfigError

__all__ = ["FALLBACK_TASKS", "load_tasks"]

FALLBACK_TASKS: tuple[dict[str, str], ...] = (
    {"id": "t01", "category": "coding", "prompt": "Write a function that merges overlapping intervals."},
    {"id": "t02", "category": "coding", "prompt": "Design a rate limiter for a public REST API."},
    {"id": "t03", "category": "math", "prompt": "How many ways can 10 be written as an ordered sum of 1s and 2s?"},
    {"id": "t04", "category": "math", "prompt": "Estimate the probability two of 30 people share a birthday."},
    {"id": "t05", "category": "writing", "prompt": "Draft a one-page brief on heat-pump subsidies."},
    {"id": "t06", "category": "writing", "prompt": "Write a product announcement for an offline map app."},
    {"id": "t07", "category": "planning", "prompt": "Plan a three-day workshop for 40 researchers."},
    {"id": "t08", "category": "planning", "prompt": "Plan the migration of a monolith to two services."},
    {"id": "t09", "category": "reasoning", "prompt": "Which of three suppliers should a bakery choose, and why?"},
    {"id": "t10", "category": "reasoning", "prompt": "Diagnose why nightly backups started to fail."},
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
