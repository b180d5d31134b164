"""Tool calling shared by every layer: the function-tool schema and the tool-calling loop.

One shape and one loop serve env routers (:class:`agentlab.env.ReActRouter`), simulation
agents (:class:`agentlab.agents.LLMAgent`), messaging agents' skill calls and the thread
runtime (:mod:`agentlab.runtime.threads`); each caller supplies only what differs (how to
ask the model, how to run one call, when to stop early).

The loop is one step, :func:`loop_step` (a reply → its assistant turn and the calls to
run, or the end of the loop), and the shape of a tool result, :func:`tool_message`. Two
drivers repeat it:

- :func:`run_tool_loop` in one call: ask, step, run the calls, append their results, repeat;
- the thread runtime one step per *slice*, persisted in between: a slice asks the model
  and steps; the call it returns is dispatched and the slice ends; the result arrives later
  as a delivery whose slice appends it (:func:`tool_message`) and asks again
  (``agentlab/runtime/threads/slice.py``).

Example::

    from agentlab.core.tools import function_tool, run_tool_loop

    schema = function_tool("add", "Add two numbers.", {"type": "object", "properties": {
        "a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]})

    async def ask(i: int) -> LLMResponse:
        return await llm.complete(messages, tools=[schema])

    async def run(call: ToolCall) -> str:
        return str(call.arguments["a"] + call.arguments["b"])

    end = await run_tool_loop(messages, complete=ask, call_tool=run, max_iterations=4)
    print(end.answered, end.response.text)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = [
    "LoopEnd",
    "function_tool",
    "loop_step",
    "object_parameters",
    "run_tool_loop",
    "tool_message",
]

#: the model's reply type (``LLMResponse`` or any object with ``tool_calls``)
R = TypeVar("R")


def function_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI ``tools=[...]`` entry of a function tool (key order fixed: the schema is
    part of prompts, which the simulated backend hashes).

    Args:
        name: function name the model calls.
        description: shown to the model.
        parameters: JSON schema of the arguments (an object schema).
    """
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def object_parameters(
    properties: dict[str, Any], required: list[str] | None = None
) -> dict[str, Any]:
    """An object schema: ``properties``, ``required`` (default: all of them)."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
    }


def tool_message(call_id: str, content: str) -> dict[str, Any]:
    """The ``{"role": "tool", ...}`` turn answering the call ``call_id`` with ``content``."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def loop_step(
    messages: list[dict[str, Any]],
    response: R,
    *,
    assistant_message: Callable[[R, list[Any]], dict[str, Any]] | None = None,
    stop: Callable[[R, list[Any]], bool] | None = None,
    max_calls: int | None = None,
    keep_answer: bool = False,
) -> list[Any]:
    """One step of the ReAct loop: the model's reply → the tool calls to run next.

    If the reply calls tools (and ``stop`` does not end the loop), its assistant turn is
    appended to ``messages`` and its calls are returned: the caller runs them and appends
    each result as a :func:`tool_message` before asking the model again. Otherwise the
    loop ends with this reply as the answer and ``[]`` is returned.

    Args:
        messages: the conversation (appended to in place).
        response: the model's reply; its ``tool_calls`` drive the loop.
        assistant_message: ``assistant_message(reply, calls)`` builds the assistant turn
            (default: the reply's ``to_message()`` with only the calls kept).
        stop: ``stop(reply, calls)`` true ends the loop on a reply with tool calls too
            (its calls are not run).
        max_calls: keep only the first ``max_calls`` calls of a reply (the thread runtime
            keeps one: one suspension point per slice).
        keep_answer: also append the answering reply's turn (built with no calls).
    """
    found = getattr(response, "tool_calls", None)
    calls = (list(found) if max_calls is None else list(found[:max_calls])) if found else []
    build = assistant_message or _to_message
    if not calls or (stop is not None and stop(response, calls)):
        if keep_answer:
            messages.append(build(response, []))
        return []
    messages.append(build(response, calls))
    return calls


def _to_message(response: Any, calls: list[Any]) -> dict[str, Any]:
    """The reply's ``to_message()`` with only ``calls`` (a prefix of its calls) in it."""
    msg: dict[str, Any] = response.to_message()
    if len(calls) < len(msg.get("tool_calls") or ()):
        if calls:
            msg["tool_calls"] = msg["tool_calls"][: len(calls)]
        else:
            del msg["tool_calls"]
    return msg


@dataclass(frozen=True, slots=True)
class LoopEnd(Generic[R]):
    """How a tool-calling loop ended.

    Attributes:
        response: the model's last reply.
        answered: ``True`` if that reply ended the loop (no tool calls, or the caller's
            ``stop`` said so); ``False`` if ``max_iterations`` replies all called tools.
        iterations: model calls made.
    """

    response: R
    answered: bool
    iterations: int


async def run_tool_loop(
    messages: list[dict[str, Any]],
    *,
    complete: Callable[[int], Awaitable[R]],
    call_tool: Callable[[Any], Awaitable[str]],
    max_iterations: int,
    assistant_message: Callable[[R, list[Any]], dict[str, Any]] | None = None,
    stop: Callable[[R, list[Any]], bool] | None = None,
    after_round: Callable[[int], None] | None = None,
) -> LoopEnd[R]:
    """The ReAct loop in one call: ask the model, :func:`loop_step`, run the tools it
    calls, show it the results (:func:`tool_message`), repeat.

    Args:
        messages: the conversation; the assistant's tool-call turns and the tool results
            are appended to it in place.
        complete: ``complete(iteration)`` asks the model (the caller picks the tools offered
            and the labels) and returns its reply, whose ``tool_calls`` (objects with
            ``name``, ``arguments`` and ``id``) drive the loop.
        call_tool: runs one call; returns the text the model sees as the tool result (a
            refused call is an ``"error: ..."`` text, not an exception, so that the model
            can correct itself).
        max_iterations: model calls at most.
        assistant_message: the assistant turn for a reply with tool calls (default: the
            reply's ``to_message()``).
        stop: ``stop(reply, calls)`` true ends the loop on a reply with tool calls too
            (its calls are not run).
        after_round: called after the tool results of each round (e.g. to change the
            tools offered next).

    Raises:
        ValueError: ``max_iterations`` < 1.
    """
    if max_iterations < 1:
        raise ValueError(f"max_iterations must be >= 1, got {max_iterations}")
    response: R | None = None
    for i in range(max_iterations):
        response = await complete(i)
        calls = loop_step(messages, response, assistant_message=assistant_message, stop=stop)
        if not calls:
            return LoopEnd(response, True, i + 1)
        for call in calls:
            content = await call_tool(call)
            messages.append(tool_message(getattr(call, "id", ""), content))
        if after_round is not None:
            after_round(i)
    assert response is not None
    return LoopEnd(response, False, max_iterations)
