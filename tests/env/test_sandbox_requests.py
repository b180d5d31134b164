"""One request, one worker, start to end (issue 23): a failed program keeps its worker, a
lone surrogate crosses the pipe, a request has one deadline and one tool-call count (a
tool that calls a router again included), and a second event loop is served fairly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentlab.env import CodeGenRouter, Limits, SocialFeed, create_env
from agentlab.env.sandbox_pool import SandboxPool
from agentlab.errors import AgentlabError, ToolError, UnsafeCodeError


@pytest.fixture()
def pool() -> Iterator[SandboxPool]:
    p = SandboxPool(1)
    p.warm()
    yield p
    p.close()


@pytest.fixture()
def feed() -> SocialFeed:
    env = create_env("social_feed", seed=0)
    assert isinstance(env, SocialFeed)
    env.post("hello town", agent_id="bob")
    env.post("odd \ud800 text", agent_id="carol")  # a lone surrogate: legal in a str
    env.step(0)
    return env


def _worker_pids(pool: SandboxPool) -> set[int]:
    return {w.proc.pid for w in pool._idle if w.alive()}


async def test_a_failed_program_keeps_its_worker(pool: SandboxPool, feed: SocialFeed, scripted):  # type: ignore[no-untyped-def]
    first = _worker_pids(pool)
    assert len(first) == 1
    failing = [
        "x = {}\nx['missing']",  # KeyError
        "while True:\n    pass",  # refused at run time (step budget)
        "like('no-such-post')",  # a tool refuses
        "follow('')",
    ]
    routers = [CodeGenRouter(feed, llm=scripted(code), pool=pool) for code in failing]
    benign = CodeGenRouter(feed, llm=scripted("1 + 1"), pool=pool)

    async def bad(i: int) -> Any:
        return await routers[i % len(routers)].route(f"attack {i}", agent_id="mallory")

    async def good(i: int) -> Any:
        return await benign.route(f"sum {i}", agent_id="alice")

    results = await asyncio.gather(*(f(i) for i in range(12) for f in (bad, good)))
    bads, goods = results[0::2], results[1::2]
    assert all(not r.ok for r in bads), [r.observation for r in bads]
    assert {r.error_type for r in bads} <= {"ToolError", "UnsafeCodeError", "ToolArgumentError"}
    assert any("KeyError" in (r.error or "") for r in bads)
    assert all(r.ok and r.value == 2 for r in goods), [r.observation for r in goods]
    stats = pool.stats
    assert stats.killed == stats.died == stats.retired == 0, stats
    assert first <= _worker_pids(pool), "the worker that ran failing programs was replaced"
    assert stats.spawned <= 3, stats  # was one start per failed program


async def test_a_lone_surrogate_crosses_the_pipe(pool: SandboxPool, feed: SocialFeed, scripted):  # type: ignore[no-untyped-def]
    before = pool.stats.to_dict()
    code = (
        "p = read_feed(source='recent')\n"
        "odd = [x['content'] for x in p if x['author'] == 'carol'][0]\n"
        "print(odd)\n"
        "post('echo ' + odd)\n"
        "[odd, '\\ud800']"
    )
    for reader in ("r1", "r2", "r3"):
        res = await CodeGenRouter(feed, llm=scripted(code), pool=pool).route("x", agent_id=reader)
        assert res.ok, res.observation
        assert res.value == ["odd \ud800 text", "\ud800"]
        assert "\ud800" in res.observation or "\\ud800" in res.observation
    after = pool.stats.to_dict()
    assert after["died"] == before["died"] and after["spawned"] == before["spawned"], after
    assert [p[3]["content"] for p in feed.pending] == ["echo odd \ud800 text"] * 3


async def test_a_request_has_one_deadline_tool_time_included(pool: SandboxPool) -> None:
    async def slow(args: list[Any], kwargs: dict[str, Any]) -> Any:
        await asyncio.sleep(0.4)
        return 1

    limits = Limits(max_request_seconds=1.5)
    t0 = time.monotonic()
    with pytest.raises(UnsafeCodeError, match=r"deadline of 1\.5 s"):
        await pool.run("n = 0\nfor i in range(12):\n    n += slow()\nn", {"slow": slow}, limits)
    assert time.monotonic() - t0 < 1.5 + 3.0
    assert (await pool.run("1 + 1", {})).value == 2  # a fresh worker serves on


async def test_a_tool_that_routes_again_shares_the_request(feed: SocialFeed, scripted) -> None:  # type: ignore[no-untyped-def]
    pool = SandboxPool(1)  # one turn: a nested request that waited for it would deadlock
    calls = 0

    async def fan(args: list[Any], kwargs: dict[str, Any]) -> Any:
        nonlocal calls
        calls += 1
        try:  # a tool that asks a sub-agent: generated code calling this tool again
            out = await pool.run("fan()\nfan()\nfan()\nfan()", {"fan": fan})
            return out.value
        except AgentlabError as exc:
            return str(exc)[:80]

    try:
        with pytest.raises((UnsafeCodeError, ToolError)) as err:
            await asyncio.wait_for(pool.run("for i in range(6):\n    fan()", {"fan": fan}), 60)
        assert "more than 16 tool calls" in str(err.value), err.value
        assert calls <= 16  # was 4,118 for one request
        ok = await asyncio.wait_for(pool.run("fan()", {"fan": fan}, Limits(max_tool_calls=3)), 60)
        assert "nested more than" in str(ok.value) or "tool calls" in str(ok.value), ok
    finally:
        pool.close()


@pytest.mark.slow
def test_a_second_event_loop_does_not_eat_a_programs_time() -> None:
    """Two event loops (two threads, as a kernel and a Ray actor may run) share one pool:
    a benign program with a few tool calls is not killed as "ran longer than 3 s" while
    the other loop keeps the workers busy."""
    pool = SandboxPool(2)
    pool.warm()
    spin = Limits(max_steps=10**9, max_seconds=100, kill_after_seconds=30)
    busy = "n = 0\nwhile n < 60000:\n    n += 1\nn"

    async def other_loop() -> list[Any]:
        async def stream() -> list[Any]:
            return [(await pool.run(busy, {}, spin)).value for _ in range(3)]

        return await asyncio.gather(stream(), stream(), stream())

    async def this_loop() -> list[Any]:
        async def ping(args: list[Any], kwargs: dict[str, Any]) -> Any:
            return 1

        await asyncio.sleep(0.3)  # the other loop is busy by now
        code = "n = 0\nfor i in range(16):\n    n += ping()\nn"
        out = []
        for _ in range(3):
            out.append((await pool.run(code, {"ping": ping})).value)
        return out

    async def both() -> tuple[Any, Any]:
        other = asyncio.ensure_future(asyncio.to_thread(asyncio.run, other_loop()))
        mine = await this_loop()
        return mine, await other

    try:
        mine, theirs = asyncio.run(both())
        assert mine == [16, 16, 16]
        assert all(v == 60000 for s in theirs for v in s)
        assert pool.stats.killed == 0, pool.stats
    finally:
        pool.close()
