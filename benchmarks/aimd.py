"""AIMD vs fixed concurrency against the rate-limited and slot-limited simulated servers.

A closed loop of many agents (more than any limit) calls ``LLMClient`` back to back for a
stretch of virtual time (``VirtualClock``: minutes of traffic in seconds of CPU). After a
warm-up (first 25% of the time) we report throughput as % of the server's capacity, the
share of attempts answered 429, failed calls, mean concurrency limit and end-to-end latency
percentiles (what an agent waits: limiter queue + server queue + retries + generation) and
the mean time requests spend queued inside the server (``srv_wait_s``): with a closed
loop and FIFO queues, end-to-end latency is set by Little's law and equal for any policy
that keeps the server busy; what AIMD changes is *where* requests wait (in the client,
cheaply, instead of in the server, where they hold memory and hit server timeouts).

    python benchmarks/aimd.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from agentlab.core.clock import VirtualClock
from agentlab.errors import LLMError
from agentlab.llm import LLMClient

POLICIES: dict[str, dict[str, Any]] = {
    "aimd": {},
    "fixed-16": {"concurrency": 16},
    "fixed-256": {"concurrency": 256},
}


async def run_one(profile: str, policy: str, duration: float, workers: int) -> dict[str, Any]:
    clock = VirtualClock()
    client = LLMClient(f"sim/{profile}", seed=0, **POLICIES[policy]).with_clock(clock)
    warm = duration * 0.25
    ok_ends: list[float] = []
    lat: list[float] = []
    waits: list[float] = []
    failed = 0
    limits: list[int] = []
    snap: dict[str, Any] = {}
    stop = False

    async def agent(i: int) -> None:
        nonlocal failed
        k = 0
        while not stop:
            k += 1
            msgs = [{"role": "user", "content": f"agent {i} turn {k}: what next?"}]
            try:
                r = await client.complete(msgs)
            except LLMError as exc:
                if exc.record.end >= warm:  # type: ignore[attr-defined]
                    failed += 1
                continue
            if r.record.end >= warm:
                ok_ends.append(r.record.end)
                lat.append(r.record.latency)
                waits.append(r.record.queue_wait or 0.0)

    async def sampler() -> None:
        nonlocal stop
        await clock.sleep(warm)
        snap.update(client.server_metrics())
        while clock.now() < duration:
            await clock.sleep(1.0)
            limits.append(client.limit)
        stop = True

    tasks = [asyncio.ensure_future(agent(i)) for i in range(workers)]
    await sampler()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    end = client.server_metrics()
    window = duration - warm
    p = client.profile
    assert p is not None
    cap = p.capacity_rps(min(p.mean_completion(), p.max_completion), 12)
    attempts = end["requests_total"] - snap["requests_total"]
    rejected = end["rejected_total"] - snap["rejected_total"]
    done = [e for e in ok_ends if e <= duration]
    lat.sort()
    return {
        "profile": profile,
        "policy": policy,
        "capacity_rps": round(cap, 2),
        "throughput_rps": round(len(done) / window, 2),
        "pct_capacity": round(100 * len(done) / window / cap, 1),
        "pct_429": round(100 * rejected / max(1, attempts), 2),
        "failed_calls": failed,
        "mean_limit": round(statistics.fmean(limits), 1) if limits else None,
        "srv_wait_s": round(statistics.fmean(waits), 2) if waits else None,
        "p50_s": round(lat[len(lat) // 2], 2) if lat else None,
        "p99_s": round(lat[int(len(lat) * 0.99)], 2) if lat else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter virtual time (< 1 minute)")
    ap.add_argument("--json", default=None, help="write the figures to this path")
    ap.add_argument("--workers", type=int, default=512)
    args = ap.parse_args()
    duration = 180.0 if args.quick else 1200.0
    rows = []
    t0 = time.perf_counter()
    for profile in ("cloud", "vllm-3b"):
        for policy in POLICIES:
            rows.append(asyncio.run(run_one(profile, policy, duration, args.workers)))
    wall = time.perf_counter() - t0
    cols = [
        "profile",
        "policy",
        "capacity_rps",
        "throughput_rps",
        "pct_capacity",
        "pct_429",
        "failed_calls",
        "mean_limit",
        "srv_wait_s",
        "p50_s",
        "p99_s",
    ]
    print(
        f"AIMD benchmark: {duration:.0f} virtual s per run (warm-up 25%), "
        f"{args.workers} closed-loop agents, {wall:.1f} s wall"
    )
    print(" | ".join(f"{c:>12}" for c in cols))
    for r in rows:
        print(" | ".join(f"{r[c]!s:>12}" for c in cols))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"duration_s": duration, "workers": args.workers, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
