"""The synchronous ``sim/instant`` path (``SimServer.plan_instant``, ``LLMClient.complete_now``)
answers exactly as the general plan / retry loop does, and declines with nothing changed."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from agentlab.core.clock import VirtualClock
from agentlab.env.routers import CodeGenRouter
from agentlab.llm import LLMClient, get_profile
from agentlab.llm.sim_backend import SimServer
from agentlab.llm.sim_tools import CODEGEN_MARK, PLAN_MARK


class Vote(BaseModel):
    agree: bool
    why: str


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "post",
            "description": "Post a note.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        },
    }
]


def _requests() -> list[tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any] | None]]:
    """(messages, params, labels) covering every branch plan_instant serves."""
    out: list[tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any] | None]] = []
    for i in range(40):
        msgs: list[dict[str, Any]] = [{"role": "user", "content": f"agent {i} tick 3 " * (i % 9)}]
        if i % 3 == 0:
            msgs.insert(0, {"role": "system", "content": "You are @someone."})
        if i % 5 == 0:
            msgs.append({"role": "assistant", "content": [{"type": "text", "text": "x"}]})
        labels = [None, {"stage": "count", "iteration": i}, {"call": "vote", "stage": "intent"},
                  {"label": "react"}, {"stage": 7}][i % 5]  # fmt: skip
        params = [{}, {"max_tokens": 3}, {"sim_completion_tokens": 1 + i}, {"sim_marker": "[OK]",
                  "sim_marker_p": 0.5}, {"max_completion_tokens": 50, "temperature": 0.2}][i % 5]  # fmt: skip
        out.append((msgs, params, labels))
    out.append(([], {}, None))  # no messages at all
    return out


@pytest.mark.parametrize("profile", ["instant", "lengths"])
def test_plan_instant_answers_what_plan_answers(profile: str) -> None:
    prof = get_profile("instant")
    if profile == "lengths":  # per-label lengths, a duplicate label (the first one counts)
        prof = prof.replace(lengths={"count": [5, 0.2], "vote": [40, 0.9], "7": [9, 0.1]})
        prof = prof.replace(lengths=(*prof.lengths, ("count", 500.0, 0.0)))
    fast, slow = SimServer(prof, 11, VirtualClock()), SimServer(prof, 11, VirtualClock())
    assert fast.instant
    for msgs, params, labels in _requests():
        got = fast.plan_instant(msgs, params, labels)
        res = slow.plan(msgs, params=params, labels=labels)
        assert got == (res.text, res.prompt_tokens, res.completion_tokens, res.finish_reason)
        assert not res.tool_calls and res.fault is None and not res.malformed
        assert fast.export_state() == slow.export_state()
    assert fast.metrics() == slow.metrics()


@pytest.mark.parametrize(
    ("params", "messages"),
    [
        ({"sim_p_rate_limit": 0.1}, None),
        ({"sim_p_timeout": 0.2}, None),
        ({"sim_p_malformed": 0.3}, None),
        ({"max_tokens": "many"}, None),
        ({"sim_marker_p": "often"}, None),
        ({"sim_p_invalid_args": "x"}, None),
        ({"sim_marker": 3}, None),
        ({"sim_completion_tokens": "lots"}, None),
        ({}, [{"role": "system", "content": f"{CODEGEN_MARK}\n- post(text):"}]),
        ({}, [{"role": "system", "content": PLAN_MARK}]),
        ({}, ["not a message"]),
        ({}, [{"role": None, "content": "x"}]),
    ],
)
def test_plan_instant_declines_with_nothing_changed(
    params: dict[str, Any], messages: list[Any] | None
) -> None:
    server = SimServer(get_profile("instant"), 3, VirtualClock())
    msgs = messages or [{"role": "user", "content": "hello"}]
    before = server.export_state()
    assert server.plan_instant(msgs, params, None) is None
    assert server.plan_instant(msgs, params, None) is None  # a cached refusal, too
    assert server.export_state() == before


def test_profiles_that_take_time_never_take_the_instant_path() -> None:
    for name in ("vllm-3b", "cloud", "smollm2-cpu"):
        assert not SimServer(get_profile(name), 0, VirtualClock()).instant
    spends_cpu = get_profile("instant").replace(client_overhead_s=0.001)
    assert not SimServer(spends_cpu, 0, VirtualClock()).instant


def _record(resp: Any) -> dict[str, Any]:
    d = resp.record.to_dict()
    return {"text": resp.text, "finish": resp.finish_reason, "parsed": repr(resp.parsed),
            "tools": [(t.id, t.name, t.arguments) for t in resp.tool_calls], "record": d}  # fmt: skip


async def test_complete_now_and_complete_equal_the_general_loop() -> None:
    """Two equal clients, one with the instant path switched off: every response, record,
    limiter update, usage total and server counter agree, over calls of every kind."""
    fast = LLMClient("sim/instant", seed=5, max_retries=4).with_clock(VirtualClock())
    slow = LLMClient("sim/instant", seed=5, max_retries=4).with_clock(VirtualClock())
    slow._get_live().server.instant = False  # type: ignore[union-attr]
    seen: list[Any] = []
    for i in range(120):
        msgs = [{"role": "user", "content": f"agent {i} says hi " * (i % 4)}]
        labels = {"stage": "count", "iteration": i}
        kind = i % 6
        out = []
        for c in (fast, slow):
            if kind == 0:
                now = c.complete_now(msgs, agent_id=f"a{i}", labels=labels)
                r = now if now is not None else await c.complete(msgs, agent_id=f"a{i}",
                                                                 labels=labels)  # fmt: skip
                assert (now is None) == (c is slow)
            elif kind == 1:
                r = await c.complete(msgs, agent_id=f"a{i}", labels=labels)
            elif kind == 2:
                r = await c.complete(msgs, response_format=Vote)
            elif kind == 3:
                r = await c.complete(msgs, tools=TOOLS, labels=labels)
            elif kind == 4:
                r = await c.complete(msgs, max_tokens=2, temperature=0.1)
            else:
                try:
                    r = await c.complete(msgs, sim_p_malformed=0.5, sim_p_rate_limit=0.3)
                except Exception as exc:  # retries spent: the failed record
                    r = exc
            out.append(_record(r) if not isinstance(r, Exception) else repr(r))
        assert out[0] == out[1], i
        seen.append(out[0])
        if kind == 0:  # the record owns a copy of the caller's labels
            assert r.record.labels == {**labels} and r.record.labels is not labels
    assert fast.export_state() == slow.export_state()
    assert fast.server_metrics() == slow.server_metrics()
    assert fast.usage == slow.usage and fast.usage.calls == 120
    # the mix reached every outcome: answers at once, structured, tool calls, cut, failed
    assert {s["finish"] for s in seen if isinstance(s, dict)} == {"stop", "length", "tool_calls"}
    assert any(isinstance(s, str) for s in seen)


async def test_complete_now_declines_when_it_cannot_answer_at_once() -> None:
    vllm = LLMClient("sim/vllm-3b", seed=1).with_clock(VirtualClock())
    assert vllm.complete_now([{"role": "user", "content": "x"}]) is None
    faulty = LLMClient("sim/instant", seed=1, p_timeout=0.5).with_clock(VirtualClock())
    assert faulty.complete_now([{"role": "user", "content": "x"}]) is None
    # a full gate: the call has to queue for a slot, so the loop must take it
    one = LLMClient("sim/instant", seed=1, concurrency=1).with_clock(VirtualClock())
    gate = one._get_live().gate()
    assert gate.try_acquire() is not None
    before = one.export_state()
    assert one.complete_now([{"role": "user", "content": "x"}]) is None
    assert one.export_state() == before and one.usage.calls == 0
    gate.release()
    assert one.complete_now([{"role": "user", "content": "x"}]) is not None
    # a program-writing prompt goes through play_along's code path in plan()
    prompt = CodeGenRouter.__doc__ or ""
    assert one.complete_now([{"role": "system", "content": CODEGEN_MARK + prompt}]) is None
