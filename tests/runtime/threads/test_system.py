"""AgentSystem behaviour: ordering, interruption, events, agent-to-agent, step == local."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agentlab.core.records import ToolCall
from agentlab.errors import InvalidAgentIdError
from agentlab.runtime.threads import (
    INTERRUPTED,
    AgentSystem,
    Delivery,
    MemoryThreadStore,
    ScriptedModel,
    Tool,
    validate_openai_messages,
)
from tests.runtime.threads.thread_helpers import CountingTool, roles


class TrackingModel(ScriptedModel):
    """ScriptedModel that records overlapping completions per thread and globally."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.active: dict[str, int] = {}
        self.max_same_thread = 0
        self.max_parallel = 0

    async def stream(self, messages, tools, *, thread_id, turn):  # type: ignore[override]
        self.active[thread_id] = self.active.get(thread_id, 0) + 1
        self.max_same_thread = max(self.max_same_thread, self.active[thread_id])
        self.max_parallel = max(self.max_parallel, sum(self.active.values()))
        try:
            async for x in super().stream(messages, tools, thread_id=thread_id, turn=turn):
                yield x
        finally:
            self.active[thread_id] -= 1


async def test_per_thread_order_under_concurrency() -> None:
    model = TrackingModel(tool=None, chunks=3, delay_s=0.001)
    system = AgentSystem(model)
    tids = [f"t{i}" for i in range(20)]
    async with system:
        for k in range(6):  # interleave deliveries of all threads
            for t in tids:
                system.send(Delivery(t, "event", {"n": k}, f"e{k}", sender="src"))
        await system.drain(timeout=20)
    assert model.max_same_thread == 1  # one slice at a time per thread
    assert model.max_parallel > 1  # different threads ran in parallel
    for t in tids:
        h = system.history(t)
        validate_openai_messages(h)
        got = [json.loads(m["content"])["content"]["n"] for m in h if m["role"] == "tool"]
        assert got == list(range(6))
    assert not system._drivers and not system._inbox  # idle threads hold no task


async def test_tool_round_trip_and_idle_threads_hold_nothing() -> None:
    tool = CountingTool(delay=0.001)
    system = AgentSystem(ScriptedModel(), tools=[tool.tool], system_prompt="be brief")
    async with system:
        system.send_user("a", "hi", "u0")
        await system.drain(timeout=10)
    h = system.history("a")
    assert roles(h) == ["system", "user", "assistant", "tool", "assistant"]
    assert h[3]["content"] == "result of call_0 for a"
    assert "tool_calls" not in h[4]
    st = system.state("a")
    assert st is not None and st.status == "idle" and st.completions == 2
    assert tool.starts == {"a:call_0": 1}


async def test_interrupt_pending_tool_call_and_drop_late_result() -> None:
    started: list[Any] = []
    tool = Tool("work", lambda ctx, args: started.append(ctx))  # result sent by hand later
    system = AgentSystem(ScriptedModel(), tools=[tool])
    async with system:
        system.send_user("a", "first", "u0")
        await system.drain(timeout=10)
        assert system.state("a").pending  # type: ignore[union-attr]
        system.send_user("a", "second", "u1")
        await system.drain(timeout=10)
        started[0].result("late real result")  # arrives after the interruption
        await system.drain(timeout=10)
    h = system.history("a")
    assert roles(h)[:5] == ["user", "assistant", "tool", "user", "assistant"]
    assert h[2]["content"] == INTERRUPTED
    assert all(m.get("content") != "late real result" for m in h)
    validate_openai_messages(h, allow_pending=True)


async def test_new_user_input_cancels_inflight_completion_keeping_partial_turn() -> None:
    model = ScriptedModel(tool=None, chunks=12, delay_s=0.01)
    system = AgentSystem(model)
    async with system:
        system.send_user("a", "long answer please", "u0")
        await asyncio.sleep(0.045)  # a few chunks in
        system.send_user("a", "stop, new question", "u1")
        await system.drain(timeout=10)
    h = system.history("a")
    assert roles(h) == ["user", "assistant", "user", "assistant"]
    assert 0 < len(h[1]["content"]) < len(h[3]["content"])  # partial kept, full second turn
    validate_openai_messages(h)


async def test_events_while_tool_pending_are_deferred_then_synthetic_pairs() -> None:
    started: list[Any] = []
    system = AgentSystem(ScriptedModel(), tools=[Tool("work", lambda c, a: started.append(c))])
    async with system:
        system.send_user("a", "go", "u0")
        await system.drain()
        system.send(Delivery("a", "timer", "tick", "tm1"))
        system.send(Delivery("a", "event", {"price": 3}, "ev1", sender="feed"))
        await system.drain()
        assert system.state("a").deferred  # type: ignore[union-attr]
        started[0].result("chunk 1", final=False)  # streaming tool: first chunk answers
        started[0].result("chunk 2", final=True)
        await system.drain()
    h = system.history("a")
    validate_openai_messages(h)
    assert h[2] == {"role": "tool", "tool_call_id": "call_0", "content": "chunk 1"}
    kinds = [json.loads(m["content"])["kind"] for m in h[3:] if m["role"] == "tool"]
    assert kinds == ["timer", "event", "tool_result"]
    synth = h[3]
    assert synth["tool_calls"][0]["function"] == {"name": "receive_event", "arguments": "{}"}


def test_synthetic_shapes_accepted_by_openai_types() -> None:
    pydantic = pytest.importorskip("pydantic")
    chat = pytest.importorskip("openai.types.chat")

    async def build() -> list[dict[str, Any]]:
        system = AgentSystem(ScriptedModel(), tools=[CountingTool().tool])
        async with system:
            system.send_user("a", "go", "u0")
            await system.drain()
            system.send(Delivery("a", "message", "hello", "m1", sender="b"))
            await system.drain()
        return system.history("a")

    h = asyncio.run(build())
    validate_openai_messages(h)
    adapter = pydantic.TypeAdapter(list[chat.ChatCompletionMessageParam])
    adapter.validate_python(h, strict=True)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "x",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                }
            ],
            "unanswered",
        ),
        ([{"role": "tool", "tool_call_id": "x", "content": "r"}], "not an open tool call"),
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "x",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "user", "content": "in between"},
            ],
            "before tool calls",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "x",
                            "type": "function",
                            "function": {"name": "f", "arguments": "[1]"},
                        }
                    ],
                }
            ],
            "JSON object",
        ),
        ([{"role": "robot", "content": "x"}], "unknown role"),
    ],
)
def test_validator_rejects_invalid_conversations(bad: list[dict[str, Any]], match: str) -> None:
    from agentlab.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        validate_openai_messages(bad)


class AgentScript:
    """A model that calls runtime tools from a per-thread script of ToolCalls."""

    name = "agent-script"

    def __init__(self, plan: dict[str, list[ToolCall | None]]) -> None:
        self.plan = plan

    async def stream(self, messages, tools, *, thread_id, turn):
        yield f"{thread_id} turn {turn}"
        role = thread_id.split(".")[0] if "." not in thread_id else "child"
        steps = self.plan.get(role, [])
        if turn < len(steps) and steps[turn] is not None:
            yield steps[turn]


async def test_spawn_report_close_and_peer_messages() -> None:
    plan = {
        "boss": [
            ToolCall("s1", "spawn_agent", {"task": "count"}),
            None,
            None,
            ToolCall("c1", "close_agent", {"id": "boss.s1"}),
            None,
        ],
        "child": [ToolCall("r1", "report", {"text": "done: 3"}), None],
        "peer": [ToolCall("m1", "send_message", {"to": "boss", "text": "hi boss"}), None],
    }
    system = AgentSystem(AgentScript(plan))  # type: ignore[arg-type]
    async with system:
        system.send_user("boss", "delegate", "u0")
        system.send_user("peer", "greet", "u0")
        await system.drain(timeout=10)
    boss = system.history("boss")
    validate_openai_messages(boss)
    events = [
        json.loads(m["content"])
        for m in boss
        if m["role"] == "tool" and m["content"].startswith("{")
    ]
    assert {(e["kind"], e["from"]) for e in events} == {("report", "boss.s1"), ("message", "peer")}
    child = system.state("boss.s1")
    assert child is not None and child.parent == "boss" and child.status == "closed"
    assert system.state("boss").children == ["boss.s1"]  # type: ignore[union-attr]


async def test_compaction_replaces_prefix_and_is_logged(run_dir) -> None:
    system = AgentSystem(
        ScriptedModel(), tools=[CountingTool().tool], token_budget=1500, run_dir=run_dir
    )
    async with system:
        for k in range(6):
            system.send_user("a", f"turn {k}", f"u{k}")
            await system.drain()
    h = system.history("a")
    validate_openai_messages(h)
    assert h[0]["content"].startswith("[summary of")
    assert system.state("a").compactions >= 1  # type: ignore[union-attr]
    rows = [
        json.loads(x)
        for f in (run_dir / "replay" / "thread_events").glob("*.jsonl")
        for x in f.read_text().splitlines()
    ]
    events = {r["event"] for r in rows}
    assert {"delivery", "slice", "dispatch", "suspend", "compaction"} <= events


async def _rounds(mode: str) -> dict[str, list[dict[str, Any]]]:
    tool = CountingTool()
    system = AgentSystem(ScriptedModel(), MemoryThreadStore(), [tool.tool])
    rounds = [
        [Delivery(t, "user", f"hi {t}", "u0") for t in "abc"],
        [
            Delivery("a", "event", {"x": 1}, "e1"),
            Delivery("b", "user", "again", "u1"),
            Delivery("a", "user", "more", "u1"),
        ],
        [Delivery("c", "message", "psst", "m1", sender="a"), Delivery("c", "user", "dup", "u0")],
    ]
    if mode == "local":
        async with system:
            for batch in rounds:
                for d in batch:
                    system.send(d)
                await system.drain()
    else:
        for batch in rounds:
            for d in batch:
                system.send(d)
            await system.run_steps(partitions=2, limit=2)
    return {t: system.history(t) for t in system.threads()}


async def test_step_mode_equals_local_mode() -> None:
    local = await _rounds("local")
    step = await _rounds("step")
    assert set(local) == {"a", "b", "c"}
    assert step == local


async def test_send_refuses_an_unsafe_thread_id_in_and_out_of_local_mode() -> None:
    """Only a running thread's own id skips the check (it passed it when it started)."""
    system = AgentSystem(ScriptedModel(tool=None), MemoryThreadStore(), agent_tools=False)
    for bad in ("../x", ".", ""):
        with pytest.raises(InvalidAgentIdError):
            system.send_user(bad, "hi", "u0")
    async with system:
        system.send_user("ann", "hi", "u0")
        with pytest.raises(InvalidAgentIdError):
            system.send(Delivery("a/b", "user", "hi", "u1"))
        await system.drain()
    assert system.threads() == ["ann"]
