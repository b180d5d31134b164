"""Agent state holding a lone surrogate (half an emoji, as a provider's ``"\\ud83d"``
escape decodes) is stored and read back on both stores, instead of failing every step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlab.agents import AgentBase
from agentlab.agents import registry as reg
from agentlab.agents.workspace import decode_slot, encode_slot
from agentlab.runtime import Society

CUT = "snowman \u2603 then half an emoji \ud83d"


def test_a_slot_with_a_lone_surrogate_round_trips() -> None:
    raw = encode_slot(3, {"reply": CUT, "n": [1, 2]})
    assert decode_slot(raw) == (3, {"reply": CUT, "n": [1, 2]})
    # the usual bytes are unchanged: orjson writes a value without surrogates
    assert encode_slot(3, {"reply": "ok"}) == encode_slot(3, {"reply": "ok"})
    assert b"\\ud83d" in raw  # written escaped, as json does


@pytest.mark.parametrize("store", ["directory", "packed"])
def test_an_agent_keeping_a_lone_surrogate_steps_on(tmp_path: Path, store: str) -> None:
    @reg.register_agent("cut-emoji")
    class CutEmoji(AgentBase):
        def initial_state(self) -> dict[str, Any]:
            return {"n": 0, "last": ""}

        async def step(self, tick: int) -> None:
            self.state["n"] += 1
            self.state["last"] = CUT + str(tick)

    try:
        s = Society.create(tmp_path / "run", agents={"cut-emoji": 3}, seed=0, store=store,
                           progress=False)  # fmt: skip
        out = s.run_sync(ticks=2)
        assert out["errors"] == 0 and out["steps"] == 6
        s.close()
        s = Society.open(tmp_path / "run", progress=False)
        assert s.run_sync(ticks=1)["errors"] == 0
        states = s.agent_states()
        s.close()
        assert len(states) == 3
        assert all(v["n"] == 3 and v["last"].startswith(CUT) for v in states.values()), states
    finally:
        reg._REGISTRY.pop("cut-emoji", None)
