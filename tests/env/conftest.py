"""Fixtures for env tests: a tiny scripted LLM with the ``LLMClient.complete`` contract, for router tests."""

from __future__ import annotations

from typing import Any

import pytest

from agentlab.core import CallRecord, LLMResponse, ToolCall


class ScriptedLLM:
    """Replies with the scripted items in order (then repeats the last one).

    Each item is a string (text reply) or a list of ``(tool, arguments)`` pairs (tool calls).
    """

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> LLMResponse:
        self.requests.append({"messages": [dict(m) for m in messages], **kwargs})
        item = self.script[min(len(self.requests) - 1, len(self.script) - 1)]
        record = CallRecord(request_id=f"r{len(self.requests)}", model="fake", start=0.0)
        if isinstance(item, str):
            return LLMResponse(text=item, record=record)
        calls = [ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(item)]
        return LLMResponse(text="", record=record, tool_calls=calls, finish_reason="tool_calls")


@pytest.fixture()
def scripted() -> type[ScriptedLLM]:
    """The :class:`ScriptedLLM` class (tests build one per scenario)."""
    return ScriptedLLM
