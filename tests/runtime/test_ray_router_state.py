"""The Ray env actor carries the routers' state (counters, the codegen code cache).

Its checkpoint bytes include ``env/ticks/<tick>/routers.json``, and an actor respawned after
a death starts from the committed tick's routers' state, not from an empty cache. Real Ray,
a real ``ray.kill`` of the env actor between two ticks, the ``codegen`` router (programs run
in the actor's sandbox worker processes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentlab.agents import AgentBase, register_agent
from agentlab.errors import EnvActorDiedError
from agentlab.runtime import Society
from tests.runtime.resume_helpers import dataset_rows

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


def _caches(run: Path, tick: int) -> dict[str, Any]:
    state = json.loads((run / f"env/ticks/{tick}/routers.json").read_bytes())
    return {k: r["cache"] for k, r in state["routers"]["asking"].items() if "cache" in r}


def test_a_respawned_env_actor_keeps_the_router_state(ray_session: Any, tmp_path: Path) -> None:
    @register_agent("ray_cache_asker")
    class Asker(AgentBase):  # defined here: Ray workers get it by value, not by import
        async def step(self, tick: int) -> None:
            assert self.services is not None and self.services.env is not None
            await self.services.env.ask("read the recent feed and like a post")

    run = tmp_path / "run"
    s = Society.create(
        run,
        agents={"ray_cache_asker": 4},
        env=[{"type": "social_feed", "router": "codegen"}],
        llm="sim/instant",
        seed=2,
        executor="ray",
        progress=False,
    )
    try:
        s.run_sync(until=2)
        before = _caches(run, 2)  # the actor's checkpoint bytes carry routers.json
        cached = {e[0] for c in before.values() for e in c["entries"]}
        assert cached, "nothing cached by tick 2: the test would not see a lost cache"
        dead = s.executor.actor
        dead_work = Path(ray_session.get(dead.__ray_call__.remote(lambda a: str(a.work))))
        ray_session.kill(dead, no_restart=True)  # SIGKILL: no cleanup runs in the actor
        with pytest.raises(EnvActorDiedError):
            s.run_sync(until=3)
        assert s.tick == 2
        s.run_sync(until=3)  # the actor is respawned from tick 2's commit
        assert s.executor.actor is not dead
        # the killed actor's scratch dir: swept by the next env actor (agentlab.store.scratch)
        assert not dead_work.exists(), f"the killed env actor left {dead_work}"
        # the new actor's scratch dir (read in the actor: only its path is wanted)
        work = Path(ray_session.get(s.executor.actor.__ray_call__.remote(lambda a: str(a.work))))
        assert work.is_dir()
    finally:
        s.close()
    assert not work.exists(), "closing the society left the env actor's work dir behind"

    after = _caches(run, 3)
    rows = [r for r in dataset_rows(run, "env_requests") if r["tick"] == 3]
    assert len(rows) == 4
    # every program cached before the death is reused after the respawn ...
    hits = {r["agent_id"] for r in rows if r["cache_hit"]}
    assert cached <= hits
    # ... and the cache's counters continue from the committed tick
    for name, c in after.items():
        b = before[name]
        assert c["hits"] + c["misses"] == b["hits"] + b["misses"] + len(rows)
