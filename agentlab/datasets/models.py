"""Pydantic models of the shipped datasets (mirroring ``datasets/*.schema.json``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["BigFive", "Persona", "TopologyTask"]

_Unit = Field(ge=0.0, le=1.0)


class BigFive(BaseModel):
    """Big Five personality scores in [0, 1]."""

    model_config = ConfigDict(extra="forbid")
    openness: float = _Unit
    conscientiousness: float = _Unit
    extraversion: float = _Unit
    agreeableness: float = _Unit
    neuroticism: float = _Unit


class Persona(BaseModel):
    """One synthetic resident of Larkhaven (``personas.jsonl``)."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1] = 1
    id: str = Field(pattern=r"^p[0-9]{3}$")
    name: str = Field(min_length=3)
    age: int = Field(ge=18, le=100)
    occupation: str = Field(min_length=2)
    neighbourhood: str
    interests: list[str] = Field(min_length=2, max_length=8)
    traits: list[str] = Field(min_length=1, max_length=5)
    big_five: BigFive
    style: Literal[
        "activist", "analytical", "chatty", "enthusiastic", "formal", "sarcastic",
        "storyteller", "terse",
    ]  # fmt: skip
    style_hint: str
    bio: str = Field(min_length=10)
    political_leaning: float = Field(ge=-1.0, le=1.0)
    stances: dict[str, float] = Field(min_length=1)
    activity: float = _Unit


class TopologyTask(BaseModel):
    """One coordination-topology task (``topology_tasks.jsonl``)."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1] = 1
    id: str = Field(pattern=r"^(math|research|consulting|coding)-[0-9]{2}$")
    category: Literal["math", "research", "consulting", "coding"]
    title: str = Field(min_length=3)
    prompt: str = Field(min_length=20)
    expected_output: str | None
    rubric: list[str] = Field(min_length=1)
    difficulty: Literal["easy", "medium", "hard"]
