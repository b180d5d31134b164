"""A scripted stand-in for ``LLMClient``: replies come from a list, so every failure path
of structured output can be forced exactly (the simulator is used in topology/games tests)."""

from __future__ import annotations

from typing import Any

import pytest

from agentlab.core.clock import Clock
from agentlab.core.records import CallRecord, LLMResponse


class ScriptedClient:
    """Returns the scripted replies in order (an Exception instance is raised instead).

    Each call sleeps ``latency`` on ``clock`` (if given) and is logged in ``calls``.
    """

    def __init__(
        self, replies: list[Any] | None = None, clock: Clock | None = None, latency: float = 0.0
    ) -> None:
        self.replies = list(replies or [])
        self.clock = clock
        self.latency = latency
        self.calls: list[dict[str, Any]] = []

    async def complete(self, messages: list[dict[str, Any]], **kw: Any) -> LLMResponse:
        start = self.clock.now() if self.clock else 0.0
        self.calls.append({"messages": list(messages), "start": start, **kw})
        if self.clock and self.latency:
            await self.clock.sleep(self.latency)
        end = self.clock.now() if self.clock else 0.0
        reply = self.replies.pop(0) if self.replies else "ok"
        if isinstance(reply, Exception):
            raise reply
        rec = CallRecord(
            request_id=f"r{len(self.calls)}",
            model="scripted",
            start=start,
            end=end,
            first_token=end,
            labels=dict(kw.get("labels") or {}),
            agent_id=kw.get("agent_id"),
            prompt_tokens=10,
            completion_tokens=5,
        )
        return LLMResponse(text=reply, record=rec)


@pytest.fixture()
def scripted() -> type[ScriptedClient]:
    return ScriptedClient
