"""Structured output: validation, one repair retry, and every failure policy."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel, ValidationError

from agentlab.errors import ConfigError, RateLimitError, StructuredOutputError
from agentlab.messaging import FailurePolicy, choice_model, complete_structured, json_schema


class Vote(BaseModel):
    target: Literal["ann", "bob"]
    agree: bool


GOOD = json.dumps({"target": "bob", "agree": True})
BAD = json.dumps({"target": "zed", "agree": "maybe"})


async def test_valid_first_try(scripted) -> None:
    c = scripted([GOOD])
    res = await complete_structured(c, [{"role": "user", "content": "vote"}], Vote, labels={"s": 1})
    assert res.status == "ok" and res.ok and res.value == Vote(target="bob", agree=True)
    assert res.attempts == 1 and c.calls[0]["response_format"] is Vote
    assert c.calls[0]["labels"] == {"s": 1}


async def test_repair_carries_the_validation_error(scripted) -> None:
    c = scripted(["not json at all", GOOD])
    res = await complete_structured(c, [{"role": "user", "content": "vote"}], Vote, labels={"s": 1})
    assert res.status == "repaired" and res.attempts == 2 and res.value is not None
    repair = c.calls[1]
    assert repair["labels"] == {"s": 1, "repair": 1}
    last = repair["messages"][-1]["content"]
    assert "not valid Vote JSON" in last and '"target"' in last  # error + schema
    assert repair["messages"][-2] == {"role": "assistant", "content": "not json at all"}


async def test_client_side_structured_error_is_repaired_too(scripted) -> None:
    c = scripted([StructuredOutputError("bad", raw="{", errors=[{"msg": "eof"}]), GOOD])
    res = await complete_structured(c, [], Vote)
    assert res.status == "repaired" and "eof" in c.calls[1]["messages"][-1]["content"]


async def test_policy_raise(scripted) -> None:
    c = scripted([BAD, BAD])
    with pytest.raises(StructuredOutputError) as ei:
        await complete_structured(c, [], Vote, policy="raise")
    assert ei.value.raw == BAD and ei.value.errors
    assert len(c.calls) == 2  # one repair, no more


async def test_policy_abstain_is_explicit(scripted) -> None:
    res = await complete_structured(scripted([BAD, BAD]), [], Vote, policy="abstain")
    assert res.status == "abstained" and res.abstained and not res.ok
    assert res.value is None and isinstance(res.error, StructuredOutputError)


async def test_policy_default_value_and_factory(scripted) -> None:
    fallback = Vote(target="ann", agree=False)
    res = await complete_structured(
        scripted([BAD, BAD]), [], Vote, policy=FailurePolicy("default", default=fallback)
    )
    assert res.status == "default" and res.value is fallback
    seen: list[Exception] = []

    def factory(err: Exception) -> dict:
        seen.append(err)
        return {"target": "bob", "agree": True}

    res = await complete_structured(
        scripted([BAD, BAD]), [], Vote, policy=FailurePolicy("default", default=factory)
    )
    assert res.value == Vote(target="bob", agree=True) and len(seen) == 1


async def test_policy_retry_then_fallback(scripted) -> None:
    c = scripted([BAD, BAD, BAD, GOOD])
    res = await complete_structured(c, [], Vote, policy=FailurePolicy("retry", retries=2))
    assert res.status == "repaired" and res.attempts == 4
    c = scripted([BAD] * 5)
    res = await complete_structured(
        c, [], Vote, policy=FailurePolicy("retry", retries=1, then="abstain")
    )
    assert res.abstained and len(c.calls) == 3


async def test_llm_errors_follow_the_policy_unless_told_not_to(scripted) -> None:
    res = await complete_structured(
        scripted([RateLimitError("429"), RateLimitError("429")]), [], Vote, policy="abstain"
    )
    assert res.abstained and isinstance(res.error, RateLimitError)
    with pytest.raises(StructuredOutputError, match="429"):
        await complete_structured(scripted([RateLimitError("429")] * 2), [], Vote)
    with pytest.raises(RateLimitError):
        await complete_structured(
            scripted([RateLimitError("429")]),
            [],
            Vote,
            policy=FailurePolicy("abstain", catch_llm_errors=False),
        )


def test_policy_validation() -> None:
    with pytest.raises(ConfigError, match="'maybe'"):
        FailurePolicy("maybe")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="default="):
        FailurePolicy("default")
    with pytest.raises(ConfigError, match="loop"):
        FailurePolicy("retry", then="retry")


def test_schemas_and_choice_models_are_cached(monkeypatch) -> None:
    json_schema.cache_clear()
    calls = []
    orig = Vote.model_json_schema.__func__  # type: ignore[attr-defined]

    def counting(cls, *a, **k):
        calls.append(1)
        return orig(cls, *a, **k)

    monkeypatch.setattr(Vote, "model_json_schema", classmethod(counting))
    for _ in range(25):
        json_schema(Vote)
    assert len(calls) == 1
    m1 = choice_model("V", "vote", ("a", "b"))
    assert choice_model("V", "vote", ("a", "b")) is m1
    assert choice_model("V", "vote", ("a", "c")) is not m1
    assert m1(vote="a").vote == "a"
    with pytest.raises(ValidationError):
        m1(vote="z")
    with pytest.raises(ConfigError):
        choice_model("V", "vote", ())
