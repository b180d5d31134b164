"""Codegen requests per second: isolated sandbox (worker processes) vs in process.

Each request runs a small generated program against ``social_feed`` (a read, a filter, a
write) through :class:`~agentlab.env.CodeGenRouter`, with the code cache on (the LLM is
asked once), so the numbers measure the sandbox path: static checks, interpretation, tool
calls — and, isolated, the pipe round trips to a worker per program and per tool call.

    .venv/bin/python benchmarks/sandbox.py [--quick] [--json PATH]
    .venv/bin/python benchmarks/sandbox.py --dos [--quick]

``--dos`` instead measures a benign request's latency (a program calling a 0.2 s tool)
alone and under the denial-of-service classes of issue 23: two programs of 16 calls to a
slow tool, programs hitting the request deadline, a flood of failing programs (worker
starts counted) and a spinning program sent from a second event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from typing import Any

from agentlab.core import CallRecord, LLMResponse
from agentlab.env import CodeGenRouter, Limits, create_env
from agentlab.env.sandbox_pool import SandboxPool

PROGRAM = (
    "posts = read_feed(limit=5, source='recent')\n"
    "mine = [p for p in posts if p['author'] != 'bench']\n"
    "if mine:\n"
    "    like(mine[0]['id'])\n"
    "len(mine)"
)


class _OneProgram:
    """An LLM that always writes PROGRAM (the cache asks it once per request shape)."""

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> LLMResponse:
        return LLMResponse(text=PROGRAM, record=CallRecord(request_id="b", model="x", start=0))


async def _measure(isolation: str, n: int, concurrency: int, pool: SandboxPool | None) -> float:
    feed = create_env("social_feed", seed=0)
    for i in range(20):
        feed.post(f"post {i}", agent_id=f"user{i % 5}")
    feed.step(0)
    router = CodeGenRouter(feed, llm=_OneProgram(), isolation=isolation, pool=pool)
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            res = await router.route("like the newest post", agent_id=f"agent{i % 50}")
            assert res.ok, res.observation

    await one(0)  # warm: cache filled, worker started
    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.perf_counter() - t0)


async def main(quick: bool, n: int | None = None) -> list[dict[str, Any]]:
    """Rows of requests/s, in process and isolated, at concurrency 1 and 8."""
    n = n or (100 if quick else 1000)
    rows = []
    pool = SandboxPool(2)
    pool.warm()
    try:
        for conc in (1, 8):
            inline = await _measure("inline", n, conc, None)
            isolated = await _measure("process", n, conc, pool)
            rows.append({"concurrency": conc, "requests": n, "inline_rps": round(inline, 1),
                         "isolated_rps": round(isolated, 1),
                         "isolated_over_inline": round(isolated / inline, 3)})  # fmt: skip
    finally:
        pool.close()
    return rows


def _tool(seconds: float) -> Any:
    async def tool(args: list[Any], kwargs: dict[str, Any]) -> Any:
        await asyncio.sleep(seconds)
        return 1

    return tool


async def _quietly(coro: Any) -> Any:
    try:
        return await coro
    except Exception as exc:  # the attacks are refused or killed: that is their result
        return exc


async def dos(quick: bool) -> list[dict[str, Any]]:
    """Benign latency (median, p95, max in ms) alone and under each DoS class."""
    slow = 0.25 if quick else 1.0
    pool = SandboxPool(2)
    pool.warm()

    async def benign() -> float:
        t0 = time.perf_counter()
        out = await pool.run("slow() + 1", {"slow": _tool(0.2)})
        assert out.value == 2
        return time.perf_counter() - t0

    def spin_in_another_loop() -> Any:
        spin = Limits(max_steps=10**15, max_seconds=10**6, kill_after_seconds=1.5)
        return asyncio.run(_quietly(pool.run("while True:\n    pass", {}, spin)))

    async def failing() -> None:
        until = time.perf_counter() + (5 if quick else 20)
        while time.perf_counter() < until:
            for code in ("{}['missing']", "while True:\n    pass", "bad()"):
                await _quietly(pool.run(code, {"bad": _bad}))

    classes: dict[str, Any] = {
        "none": lambda: asyncio.sleep(3 if quick else 10),
        "2 programs x 16 slow tool calls": lambda: asyncio.gather(*(
            _quietly(pool.run("for i in range(16):\n    slow()", {"slow": _tool(slow)}))
            for _ in range(2))),
        "request deadline (1.5 s) hit in tools": lambda: asyncio.gather(*(
            _quietly(pool.run("for i in range(16):\n    slow()", {"slow": _tool(0.5)},
                              Limits(max_request_seconds=1.5))) for _ in range(2))),
        "failing programs (KeyError, refusal, tool error)": failing,
        "spinning program from another event loop": lambda: asyncio.to_thread(
            spin_in_another_loop),
    }  # fmt: skip
    rows = []
    try:
        for label, attack in classes.items():
            await asyncio.to_thread(pool.warm)
            spawned = pool.stats.spawned
            task = asyncio.ensure_future(attack())
            lat: list[float] = []
            t0 = time.perf_counter()
            while not task.done() or not lat:
                lat.append(await benign())
            await task
            lat.sort()
            rows.append({"attack": label, "benign_requests": len(lat),
                         "median_ms": round(1000 * lat[len(lat) // 2], 1),
                         "p95_ms": round(1000 * lat[math.ceil(0.95 * len(lat)) - 1], 1),
                         "max_ms": round(1000 * lat[-1], 1),
                         "seconds": round(time.perf_counter() - t0, 1),
                         "worker_starts": pool.stats.spawned - spawned})  # fmt: skip
    finally:
        pool.close()
    return rows


async def _bad(args: list[Any], kwargs: dict[str, Any]) -> Any:
    raise ValueError("refused by the tool")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 requests per cell")
    ap.add_argument("--dos", action="store_true", help="benign latency under DoS classes")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = ap.parse_args()
    if args.dos:
        for row in asyncio.run(dos(args.quick)):
            print(row)
        raise SystemExit(0)
    rows = asyncio.run(main(args.quick))
    print(
        f"{'concurrency':>11} {'requests':>9} {'in-process/s':>13} {'isolated/s':>11} {'ratio':>6}"
    )
    for r in rows:
        print(f"{r['concurrency']:>11} {r['requests']:>9} {r['inline_rps']:>13} "
              f"{r['isolated_rps']:>11} {r['isolated_over_inline']:>6}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "sandbox", "rows": rows}, f, indent=2)
