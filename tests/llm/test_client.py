"""LLMClient: config round trips, faults and retries, streaming, sync wrapper, usage."""

from __future__ import annotations

import asyncio
import json
import pickle

import numpy as np
import pytest
from pydantic import BaseModel

from agentlab.core.clock import RealClock, VirtualClock
from agentlab.core.records import CallRecord, Usage
from agentlab.errors import (
    BadResponseError,
    ConfigError,
    LLMError,
    LLMTimeoutError,
    RateLimitError,
    StructuredOutputError,
)
from agentlab.llm import LLMClient, get_profile

MSGS = [{"role": "user", "content": "hello"}]


class Vote(BaseModel):
    agree: bool
    why: str


def test_config_is_frozen_picklable_and_json_round_trips() -> None:
    c = LLMClient("sim/vllm-3b", seed=4, timeout=9.0, temperature=0.2, slots=4)
    d = json.loads(json.dumps(c.to_dict()))
    assert d["schema_version"] == 1 and d["defaults"] == {"temperature": 0.2, "slots": 4}
    assert LLMClient.from_dict(d) == c
    assert pickle.loads(pickle.dumps(c)) == c
    with pytest.raises(AttributeError):
        c.model = "x"  # type: ignore[misc]
    v = c.with_clock(VirtualClock())
    assert v == c and v.clock.is_virtual
    assert isinstance(pickle.loads(pickle.dumps(v)).clock, RealClock)  # virtual clocks stay
    with pytest.raises(ConfigError):
        LLMClient("sim/instant", bad=object())
    for bad in ("x", "3", 2.5):  # (int() took "3" and 2.5 as 3 and 2, "x" as a ValueError)
        with pytest.raises(ConfigError, match="seed must be an integer"):
            LLMClient("sim/instant", seed=bad)  # type: ignore[arg-type]
    assert LLMClient("sim/instant", seed=np.int64(4)).seed == 4


async def test_rate_limit_fault_is_retried_until_success() -> None:
    c = LLMClient("sim/instant", seed=0, max_retries=6).with_clock(VirtualClock())
    attempts = []
    for i in range(30):
        r = await c.complete([{"role": "user", "content": f"m{i}"}], sim_p_rate_limit=0.5)
        attempts.append(r.record.attempts)
    assert max(attempts) > 1 and all(a <= 7 for a in attempts)
    assert c.clock.now() > 0  # backoff slept on the (virtual) clock
    assert c.limiter.rate_limited == sum(attempts) - len(attempts)


@pytest.mark.parametrize(
    ("override", "err_cls", "code"),
    [
        ({"sim_p_rate_limit": 1.0}, RateLimitError, "rate_limited"),
        ({"sim_p_timeout": 1.0}, LLMTimeoutError, "timeout"),
        ({"sim_p_malformed": 1.0}, BadResponseError, "bad_response"),
    ],
)
async def test_final_failures_raise_the_right_class_with_a_record(
    override: dict[str, float], err_cls: type[LLMError], code: str
) -> None:
    clock = VirtualClock()
    c = LLMClient("sim/vllm-3b", seed=0, max_retries=2, timeout=30.0).with_clock(clock)
    with pytest.raises(err_cls) as ei:
        await c.complete(MSGS, agent_id="a1", labels={"stage": "vote"}, **override)
    rec: CallRecord = ei.value.record  # type: ignore[attr-defined]
    assert rec.outcome == code and rec.agent_id == "a1" and rec.labels == {"stage": "vote"}
    # malformed replies are retried inside the client's loop like 429s and timeouts
    assert rec.attempts == 3 and [t[0] for t in rec.tries] == [1, 2, 3]
    assert {t[1] for t in rec.tries} == {code}
    assert rec.end >= rec.start and rec.error
    if err_cls is LLMTimeoutError:
        assert rec.end - rec.start >= 3 * 30.0  # three attempts, each cut at the timeout
    assert c.usage.errors == 1


async def test_malformed_structured_output_raises_structured_output_error() -> None:
    c = LLMClient("sim/instant", seed=0)
    with pytest.raises(StructuredOutputError) as ei:
        await c.complete(MSGS, response_format=Vote, sim_p_malformed=1.0)
    assert ei.value.raw and ei.value.errors
    assert ei.value.record.outcome == "structured_output"  # type: ignore[attr-defined]


async def test_malformed_tool_arguments_raise_bad_response() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {"x": {"type": "integer"}},
                    "required": ["x"],
                },
            },
        }
    ]
    c = LLMClient("sim/instant", seed=0)
    with pytest.raises(BadResponseError, match="malformed JSON"):
        await c.complete(MSGS, tools=tools, tool_choice="required", sim_p_malformed=1.0)


async def test_stream_first_chunk_after_queue_and_prefill() -> None:
    clock = VirtualClock()
    # the additive step (base + prefill) and no attention term: each decode step is
    # 1 / decode_tps whatever the context (the roofline and attention: test_sim_kv.py)
    c = LLMClient(
        "sim/vllm-3b", seed=0, slots=1, decode_jitter=0, attention_decode_s=0.0,
        step_roofline=False,
    )  # fmt: skip
    c = c.with_clock(clock)
    busy = asyncio.ensure_future(c.complete(MSGS, sim_completion_tokens=60))
    await asyncio.sleep(0)
    s = c.stream([{"role": "user", "content": "x" * 4000}], sim_completion_tokens=120)
    deltas = [d async for d in s]
    first = await busy
    rec = s.response.record  # type: ignore[union-attr]
    assert 10 <= len(deltas) <= 12 and "".join(deltas) == s.response.text  # type: ignore[union-attr]
    assert rec.stream and rec.queue_wait == pytest.approx(first.record.end - rec.start, abs=0.02)
    p = get_profile(
        "vllm-3b", step_roofline=False
    )  # one prefill step (the prompt fits the step budget)
    # the chat template's fixed first block is cached (the busy call computed it)
    assert rec.cached_tokens == 16
    prefill = (rec.prompt_tokens - rec.cached_tokens) / p.prefill_tps
    assert rec.first_token == pytest.approx(
        rec.start + rec.queue_wait + p.overhead_s + prefill + 1 / p.decode_tps, abs=1e-6
    )
    assert rec.end == pytest.approx(rec.first_token + 119 / p.decode_tps, abs=1e-6)
    r = await c.complete(MSGS, stream=True)
    assert r.record.stream and r.text


async def test_complete_sync_refuses_inside_a_running_loop() -> None:
    c = LLMClient("sim/instant")
    with pytest.raises(ConfigError, match=r"await client\.complete"):
        c.complete_sync(MSGS)


def test_complete_sync_outside_a_loop_and_usage_merges() -> None:
    c = LLMClient("sim/instant", seed=11)
    before = c.usage
    r = c.complete_sync(MSGS, sim_completion_tokens=5)
    after = c.usage
    assert r.record.completion_tokens == 5 and after.calls == before.calls + 1
    assert after.completion_tokens - before.completion_tokens == 5
    merged = after + Usage(1, 2, 3, 0)
    assert merged.calls == after.calls + 3 and merged.total_tokens == after.total_tokens + 3


async def test_state_is_shared_by_equal_configs_in_one_process() -> None:
    c = LLMClient("sim/vllm-3b", seed=99, aimd_initial=5, decode_tps=50_000, overhead_s=0.002)
    await asyncio.gather(*(c.complete(MSGS) for _ in range(40)))
    learned = c.limit
    assert learned > 5
    clone = pickle.loads(pickle.dumps(c))  # what a Ray task receives
    assert clone.limit == learned and clone.usage == c.usage
    assert LLMClient("sim/vllm-3b", seed=98, aimd_initial=5).limit == 5
    m = c.server_metrics()
    assert m["requests_total"] >= 40 and m["aimd_limit"] == learned
