"""Ray executor: same results as local for one seed; notebook-defined agents work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentlab.agents import registry as reg
from agentlab.runtime import Society
from tests.runtime.society_helpers import log_rows

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::UserWarning")]

AGENTS = [
    {"type": "counter", "n": 6, "config": {"llm_calls": 1, "fail_every": 2}},
    {"type": "llm", "n": 5, "config": {"max_iterations": 2}},
]


def _run(path: Path, executor: str) -> tuple[Any, Any, dict]:
    s = Society.create(
        path,
        agents=AGENTS,
        env=["social_feed"],
        llm="sim/instant",
        seed=5,
        executor=executor,
        batch_size=4,
        progress=False,
    )
    out = s.run_sync(ticks=3)
    assert out["steps"] == 33
    state = (s.agent_states(), s.env_state()[0]["state"])
    s.close()
    return state, out, log_rows(path)


def test_local_and_ray_give_the_same_results(ray_session: Any, tmp_path: Path) -> None:
    local_state, local_out, local_rows = _run(tmp_path / "local", "local")
    ray_state, ray_out, ray_rows = _run(tmp_path / "ray", "ray")
    assert ray_state == local_state
    for k in ("steps", "llm_calls", "errors", "tokens"):
        assert ray_out[k] == local_out[k], k
    for name in ("agent_states", "agent_errors", "env_events", "timeline"):
        assert ray_rows[name] == local_rows[name], name

    # llm_calls rows match too, up to the run id (the directory name)
    def strip(rows: Any) -> dict[str, int]:
        drop = ('"run_id": "ray"', '"run_id": "local"')
        return {k.replace(drop[0], "").replace(drop[1], ""): v for k, v in rows.items()}

    assert strip(ray_rows["llm_calls"]) == strip(local_rows["llm_calls"])
    assert sum(local_rows["env_events"].values()) > 0
    # the published env state: the last tick's checkpoint, copied (the env actor's too)
    published = []
    for run in (tmp_path / "local", tmp_path / "ray"):
        (rel,) = json.loads((run / "SOCIETY_STEP.json").read_bytes())["env"]
        published.append((run / "env" / "ENV_STATE.json").read_bytes())
        assert published[-1] == (run / rel).read_bytes()
    assert published[0] == published[1]


_NOTEBOOK_CELL = """
from agentlab.agents import AgentBase, register_agent

@register_agent("nb-doubler")
class Doubler(AgentBase):
    def initial_state(self):
        return {"x": 1}

    async def step(self, tick):
        resp = await self.services.llm.complete([{"role": "user", "content": "hi"}])
        self.state["x"] = self.state["x"] * 2 + (len(resp.text) > 0)
"""


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_notebook_defined_agent_class(ray_session: Any, tmp_path: Path, executor: str) -> None:
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(_NOTEBOOK_CELL, ns)  # a class whose module is __main__, like a notebook cell
    assert ns["Doubler"].__module__ == "__main__"
    try:
        s = Society.create(
            tmp_path / executor, agents={"nb-doubler": 3}, seed=0, executor=executor, progress=False
        )
        out = s.run_sync(ticks=2)
        assert out["errors"] == 0 and out["steps"] == 6
        assert all(v == {"x": 7} for v in s.agent_states().values())
        s.close()
    finally:
        reg._REGISTRY.pop("nb-doubler", None)
