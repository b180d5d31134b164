"""agentlab.core.tools: the one tool-calling loop (ReAct router, LLM agents, messaging agents)
and the one function-tool schema shape."""

from __future__ import annotations

from typing import Any

import pytest

from agentlab.core import CallRecord, LLMResponse, ToolCall
from agentlab.core.tools import (
    function_tool,
    loop_step,
    object_parameters,
    run_tool_loop,
    tool_message,
)


class ScriptedModel:
    """Stands in for the LLM service: replies with the scripted tool calls, then text."""

    def __init__(self, *turns: list[tuple[str, dict[str, Any]]] | str) -> None:
        self.turns = list(turns)
        self.seen: list[int] = []

    async def __call__(self, i: int) -> LLMResponse:
        self.seen.append(i)
        turn = self.turns[min(i, len(self.turns) - 1)]
        record = CallRecord(request_id=f"r{i}", model="fake", start=0.0)
        if isinstance(turn, str):
            return LLMResponse(text=turn, record=record)
        calls = [ToolCall(id=f"c{i}{k}", name=n, arguments=a) for k, (n, a) in enumerate(turn)]
        return LLMResponse(text="", record=record, tool_calls=calls)


async def test_loop_runs_calls_and_shows_results_until_the_model_answers() -> None:
    model = ScriptedModel([("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})], "done")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "sum"}]

    async def run(call: ToolCall) -> str:
        return str(call.arguments["a"] + call.arguments["b"])

    end = await run_tool_loop(messages, complete=model, call_tool=run, max_iterations=4)
    assert end.answered and end.iterations == 2 and end.response.text == "done"
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert [m["content"] for m in messages[2:]] == ["3", "7"]
    assert [m["tool_call_id"] for m in messages[2:]] == ["c00", "c01"]
    assert messages[1]["tool_calls"][0]["function"]["name"] == "add"


async def test_exhausted_loop_reports_not_answered_and_after_round_runs_each_round() -> None:
    model = ScriptedModel([("noop", {})])
    rounds: list[int] = []

    async def run(call: ToolCall) -> str:
        return "ok"

    end = await run_tool_loop(
        [], complete=model, call_tool=run, max_iterations=3, after_round=rounds.append
    )
    assert not end.answered and end.iterations == 3 and rounds == [0, 1, 2]
    with pytest.raises(ValueError, match="max_iterations"):
        await run_tool_loop([], complete=model, call_tool=run, max_iterations=0)


async def test_stop_ends_the_loop_without_running_the_calls() -> None:
    model = ScriptedModel([("elsewhere", {})])
    ran: list[str] = []

    async def run(call: ToolCall) -> str:
        ran.append(call.name)
        return "?"

    messages: list[dict[str, Any]] = []
    end = await run_tool_loop(
        messages,
        complete=model,
        call_tool=run,
        max_iterations=3,
        stop=lambda _resp, calls: calls[0].name == "elsewhere",
    )
    assert end.answered and end.iterations == 1 and ran == [] and messages == []


def test_function_tool_shape() -> None:
    params = object_parameters({"x": {"type": "integer"}})
    assert params == {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    assert function_tool("f", "Do f.", params) == {
        "type": "function",
        "function": {"name": "f", "description": "Do f.", "parameters": params},
    }
    assert list(function_tool("f", "", params)["function"]) == ["name", "description", "parameters"]


def test_env_tools_thread_tools_and_skills_share_the_shape() -> None:
    from agentlab.env import EnvBase, tool
    from agentlab.runtime.threads import Tool

    class World(EnvBase):
        @tool
        def wave(self, times: int) -> str:
            """Wave.

            Args:
                times: how often.
            """
            return "~" * times

    spec = World().get_tool("wave")
    env_schema = spec.openai_schema()
    thread_schema = Tool("wave", lambda ctx, args: None, spec.description, spec.parameters).schema()
    assert env_schema == thread_schema == function_tool("wave", spec.description, spec.parameters)


def _reply(text: str, *calls: tuple[str, dict[str, Any]]) -> LLMResponse:
    record = CallRecord(request_id="r", model="fake", start=0.0)
    tcs = [ToolCall(id=f"c{k}", name=n, arguments=a) for k, (n, a) in enumerate(calls)]
    return LLMResponse(text=text, record=record, tool_calls=tcs)


def test_loop_step_appends_the_call_turn_and_returns_the_calls_to_run() -> None:
    messages: list[dict[str, Any]] = []
    calls = loop_step(messages, _reply("", ("a", {}), ("b", {"x": 1})))
    assert [c.name for c in calls] == ["a", "b"]
    assert [tc["function"]["name"] for tc in messages[0]["tool_calls"]] == ["a", "b"]
    # one suspension point: only the first call is kept (and only it is in the turn)
    one: list[dict[str, Any]] = []
    assert [c.name for c in loop_step(one, _reply("", ("a", {}), ("b", {})), max_calls=1)] == ["a"]
    assert [tc["id"] for tc in one[0]["tool_calls"]] == ["c0"]
    assert tool_message("c0", "ok") == {"role": "tool", "tool_call_id": "c0", "content": "ok"}


def test_loop_step_ends_on_an_answer_or_stop_and_keeps_the_answer_only_if_asked() -> None:
    messages: list[dict[str, Any]] = []
    assert loop_step(messages, _reply("done")) == [] and messages == []
    assert loop_step(messages, _reply("done"), keep_answer=True) == []
    assert messages == [{"role": "assistant", "content": "done"}]
    stopped: list[dict[str, Any]] = []
    calls = loop_step(
        stopped, _reply("cut", ("a", {})), stop=lambda _r, _c: True, keep_answer=True,
        assistant_message=lambda r, cs: {"role": "assistant", "content": r.text, "n": len(cs)},
    )  # fmt: skip
    assert calls == [] and stopped == [{"role": "assistant", "content": "cut", "n": 0}]


async def test_a_thread_is_the_same_loop_one_persisted_step_per_slice() -> None:
    """A thread's history (slice by slice, through the store) is exactly the conversation
    ``run_tool_loop`` builds in one call from the same model and tool."""
    from agentlab.runtime.threads import AgentSystem, ScriptedModel, Tool
    from agentlab.runtime.threads.slice import assistant_turn

    def work(ctx: Any, args: dict[str, Any]) -> str:
        return f"looked up {args['query']!r}"

    tool = Tool("work", work)
    system = AgentSystem(ScriptedModel(tool="work", seed=4), tools=[tool], agent_tools=False)
    async with system:
        system.send_user("t", "find the answer", "u1")
        await system.drain()
    history = system.history("t")

    model = ScriptedModel(tool="work", seed=4)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "find the answer"}]

    async def complete(i: int) -> Any:
        parts, calls = [], []
        async for x in model.stream(list(messages), [tool.schema()], thread_id="t", turn=i):
            (parts if isinstance(x, str) else calls).append(x)
        return _Turn("".join(parts), calls)  # type: ignore[arg-type]

    async def call_tool(call: ToolCall) -> str:
        return work(None, call.arguments)

    end = await run_tool_loop(
        messages, complete=complete, call_tool=call_tool, max_iterations=4,
        assistant_message=assistant_turn,
    )  # fmt: skip
    loop_step(messages, end.response, assistant_message=assistant_turn, keep_answer=True)
    assert end.answered and end.iterations == 2
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history == messages


class _Turn:
    def __init__(self, text: str, tool_calls: list[ToolCall]) -> None:
        self.text, self.tool_calls = text, tool_calls
