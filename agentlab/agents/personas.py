"""Personas for ``LLMAgent`` populations, from the ``personas`` dataset.

Falls back to a small generated set (with a warning) when ``agentlab.datasets`` is not
available, so a society can always be built offline.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

__all__ = ["load_personas"]

_FIRST = [
    "Ada",
    "Ben",
    "Chloe",
    "Dev",
    "Eli",
    "Fay",
    "Gus",
    "Hana",
    "Ivo",
    "Jun",
    "Kai",
    "Lia",
    "Mo",
    "Nia",
    "Oto",
    "Pia",
    "Rex",
    "Sol",
    "Tam",
    "Uma",
]
_JOBS = [
    "teacher",
    "nurse",
    "baker",
    "coder",
    "farmer",
    "artist",
    "student",
    "chef",
    "pilot",
    "writer",
]
_TRAITS = [
    "curious",
    "kind",
    "blunt",
    "witty",
    "shy",
    "bold",
    "calm",
    "chatty",
    "careful",
    "playful",
]
_TOPICS = [
    "music",
    "cooking",
    "sport",
    "science",
    "politics",
    "books",
    "travel",
    "games",
    "gardens",
    "films",
]


def _fallback(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(max(n, 1)):
        out.append(
            {
                "name": f"{rng.choice(_FIRST)} {chr(65 + i % 26)}.",
                "occupation": f"A {rng.choice(_JOBS)}.",
                "traits": f"{rng.choice(_TRAITS)} and {rng.choice(_TRAITS)}.",
                "interests": f"Likes {rng.choice(_TOPICS)} and {rng.choice(_TOPICS)}.",
            }
        )
    return out


def load_personas(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` persona dicts: the ``personas`` dataset cycled in a seeded order."""
    rows: list[dict[str, Any]] | None = None
    try:
        from agentlab import datasets as _ds  # type: ignore[attr-defined]

        data: Any = _ds.load("personas")
        if hasattr(data, "to_dict"):
            data = data.to_dict(orient="records")
        rows = [dict(r) for r in data]
    except (ImportError, AttributeError, LookupError, OSError) as exc:
        warnings.warn(
            f"personas dataset unavailable ({exc}); using generated personas",
            stacklevel=2,
        )
    if not rows:
        return _fallback(n, seed)[:n]
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    return [rows[order[i % len(rows)]] for i in range(n)]
