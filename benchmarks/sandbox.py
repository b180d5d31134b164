"""Codegen requests per second: isolated sandbox (worker processes) vs in process.

Each request runs a small generated program against ``social_feed`` (a read, a filter, a
write) through :class:`~agentlab.env.CodeGenRouter`, with the code cache on (the LLM is
asked once), so the numbers measure the sandbox path: static checks, interpretation, tool
calls — and, isolated, the pipe round trips to a worker per program and per tool call.

    .venv/bin/python benchmarks/sandbox.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from agentlab.core import CallRecord, LLMResponse
from agentlab.env import CodeGenRouter, create_env
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


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 requests per cell")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = ap.parse_args()
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
