"""Plan and two-tier routers, the code cache by request shape, the pool's reuse, and the
simulator playing along with router prompts."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agentlab.env import (
    CodeGenRouter,
    EnvBase,
    Limits,
    SocialFeed,
    create_env,
    make_router,
    register_env,
    tool,
)
from agentlab.env.code_cache import CodeCache, request_shape
from agentlab.env.routers_plan import PlanRouter, TwoTierRouter, parse_plan
from agentlab.env.sandbox_pool import SandboxPool
from agentlab.llm import LLMClient


@register_env("ask_counter")
class AskCounter(EnvBase):
    """A second module for the two-tier router."""

    def __init__(self) -> None:
        super().__init__()
        self.value = 0

    @tool
    def inc(self, by: int = 1, agent_id: str = "?") -> int:
        """Increment the counter."""
        self.value += by
        return self.value

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = state["value"]


@pytest.fixture()
def feed() -> SocialFeed:
    env = create_env("social_feed", seed=0)
    assert isinstance(env, SocialFeed)
    env.post("hello town", agent_id="bob")
    env.post("tram news", agent_id="carol")
    env.step(0)
    return env


async def test_plan_router_runs_steps_in_order(feed: SocialFeed, scripted) -> None:  # type: ignore[no-untyped-def]
    plan = [{"tool": "like", "arguments": {"post_id": "0.bob.0"}},
            {"tool": "follow", "arguments": {"user": "carol"}}]  # fmt: skip
    r = PlanRouter(feed, llm=scripted(f"```json\n{json.dumps(plan)}\n```"))
    res = await r.route("like bob's post and follow carol", agent_id="alice")
    assert res.ok and [c["tool"] for c in res.calls] == ["like", "follow"]
    assert res.plan == plan and res.llm_calls == 1
    assert "like:" in res.observation and "follow:" in res.observation
    assert feed.following["alice"] == {"carol"} or "carol" in feed.following["alice"]


async def test_plan_router_stops_at_first_bad_step(feed: SocialFeed, scripted) -> None:  # type: ignore[no-untyped-def]
    plan = [{"tool": "like", "arguments": {"post_id": "9.nobody.9"}},
            {"tool": "post", "arguments": {"content": "never"}}]  # fmt: skip
    res = await PlanRouter(feed, llm=scripted(json.dumps(plan))).route("x", agent_id="alice")
    assert not res.ok and len(res.calls) == 1 and res.plan == plan
    assert not feed.pending
    bad = await PlanRouter(feed, llm=scripted("I will like it")).route("x", agent_id="a")
    assert not bad.ok and bad.error_type == "ToolArgumentError" and "not valid JSON" in bad.error
    with pytest.raises(Exception, match="at most 2"):
        parse_plan(json.dumps(plan * 2), 2)


async def test_two_tier_picks_module_then_tool(feed: SocialFeed, scripted) -> None:  # type: ignore[no-untyped-def]
    counter = create_env("ask_counter", seed=0)
    llm = scripted([("choose_module", {"module": "social_feed"})],
                   [("post", {"content": "two tiers"})], "done")  # fmt: skip
    r = make_router("two_tier", [counter, feed], llm=llm)
    assert isinstance(r, TwoTierRouter) and r.names == ["ask_counter", "social_feed"]
    res = await r.route("post 'two tiers'", agent_id="alice")
    assert res.ok and res.plan == {"module": "social_feed"} and res.router == "two_tier"
    assert [c["tool"] for c in res.calls] == ["post"] and res.llm_calls == 3
    first = llm.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == ["choose_module"]
    second_tools = {t["function"]["name"] for t in llm.requests[1]["tools"]}
    assert second_tools == set(feed.tool_specs())  # only the chosen module's tools
    wrong = make_router("two_tier", [counter, feed],
                        llm=scripted([("choose_module", {"module": "bank"})]))  # fmt: skip
    out = await wrong.route("x", agent_id="a")
    assert not out.ok and "choose one of" in (out.error or "")


def test_request_shape_and_literal_rewrite() -> None:
    assert request_shape("Like post 0.bob.3 now") == ("like post <v> now", ["0.bob.3"])
    c = CodeCache(4)
    sigs = ("like(post_id: str)",)
    c.put("like post 0.bob.3 twice", sigs, "like('0.bob.3')\nx = 2\nx")
    assert c.get("like post 1.carol.0 twice", sigs) == "like('1.carol.0')\nx = 2\nx"
    assert c.get("like post 1.carol.0 twice", ("like(post_id: int)",)) is None  # new API
    assert c.get("follow carol", sigs) is None
    assert c.stats() == {"hits": 1, "misses": 2, "entries": 1}
    # an old literal that is also an index: rewriting it would change the program's logic
    c.put("like item 0", sigs, "items = read_feed()\nlike(items[0]['id'])\nlike('0')")
    assert c.get("like item 1", sigs) is None
    c.put("like post 7", sigs, "p = read_feed()[0]\nlike(7)")
    assert c.get("like post 9", sigs) == "p = read_feed()[0]\nlike(9)"


async def test_codegen_cache_reuses_code_for_same_shape(feed: SocialFeed, scripted) -> None:  # type: ignore[no-untyped-def]
    first, second = sorted(feed.posts)
    llm = scripted(f"like('{first}')")
    r = CodeGenRouter(feed, llm=llm, isolation="inline")
    a = await r.route(f"like post {first}", agent_id="alice")
    b = await r.route(f"like post {second}", agent_id="alice")
    assert a.ok and b.ok and a.cache_hit is False and b.cache_hit is True
    assert b.code == f"like('{second}')" and len(llm.requests) == 1
    assert r.stats.cache_hits == 1 and r.stats.cache_misses == 1


async def test_pool_reuses_workers_and_serves_new_loops() -> None:
    pool = SandboxPool(2)
    try:
        for _ in range(5):
            assert (await pool.run("1 + 1", {})).value == 2
        assert pool.stats.spawned == 1 and pool.stats.requests == 5

        async def from_thread() -> int:
            out = await pool.run("sum([1, 2, 3])", {})
            return int(out.value)

        # another event loop (another thread, as a notebook kernel may run one)
        assert await asyncio.to_thread(asyncio.run, from_thread()) == 6
        # a cancelled request (a step timeout) kills its worker; the pool keeps serving
        spin = Limits(max_steps=10**15, max_seconds=10**6, kill_after_seconds=30)
        task = asyncio.ensure_future(pool.run("while True:\n    pass", {}, spin))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await pool.run("2 * 21", {})).value == 42
    finally:
        pool.close()


@pytest.mark.parametrize("kind", ["codegen", "plan", "react"])
async def test_simulator_plays_along(feed: SocialFeed, kind: str) -> None:
    llm = LLMClient("sim/instant", seed=3)
    r = make_router(kind, feed, llm=llm)
    oks = 0
    for i in range(12):
        res = await r.route(f"read the feed, then like a post ({i})", agent_id="alice")
        oks += res.ok
        for call in res.calls:
            if call["tool"] == "like":  # ids are copied from what the model was shown
                assert call["arguments"]["post_id"] in feed.posts
    assert oks >= 10, r.stats
    if kind == "codegen":
        assert r.stats.rejections == 0  # the simulator's code passes the sandbox


async def test_simulator_invalid_share_is_configurable(feed: SocialFeed) -> None:
    async def share(p: float) -> float:
        llm = LLMClient("sim/instant", seed=4, sim_p_invalid_args=p, sim_tool_call_p=1.0)
        bad = 0
        for i in range(80):
            resp = await llm.complete(
                [{"role": "user", "content": f"feed: {json.dumps(feed.read_feed(agent_id='a', source='recent'))} {i}"}],
                tools=feed.tool_schemas(),
            )  # fmt: skip
            tc = resp.tool_calls[0]
            try:
                feed.get_tool(tc.name).validate(tc.arguments)
                if "post_id" in tc.arguments and tc.arguments["post_id"] not in feed.posts:
                    bad += 1
            except Exception:
                bad += 1
        return bad / 80

    assert await share(0.0) <= 0.05
    assert 0.2 <= await share(0.5) <= 0.8


async def test_pool_refuses_like_the_inline_sandbox() -> None:
    from agentlab.env import Sandbox
    from agentlab.errors import ToolError

    async def leak(args: list, kwargs: dict) -> object:
        return object()

    pool = SandboxPool(1)
    try:
        for box in (pool, None):
            with pytest.raises(ToolError, match="plain data"):
                if box is None:
                    await Sandbox({"leak": leak}).run("leak()")
                else:
                    await box.run("leak()", {"leak": leak})
        with pytest.raises(ToolError, match="clash with builtins"):
            await pool.run("1", {"len": leak})
    finally:
        pool.close()
