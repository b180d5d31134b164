"""The experts of a run and the structured outputs of the workflow (pydantic, built once).

Recruitment is structured (role, responsibilities, contract — the fields the original
orchestrator parses from its JSON reply). ``DiscussionTurn``, ``Review`` and
``PeerMessage`` are the turns of the ``style="structured"`` variant, where agreement is a
boolean field (``sim_bool_p`` on the simulator) instead of a marker in free text.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, create_model

__all__ = [
    "DiscussionTurn",
    "Evaluation",
    "Expert",
    "ExpertSpec",
    "PeerMessage",
    "RecruitedExpert",
    "Review",
    "expert_team_model",
    "recruitment_model",
]

Role = Literal["planner", "researcher", "executor", "critic", "summarizer"]


@dataclass(frozen=True)
class Expert:
    """A recruited expert of one iteration: agent name, role and its instructions."""

    name: str
    role: str
    responsibilities: str
    contract: str


class RecruitedExpert(BaseModel):
    """One expert as the orchestrator recruits it (the original's JSON fields)."""

    role: Role
    responsibilities: str
    contract: str


@functools.lru_cache(maxsize=64)
def expert_team_model(n: int) -> type[BaseModel]:
    """``{"experts": [RecruitedExpert] * n}`` with the length fixed (``force_agent_count``)."""
    return create_model(
        f"ExpertTeam{n}",
        experts=(list[RecruitedExpert], Field(min_length=n, max_length=n)),
    )


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
