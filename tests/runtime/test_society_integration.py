"""The society feeds the other capabilities: messages for ConversationView, human input."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentlab.agents import AgentBase, register_agent
from agentlab.runtime import Society
from agentlab.store import open_run
from agentlab.store.human import answer_request, pending_requests


def test_feed_posts_become_messages(run_dir: Path) -> None:
    s = Society.create(
        run_dir,
        agents={"llm": 6},
        env=["social_feed"],
        llm={"model": "sim/instant", "sim_tool_call_p": 0.9},
        seed=2,
        progress=False,
    )
    s.run_sync(ticks=3)
    run = open_run(run_dir)
    events = run.df("env_events")
    posts = events[events.event.isin(["post", "reply"])]
    msgs = run.messages_df()
    assert len(posts) > 0
    assert len(msgs) == len(posts)  # one message per post/reply, nothing else
    assert set(msgs["hub"]) == {"social_feed"}
    assert set(msgs["sender"]) <= set(s.agent_states())
    assert (msgs["content"].str.len() > 0).all()
    replies = msgs[msgs["role"] == "reply"]
    assert (replies["thread"] != replies["msg_id"]).all()


@register_agent("asker")
class AskingAgent(AgentBase):
    """Asks a person once, on its first tick, and remembers the answer."""

    def initial_state(self) -> dict[str, Any]:
        return {"answer": None}

    async def step(self, tick: int) -> None:
        if tick == 1:
            assert self.services is not None
            schema = {"type": "string", "enum": ["yes", "no"]}
            self.state["answer"] = await self.services.ask_user("Shall we post?", schema)


async def test_ask_user_answer_reaches_the_agent(run_dir: Path) -> None:
    s = Society.create(run_dir, agents={"asker": 1}, seed=0, progress=False)

    async def person() -> None:
        while not (pending := pending_requests(run_dir)):
            await asyncio.sleep(0.05)
        (req,) = pending
        assert req["question"] == "Shall we post?" and req["agent_id"] == "asker-00000"
        answer_request(run_dir, req["request_id"], "yes")

    await asyncio.wait_for(asyncio.gather(s.run(ticks=1), person()), timeout=60)
    assert s.agent_states()["asker-00000"]["answer"] == "yes"
    assert pending_requests(run_dir) == []


# --- a long tool started in one tick, its result collected in a later one -----------------

_HOOKS: dict[str, Any] = {}


def _hook_for(run_dir: str) -> Any:
    """One LongToolHook per run, results queued durably in ``<run>/threads.db``."""
    from agentlab.runtime.threads import LongToolHook, SQLiteThreadStore, Tool

    if run_dir not in _HOOKS:

        async def build(ctx: Any, args: dict[str, Any]) -> str:
            await asyncio.sleep(0.25)  # longer than a tick: the agent must not wait for it
            return f"built {args['target']}"

        store = SQLiteThreadStore(Path(run_dir) / "threads.db")
        _HOOKS[run_dir] = LongToolHook(store, [Tool("build", build)])
    return _HOOKS[run_dir]


@register_agent("builder")
class BuilderAgent(AgentBase):
    """Starts a build on tick 1 and keeps only the call id until the result arrives."""

    def initial_state(self) -> dict[str, Any]:
        return {"call_id": None, "result": None, "result_tick": None, "deliveries": 0}

    async def step(self, tick: int) -> None:
        assert self.services is not None
        hook = _hook_for(self.services.proxy.run_dir)
        if tick == 1:
            self.state["call_id"] = hook.start(
                self.agent_id, "build", {"target": self.agent_id}, dedup_id=f"{self.agent_id}:1"
            )
            return
        for d in hook.collect(self.agent_id):
            self.state["deliveries"] += 1
            self.state["result"], self.state["result_tick"] = str(d.payload), tick


def test_long_tool_result_resumes_agent_in_a_later_tick(run_dir: Path) -> None:
    s = Society.create(run_dir, agents={"builder": 3}, seed=0, progress=False, tick_seconds=0.1)
    s.run_sync(ticks=6)
    states = s.agent_states()
    assert len(states) == 3
    for agent_id, st in states.items():
        # between ticks the workspace held only the call id: no task, no future
        assert st["call_id"] == f"hook_{agent_id}:1"
        assert st["result"] is not None and f"built {agent_id}" in st["result"]
        assert st["result_tick"] > 2 and st["deliveries"] == 1  # exactly once, ticks later
