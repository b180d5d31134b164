"""Personas for ``LLMAgent`` populations, from the shipped ``personas`` dataset."""

from __future__ import annotations

import random
from typing import Any

from agentlab.datasets import load

__all__ = ["load_personas"]


def load_personas(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` persona dicts: the ``personas`` dataset (240 rows) cycled in a seeded order."""
    rows = [dict(r) for r in load("personas")]
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    return [rows[order[i % len(rows)]] for i in range(n)]
