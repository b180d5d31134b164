"""Denial-of-service classes against the isolated sandbox: each ends in a clear refusal or a
killed worker within its time limit, while a concurrent benign request keeps being served
within 2x its normal latency."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentlab.env import CodeGenRouter, Limits, SocialFeed, create_env
from agentlab.env.render import bounded_json, logical_size
from agentlab.env.routers_base import _render
from agentlab.env.sandbox_pool import SandboxPool
from agentlab.errors import UnsafeCodeError

ALIASED = "a = [0]\nb = [0]\nfor i in range(60):\n    a = [a, a]\n    b = [b, b]\n"
ALIASED_T = "t = (0,)\nfor i in range(60):\n    t = (t, t)\n"

# (label, code, expected error fragment): refused by the interpreter (default limits)
DOS = [
    ("== on aliased nested lists", ALIASED + "a == b", "comparison on a value of logical size"),
    ("< on aliased nested lists", ALIASED + "a < b", "comparison on a value of logical size"),
    ("in on aliased nested lists", ALIASED + "b in [a]", "comparison on a value"),
    ("hash nested tuple as dict key", ALIASED_T + "d = {}\nd[t] = 1", "hashing a key"),
    ("hash nested tuple in dict literal", ALIASED_T + "{t: 1}", "hashing a key"),
    ("dict lookup by nested tuple", ALIASED_T + "d = {1: 2}\nd.get(t)", ".get()"),
    ("sorted over aliased values", ALIASED + "sorted([a, b])", "sorted() on a value"),
    ("min over aliased values", ALIASED + "min(a, b)", "min() on a value"),
    ("max over aliased values", ALIASED + "max([a, b])", "max() on a value"),
    ("list.index of aliased value", ALIASED + "[a].index(b)", ".index() on a value"),
    ("str(exc) of KeyError with huge key", ALIASED_T + "d = {}\nd[t]", "hashing a key"),
    ("render huge value with str", ALIASED + "str(a)", "too large to convert to text"),
    ("render huge value in f-string", ALIASED + "f'{a}'", "too large to convert to text"),
    ("render huge return value", ALIASED + "a", "too large to return"),
    ("join over a huge string", "s = 'x' * 10000\n('y' * 10000).join(s)", "joined string"),
    ("join over a dict", "d = {str(i): 1 for i in range(1000)}\n('y' * 5000).join(d)",
     "joined string"),
    ("endless loop", "while True:\n    pass", "step budget"),
    ("memory via doubling", "s = 'ab'\nwhile True:\n    s = s + s", "exceeds the limit"),
]  # fmt: skip


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    p = SandboxPool(2)
    p.warm()
    yield p
    p.close()


@pytest.fixture()
def feed() -> SocialFeed:
    env = create_env("social_feed", seed=0)
    assert isinstance(env, SocialFeed)
    env.post("hello town", agent_id="bob")
    env.step(0)
    return env


class _Probe:
    """A benign request from another agent: codegen through the pool, a tool that waits."""

    def __init__(self, pool: SandboxPool) -> None:
        self.pool = pool

    async def once(self) -> float:
        async def slow_read(args: list[Any], kwargs: dict[str, Any]) -> Any:
            await asyncio.sleep(0.2)  # an env tool doing I/O: needs a free event loop
            return [{"id": "0.bob.0", "likes": 0}]

        t0 = time.perf_counter()
        out = await self.pool.run("len(slow_read())", {"slow_read": slow_read})
        assert out.value == 1
        return time.perf_counter() - t0

    async def baseline(self) -> float:
        # both workers started and idle (a worker killed by the previous test is replaced
        # in the background): the probe measures serving, not a process start-up
        await asyncio.to_thread(self.pool.warm)
        return statistics.median([await self.once() for _ in range(3)])

    async def during(self, attack: Any) -> tuple[Any, list[float]]:
        task = asyncio.ensure_future(attack)
        lat: list[float] = []
        while not task.done() or not lat:
            lat.append(await self.once())
        return await task, lat

    async def served(
        self, make_attack: Any, tries: int = 3
    ) -> tuple[list[Any], float, list[float]]:
        """Attack results, and the normal and concurrent latencies of the first trial whose
        benign requests stayed within 2x (else the last trial's). A blocked event loop or
        a starved pool fails every trial; up to three absorb a scheduling stall of the
        shared 2-core test machine."""
        results = []
        for _ in range(tries):
            normal = await self.baseline()
            res, lat = await self.during(make_attack())
            results.append(res)
            if max(lat) <= 2 * normal:
                break
        return results, normal, lat


async def _attack_router(router: CodeGenRouter) -> Any:
    t0 = time.perf_counter()
    res = await router.route("attack", agent_id="mallory")
    return res, time.perf_counter() - t0


@pytest.mark.parametrize(("label", "code", "fragment"), DOS, ids=[d[0] for d in DOS])
async def test_dos_refused_while_others_are_served(
    pool: SandboxPool, feed: SocialFeed, scripted, label: str, code: str, fragment: str
) -> None:
    router = CodeGenRouter(feed, llm=scripted(code), pool=pool)
    results, normal, lat = await _Probe(pool).served(lambda: _attack_router(router))
    for res, took in results:
        assert not res.ok and res.error_type == "UnsafeCodeError", res.observation
        assert fragment in (res.error or ""), res.error
        assert len(res.observation) <= 2000
        assert took < Limits().kill_after_seconds + 1.0
    assert max(lat) <= 2 * normal, (normal, lat)


# OS-level guards: the interpreter's own budgets relaxed so only the worker limits remain
KILLS = [
    ("C-level compare hang", ALIASED + "a == b",
     Limits(max_deep=10**18, kill_after_seconds=1.5), "worker process was killed"),
    ("C-level hash hang", ALIASED_T + "{t: 1}",
     Limits(max_deep=10**18, kill_after_seconds=1.5), "worker process was killed"),
    ("endless loop past the step budget", "while True:\n    pass",
     Limits(max_steps=10**15, max_seconds=10**6, kill_after_seconds=1.5),
     "worker process was killed"),
    ("memory bomb", "x = 'a' * (2 * 10**9)\nlen(x)",
     Limits(max_len=10**12, max_alloc=10**13, max_memory_mb=256), "memory"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "code", "limits", "fragment"), KILLS, ids=[k[0] for k in KILLS])
async def test_worker_limits_cost_one_request(
    pool: SandboxPool, feed: SocialFeed, scripted, label: str, code: str, limits: Limits,
    fragment: str,
) -> None:  # fmt: skip
    router = CodeGenRouter(feed, llm=scripted(code), pool=pool, limits=limits)
    before = pool.stats.to_dict()
    results, normal, lat = await _Probe(pool).served(lambda: _attack_router(router))
    for res, took in results:
        assert not res.ok and res.error_type == "UnsafeCodeError", res.observation
        assert fragment in (res.error or ""), res.error
        assert took < limits.kill_after_seconds + 1.5
    assert max(lat) <= 2 * normal, (normal, lat)
    after = pool.stats.to_dict()
    replaced = sum(after[k] - before[k] for k in ("killed", "died", "retired"))
    assert replaced >= len(results), (before, after)  # every attack cost its worker
    # the pool still serves, with a fresh worker
    ok = await CodeGenRouter(feed, llm=scripted("1 + 1"), pool=pool).route("x", agent_id="a")
    assert ok.ok and ok.value == 2


async def test_keyerror_message_is_bounded(pool: SandboxPool, feed: SocialFeed, scripted) -> None:
    # a big (not aliased) key: allowed to hash, but its repr must not flood the message
    code = "k = tuple(range(5000))\nd = {}\nd[k]"
    res = await CodeGenRouter(feed, llm=scripted(code), pool=pool).route("x", agent_id="a")
    assert not res.ok and "KeyError" in (res.error or "")
    assert len(res.error or "") < 400


def test_bounded_rendering_costs_its_budget_only() -> None:
    a: Any = [0]
    for _ in range(60):
        a = [a, a]  # logical size 2**60
    t0 = time.perf_counter()
    text = _render(a, 2000)
    assert len(text) <= 2000 and text.endswith("(truncated)")
    assert bounded_json({"k": (1, 2), 3: None}, 100) == json_of({"k": [1, 2], "3": None})
    with pytest.raises(Exception, match="logical size"):
        logical_size(a, 10_000)
    assert time.perf_counter() - t0 < 0.5


def json_of(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


async def test_inline_and_process_agree(pool: SandboxPool, feed: SocialFeed, scripted) -> None:
    code = "p = read_feed(source='recent')\nx = {(1, 2): [p[0]['id']], 'n': len(p)}\nprint(x)\nx"
    a = await CodeGenRouter(feed, llm=scripted(code), pool=pool).route("x", agent_id="a")
    b = await CodeGenRouter(feed, llm=scripted(code), isolation="inline").route("x", agent_id="a")
    assert a.ok and b.ok and a.value == b.value == {(1, 2): ["0.bob.0"], "n": 1}
    assert a.observation == b.observation


@pytest.mark.parametrize("isolation", ["inline", "process"])
async def test_aliased_or_cyclic_values_stay_bounded_everywhere(
    pool: SandboxPool, feed: SocialFeed, scripted, isolation: str
) -> None:
    cases = [
        (ALIASED + "post(a)", "arguments of post()"),  # pydantic would walk 2**60 items
        ("a = []\na.append(a)\nstr(a)", "too large to convert to text"),
        ("a = []\na.append(a)\nb = []\nb.append(b)\na == b", "comparison"),
        ("d = {}\nd['k'] = d\nd", "too large" if isolation == "process" else ""),
    ]
    for code, fragment in cases:
        router = CodeGenRouter(feed, llm=scripted(code), pool=pool, isolation=isolation)
        t0 = time.perf_counter()
        res = await router.route("attack", agent_id="mallory")
        assert time.perf_counter() - t0 < 2.0
        assert fragment in (res.error or res.observation), (code, res)
        assert len(res.observation) <= 2000 and len(json_of(res.to_dict())) < 100_000
    assert not feed.pending


async def test_isolation_is_what_keeps_the_loop_free(
    pool: SandboxPool, feed: SocialFeed, scripted
) -> None:
    # Control: a program allowed to compare two 2**19-item aliased lists (guard relaxed)
    # spends about a second in the pricing walk and the C compare. In process that second
    # blocks the event loop every agent shares; in a worker the probe is served as usual.
    code = ALIASED.replace("range(60)", "range(18)") + "a == b"
    relaxed = Limits(max_deep=10**8, max_steps=10**9, max_seconds=100, kill_after_seconds=30)
    probe = _Probe(pool)
    inline = CodeGenRouter(feed, llm=scripted(code), limits=relaxed, isolation="inline")
    normal = await probe.baseline()
    (res, took), lat = await probe.during(_attack_router(inline))
    assert res.ok and res.value is True
    if took > 3 * normal:  # long enough to tell on this machine
        assert max(lat) > 2 * normal, (normal, lat, took)
    isolated = CodeGenRouter(feed, llm=scripted(code), limits=relaxed, pool=pool)
    results, normal, lat = await probe.served(lambda: _attack_router(isolated))
    assert all(r.ok and r.value is True for r, _ in results), results
    assert max(lat) <= 2 * normal, (normal, lat)


# --- issue 23: inline isolation, slow tools, the request deadline, a second event loop -----

COLLIDING = "P = 2**61 - 1\nr = range(0, 10000 * P, P)\nd = dict(zip(r, r))\nlen(d)"
HUGE = "a = [0] * 1000\nb = [a] * 1000\nc = [b] * 1000\nd = [c] * 1000\nd"  # 10**12 logical


@pytest.mark.parametrize("isolation", ["inline", "process"])
async def test_colliding_keys_and_huge_values_are_refused_everywhere(
    pool: SandboxPool, feed: SocialFeed, scripted, isolation: str
) -> None:
    # Inline, the first froze the event loop (13.8 s measured) and the second came back
    # unpriced: repr() of the result never finished.
    for code, fragment in [
        (COLLIDING, "integer dict keys must be smaller"),
        (COLLIDING.replace("d = dict(zip(r, r))", "d = {}\nd.update(zip(r, r))"),
         "integer dict keys must be smaller"),
        ("P = 2**61 - 1\n{i * P: 1 for i in range(100)}", "integer dict keys must be smaller"),
        (HUGE, "too large to return"),
    ]:  # fmt: skip
        router = CodeGenRouter(feed, llm=scripted(code), pool=pool, isolation=isolation)
        t0 = time.perf_counter()
        res = await router.route("attack", agent_id="mallory")
        assert not res.ok and res.error_type == "UnsafeCodeError", (code, res.observation)
        assert fragment in (res.error or ""), res.error
        assert time.perf_counter() - t0 < 2.0
        assert len(repr(res)) < 10_000
    ok = await CodeGenRouter(feed, llm=scripted("len({i: i for i in range(5000)})"),
                             isolation=isolation, pool=pool).route("x", agent_id="a")  # fmt: skip
    assert ok.ok and ok.value == 5000  # ordinary int keys are fine


def _slow_tool(seconds: float) -> Any:
    async def slow(args: list[Any], kwargs: dict[str, Any]) -> Any:
        await asyncio.sleep(seconds)  # an env tool waiting on I/O (or an LLM)
        return 1

    return slow


async def _timed(coro: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    try:
        res: Any = await coro
    except Exception as exc:  # the refusal is the result
        res = exc
    return res, time.perf_counter() - t0


async def test_slow_tool_calls_do_not_starve_the_pool(pool: SandboxPool) -> None:
    """Two programs of 16 calls to a slow tool hold both workers' programs for seconds;
    a program waiting on a tool gives its turn away, so others are served as usual
    (was: benign p95 15.9 s with a 1 s tool)."""
    code = "n = 0\nfor i in range(16):\n    n += slow()\nn"

    async def attack() -> Any:
        return await asyncio.gather(
            *(_timed(pool.run(code, {"slow": _slow_tool(0.2)})) for _ in range(2))
        )

    results, normal, lat = await _Probe(pool).served(attack)
    for pair in results:
        assert [r.value for r, _ in pair] == [16, 16], pair
    assert max(lat) <= 2 * normal, (normal, lat)


async def test_the_request_deadline_costs_one_request(pool: SandboxPool) -> None:
    limits = Limits(max_request_seconds=1.5)
    code = "for i in range(16):\n    slow()"

    async def attack() -> Any:
        return await asyncio.gather(
            *(_timed(pool.run(code, {"slow": _slow_tool(0.5)}, limits)) for _ in range(2))
        )

    before = pool.stats.killed
    results, normal, lat = await _Probe(pool).served(attack)
    for pair in results:
        for res, took in pair:
            assert isinstance(res, UnsafeCodeError) and "deadline of 1.5 s" in str(res), res
            assert took < 1.5 + 1.5
    assert pool.stats.killed - before >= 2 * len(results)
    assert max(lat) <= 2 * normal, (normal, lat)


async def test_an_attack_from_another_event_loop(pool: SandboxPool) -> None:
    """A program spinning in C, sent from another event loop (thread), costs its worker;
    this loop's requests are served as usual and none is killed for time it did not use."""
    spin = Limits(max_deep=10**18, kill_after_seconds=1.5)

    async def attack() -> Any:
        return await asyncio.to_thread(asyncio.run, _timed(pool.run(ALIASED + "a == b", {}, spin)))

    results, normal, lat = await _Probe(pool).served(attack)
    for res, took in results:
        assert isinstance(res, UnsafeCodeError) and "worker process was killed" in str(res), res
        assert took < 1.5 + 1.5
    assert max(lat) <= 2 * normal, (normal, lat)
