"""``LLMClient.export_state``/``restore_state``: a restored client continues exactly.

Two virtual-clock clients: one makes a burst of calls, exports its state; a fresh client
on a fresh clock set to the same time restores it. The next burst on both must give
identical records — start, end, queue wait, request ids — and identical limiter state.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agentlab.core.clock import VirtualClock
from agentlab.errors import LLMError
from agentlab.llm import LLMClient

CFG: dict[str, Any] = {"seed": 3, "sim_p_rate_limit": 0.15, "sim_p_timeout": 0.05}


async def _burst(client: LLMClient, tag: str, n: int = 40) -> list[tuple[Any, ...]]:
    async def one(i: int) -> tuple[Any, ...]:
        msgs = [{"role": "user", "content": f"{tag} question {i} " * (1 + i % 7)}]
        try:
            r = (await client.complete(msgs, agent_id=f"a{i}")).record
        except LLMError as exc:
            r = exc.record  # type: ignore[attr-defined]
        return (r.request_id, r.start, r.end, r.queue_wait, r.outcome, r.attempts)

    return list(await asyncio.gather(*(one(i) for i in range(n))))


def test_restored_client_continues_like_the_original() -> None:
    async def main() -> None:
        clock = VirtualClock()
        a = LLMClient("sim/vllm-3b", **CFG).with_clock(clock)
        await _burst(a, "first")
        state = json.loads(json.dumps(a.export_state()))  # must survive JSON (no inf)
        assert state["limiter"]["decreases"] > 0  # the faults taught it something

        b = LLMClient("sim/vllm-3b", **CFG).with_clock(VirtualClock(start=clock.now()))
        b.restore_state(state)
        assert b.export_state() == state
        assert b.limit == a.limit
        assert await _burst(b, "second") == await _burst(a, "second")
        assert b.export_state() == a.export_state()

    asyncio.run(main())


def test_export_does_not_consume_request_ids() -> None:
    async def main() -> None:
        c = LLMClient("sim/instant", seed=1).with_clock(VirtualClock())
        first = (await c.complete([{"role": "user", "content": "x"}])).record.request_id
        c.export_state()
        c.export_state()
        second = (await c.complete([{"role": "user", "content": "y"}])).record.request_id
        assert int(second.rsplit("-", 1)[1]) == int(first.rsplit("-", 1)[1]) + 1

    asyncio.run(main())
