"""Shared helpers for the thread-runtime tests."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from agentlab.runtime.threads import Tool, ToolContext


class CountingTool:
    """An instant tool that counts how often each call id was started."""

    def __init__(self, name: str = "work", delay: float = 0.0) -> None:
        self.starts: Counter[str] = Counter()
        self.delay = delay
        self.tool = Tool(name, self.start)

    def start(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        self.starts[f"{ctx.thread_id}:{ctx.call_id}"] += 1
        text = f"result of {ctx.call_id} for {ctx.thread_id}"
        if not self.delay:
            return text

        async def later() -> str:
            await asyncio.sleep(self.delay)
            return text

        return later()


def roles(history: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in history]
