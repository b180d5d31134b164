"""Structured outputs of the AgentVerse-style workflow (pydantic models, built once).

Agreement, approval and the evaluator's score are structured fields, so with the simulated
backend early stopping happens at seeded, configurable rates (``sim_bool_p``), and with a
real model it happens when the model says so.
"""

from __future__ import annotations

import functools

from pydantic import BaseModel, Field, create_model

__all__ = [
    "DiscussionTurn",
    "Evaluation",
    "ExpertSpec",
    "PeerMessage",
    "Review",
    "recruitment_model",
]


class ExpertSpec(BaseModel):
    """One recruited expert: a short role description."""

    role: str = Field(description="the expertise this expert brings, a few words")


class DiscussionTurn(BaseModel):
    """A sequential-discussion turn: an opinion and whether the expert agrees so far."""

    opinion: str
    agree: bool


class Review(BaseModel):
    """A star reviewer's verdict on the solver's proposal."""

    critique: str
    approve: bool


class PeerMessage(BaseModel):
    """A full-mesh directed message to one peer, with the sender's consensus flag."""

    message: str
    agree: bool


class Evaluation(BaseModel):
    """The evaluator's score (0-100) and feedback for the next iteration."""

    score: int = Field(ge=0, le=100)
    feedback: str


@functools.lru_cache(maxsize=64)
def recruitment_model(n: int) -> type[BaseModel]:
    """``{"experts": [ExpertSpec] * n}`` with the length fixed in the schema (cached per n)."""
    return create_model(
        f"Recruitment{n}",
        experts=(list[ExpertSpec], Field(min_length=n, max_length=n)),
    )
