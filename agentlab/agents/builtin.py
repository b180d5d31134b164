"""Built-in agent types: ``llm`` (:class:`LLMAgent`) and ``counter`` (no LLM, for tests).

Importing this module registers them; the registry imports it on first lookup.
"""

from __future__ import annotations

from typing import Any

from agentlab.agents.base import AgentBase
from agentlab.agents.llm_agent import LLMAgent
from agentlab.agents.registry import register_agent

__all__ = ["CounterAgent", "LLMAgent"]


@register_agent("counter")
class CounterAgent(AgentBase):
    """Adds a seeded random integer each tick; optionally makes ``llm_calls`` LLM calls.

    Config keys: ``llm_calls`` (default 0) LLM calls per step; ``fail_every`` (default 0)
    raise on ticks divisible by it on the first attempt (exercises retries).
    """

    def initial_state(self) -> dict[str, Any]:
        return {"total": 0, "history": [], "replies": 0}

    async def step(self, tick: int) -> None:
        svc = self.services
        draw = self.rng.randint(0, 999) if svc is None else svc.rng.randint(0, 999)
        fail_every = int(self.config.get("fail_every", 0))
        if fail_every and tick % fail_every == 0 and svc is not None and svc.attempt == 1:
            raise RuntimeError(f"injected failure of {self.agent_id} at tick {tick}")
        for i in range(int(self.config.get("llm_calls", 0))):
            assert svc is not None
            resp = await svc.llm.complete(
                [{"role": "user", "content": f"{self.agent_id} tick {tick} draw {draw}"}],
                labels={"stage": "count", "iteration": i},
            )
            self.state["replies"] += len(resp.text) > 0
        self.state["total"] += draw
        self.state["history"] = [*self.state["history"], draw][-5:]

    def summary(self) -> dict[str, Any]:
        return {"total": self.state["total"]}
