"""The simulator's content: determinism, schema-valid JSON, tool calls, overrides."""

from __future__ import annotations

import asyncio
import math
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from agentlab.core.clock import VirtualClock
from agentlab.errors import ConfigError, UnknownNameError
from agentlab.llm import LLMClient, validate_schema


class Inner(BaseModel):
    label: str = Field(min_length=2, max_length=20)
    weight: float = Field(ge=0.5, le=0.75)


class Decision(BaseModel):
    vote: Literal["approve", "reject", "abstain"]
    agree: bool
    score: int = Field(ge=1, le=5)
    reasons: list[str] = Field(min_length=1, max_length=4)
    inner: Inner
    note: str | None = None
    extras: list[Inner] = []


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "post",
            "description": "post to the feed",
            "parameters": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "maxLength": 40},
                    "channel": {"type": "string", "enum": ["news", "chat"]},
                    "urgent": {"type": "boolean"},
                    "count": {"type": "integer", "minimum": 1, "maximum": 3},
                },
                "required": ["text", "channel", "count"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "wait",
            "parameters": {"type": "object", "properties": {"ticks": {"type": "integer"}}},
        },
    },
]


def _msgs(i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You vote."}, {"role": "user", "content": f"q {i}"}]


async def _run_workload(seed: int) -> list[tuple[str, dict[str, object]]]:
    clock = VirtualClock()
    c = LLMClient("sim/vllm-3b", seed=seed).with_clock(clock)
    rs = await asyncio.gather(*(c.complete(_msgs(i), agent_id=f"a{i}") for i in range(24)))
    return [(r.text, r.record.to_dict()) for r in rs]


async def test_same_seed_same_text_and_records() -> None:
    a = await _run_workload(7)
    b = await _run_workload(7)
    assert a == b  # text, timings, tokens, request ids: identical under a fresh virtual clock
    c = await _run_workload(8)
    assert [t for t, _ in a] != [t for t, _ in c]


async def test_same_request_same_text_regardless_of_order() -> None:
    c = LLMClient("sim/instant", seed=3)
    r1 = await c.complete(_msgs(1))
    await c.complete(_msgs(2))
    r2 = await c.complete(_msgs(1))
    assert r1.text == r2.text and r1.record.request_id != r2.record.request_id


async def test_structured_output_is_schema_valid_for_pydantic_and_dict() -> None:
    c = LLMClient("sim/instant", seed=0)
    for i in range(40):
        r = await c.complete(_msgs(i), response_format=Decision)
        assert isinstance(r.parsed, Decision)
        assert 0.5 <= r.parsed.inner.weight <= 0.75
    schema = Decision.model_json_schema()
    for i in range(20):
        r = await c.complete(_msgs(i), response_format=schema)
        assert validate_schema(r.parsed, schema) == []
        assert r.parsed["vote"] in ("approve", "reject", "abstain")


@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
async def test_sim_bool_p_sets_the_rate_of_true(p: float) -> None:
    c = LLMClient("sim/instant", seed=1)
    n = 300
    rs = [await c.complete(_msgs(i), response_format=Decision, sim_bool_p=p) for i in range(n)]
    rate = sum(r.parsed.agree for r in rs) / n
    assert abs(rate - p) < 0.08


async def test_tool_calls_match_their_schema_and_probability() -> None:
    c = LLMClient("sim/instant", seed=2, sim_tool_call_p=0.6)
    n, calls = 200, 0
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for i in range(n):
        r = await c.complete(_msgs(i), tools=TOOLS)
        if r.tool_calls:
            calls += 1
            tc = r.tool_calls[0]
            assert validate_schema(tc.arguments, params[tc.name]) == [], tc
            assert r.text == "" and r.to_message()["tool_calls"][0]["function"]["name"] == tc.name
        else:
            assert r.text
    assert 0.5 < calls / n < 0.7
    r = await c.complete(_msgs(0), tools=TOOLS, tool_choice="none")
    assert not r.tool_calls
    forced = {"type": "function", "function": {"name": "wait"}}
    r = await c.complete(_msgs(0), tools=TOOLS, tool_choice=forced)
    assert r.tool_calls[0].name == "wait"


async def test_completion_tokens_override_and_max_tokens() -> None:
    c = LLMClient("sim/instant", seed=0)
    r = await c.complete(_msgs(0), sim_completion_tokens=17)
    assert r.record.completion_tokens == 17 and len(r.text.split()) == 17
    r = await c.complete(_msgs(0), sim_completion_tokens=500, max_tokens=20)
    assert r.record.completion_tokens == 20


def test_unknown_profile_and_bad_overrides_name_the_choices() -> None:
    with pytest.raises(UnknownNameError) as ei:
        LLMClient("sim/nope")
    assert "sim/vllm-3b" in str(ei.value) and "sim/instant" in str(ei.value)
    with pytest.raises(ConfigError, match="sim_bool_p"):
        LLMClient("sim/instant", sim_bool_probability=0.3)
    c = LLMClient("sim/vllm-3b", slots=4, decode_tps=10)
    assert c.profile is not None and c.profile.slots == 4 and c.profile.decode_tps == 10
    with pytest.raises(ConfigError, match="slots"):
        LLMClient("sim/vllm-3b", slots=-1)


async def test_a_misspelt_request_field_fails_loudly_and_a_providers_own_field_passes() -> None:
    # (the simulator ignored them: `temprature` sampled at the default, `structured_model`
    # — AgentScope's name — returned no structured output, with no word of either)
    c = LLMClient("sim/vllm-3b", seed=0)
    for field, meant in [("temprature", "temperature"), ("max_token", "max_tokens"),
                         ("structured_model", "response_format")]:  # fmt: skip
        with pytest.raises(ConfigError, match=f"'{field}': did you mean '{meant}'"):
            await c.complete(_msgs(0), **{field: 1})
        with pytest.raises(ConfigError, match=f"did you mean '{meant}'"):
            LLMClient("sim/instant", **{field: 1})  # a request default is checked too
    for field, value in [("top_k", 5), ("min_p", 0.1), ("thinking", {"type": "enabled"}),
                         ("reasoning_effort", "low"), ("safety_settings", [])]:  # fmt: skip
        r = await c.complete(_msgs(0), **{field: value})  # vLLM's or a provider's own
        assert r.record.outcome == "ok"


async def test_bad_messages_and_out_of_range_values_are_refused_as_vllm_refuses_them() -> None:
    # in process these were taken: complete("hi") died on "'str' object has no attribute
    # 'get'", max_tokens=0 meant no cap and temperature=-1 was ignored (sim-serve: 400s)
    c = LLMClient("sim/vllm-3b", seed=0)
    for messages, match in [("hi", "got str"), ({"role": "user", "content": "hi"}, "got dict"),
                            ([], "messages is empty")]:  # fmt: skip
        with pytest.raises(ConfigError, match=match):
            await c.complete(messages)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=match):
            c.stream(messages)  # type: ignore[arg-type]
    for field, value in [("max_tokens", 0), ("max_tokens", "5"), ("max_completion_tokens", -1),
                         ("min_tokens", 1.5), ("temperature", -1), ("top_p", 1.5),
                         ("presence_penalty", 3)]:  # fmt: skip
        with pytest.raises(ConfigError, match=f"{field} must be a"):
            await c.complete(_msgs(0), **{field: value})
    with pytest.raises(ConfigError, match="max_tokens must be a whole number in"):
        LLMClient("sim/instant", max_tokens=0)
    ok = await c.complete(_msgs(0), max_tokens=5, temperature=0.0, top_p=1, min_tokens=None)
    assert ok.record.completion_tokens <= 5


def test_sim_serve_holds_the_same_bounds() -> None:
    # one table (sim_result.REQUEST_RANGES) bounds both paths
    from agentlab.llm.serve_models import ChatCompletionRequest
    from agentlab.llm.sim_result import REQUEST_RANGES

    for field, (lo, hi) in REQUEST_RANGES.items():
        meta = {type(m).__name__: m for m in ChatCompletionRequest.model_fields[field].metadata}
        assert (meta["Ge"].ge, meta["Le"].le) == (lo, hi), field


def test_reply_words_are_one_llama3_token_and_set_chars_per_token() -> None:
    """Text at a chosen characters-per-token: every word one Llama-3 token, so a reply of n
    tokens counts n (give or take the sentence case and the period), and its characters
    per token follow the request (the history cut by characters then holds the right
    number of tokens)."""
    from agentlab.llm import sim_content as sc
    from agentlab.llm.tokens import count_text_tokens

    for w in (*sc._SHORT_WORDS, *sc._WORDS, *sc._LONG_WORDS):
        assert count_text_tokens(" " + w, tokenizer="llama3") == 1, w
    for cpt in (3.5, 4.8, 6.0, 8.0):
        text = sc.gen_text(sc.Rng(5), 1500, cpt)
        n = count_text_tokens(text, tokenizer="llama3")
        assert abs(n - 1500) <= 2
        assert len(text) / n == pytest.approx(cpt, rel=0.05)
    # no chars_per_token (every profile but the ones that set text_cpt_median): unchanged
    assert sc.gen_reply(sc.Rng(9), 50) == sc.gen_text(sc.Rng(9), 50)
    a, b = sc.Rng(9), sc.Rng(9)
    assert sc.gen_reply(a, 50, 4.8, 0.0) == sc.gen_text(b, 50, 4.8)
    draws = [sc.text_chars_per_token(sc.Rng(i), 4.8, 0.4) for i in range(2000)]
    draws.sort()
    assert draws[1000] == pytest.approx(4.8, rel=0.05)
    assert draws[1500] / draws[500] == pytest.approx(math.exp(2 * 0.6745 * 0.4), rel=0.1)
