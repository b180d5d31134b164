"""Vote helpers: tallies and majority with seeded tie-breaking.

Abstentions (``None``) are counted separately and never win. Ties are broken by a seeded
RNG over the *sorted* tied candidates, so the same seed always picks the same winner
regardless of dict or arrival order.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["VoteResult", "majority_vote", "tally"]


@dataclass(frozen=True)
class VoteResult:
    """Outcome of a vote.

    Attributes:
        winner: the chosen candidate, or ``None`` if nobody cast a valid vote.
        counts: votes per candidate (sorted by count, then name).
        abstentions: voters who abstained.
        tied: candidates that shared the top count (length > 1 means a tie was broken).
    """

    winner: str | None
    counts: tuple[tuple[str, int], ...]
    abstentions: tuple[str, ...]
    tied: tuple[str, ...]


def tally(votes: Mapping[str, str | None] | Iterable[str | None]) -> Counter[str]:
    """Count votes, ignoring abstentions (``None``)."""
    values = votes.values() if isinstance(votes, Mapping) else votes
    return Counter(v for v in values if v is not None)


def majority_vote(
    votes: Mapping[str, str | None], seed: int | random.Random | None = 0
) -> VoteResult:
    """Plurality winner of ``votes`` (voter -> candidate or ``None``), ties broken by seed.

    Args:
        votes: each voter's choice; ``None`` is an abstention.
        seed: an int or a ``random.Random`` (use the game's RNG to keep one stream).
    """
    counts = tally(votes)
    abstentions = tuple(sorted(k for k, v in votes.items() if v is None))
    if not counts:
        return VoteResult(None, (), abstentions, ())
    top = max(counts.values())
    tied = tuple(sorted(c for c, k in counts.items() if k == top))
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    winner = tied[0] if len(tied) == 1 else rng.choice(tied)
    ordered = tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return VoteResult(winner, ordered, abstentions, tied)
