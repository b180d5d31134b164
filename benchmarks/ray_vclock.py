"""What virtual time across Ray workers would cost per event (design: runtime/README.md).

Three measurements, side by side in one run:

1. **Ray actor round trip**: one async actor method call awaited from the driver and from
   inside a Ray task, sequentially (latency) and with 64 calls in flight (throughput).
2. **Conservative time-advance barrier**: K Ray worker tasks, each with M agent
   coroutines that sleep E times on virtual time (seeded random durations). A clock actor
   advances virtual time only when *every* worker is blocked on it: each worker sends its
   new wake-up requests when all its agents wait, the actor pops the earliest time, wakes
   the waiters due then (on every worker) and answers their workers. Durations are either
   continuous (every event its own advance: the worst case) or quantized to 10 ms (many
   events share one advance, as when agents wait on one simulated server's ticks).
3. **Baseline**: the same agents on agentlab's in-process ``VirtualClock`` (one process).
4. **The real event stream**: one tick of LLM persona agents on ``social_feed`` with
   ``sim/vllm-3b`` on the local executor (wall per tick, clock wake-ups), the barriers an
   exact protocol needs for its answer times by usable lookahead and with FIFO-aware bounds
   (``fifo_bounds``: a call the time server does not know yet queues behind every known
   one), those answer times replayed by K Ray workers through a barrier per answer time,
   19 ms windows and the FIFO-aware windows, and ``fifo_check``: the tick rerun with every
   call issued after a barrier changed gives identical rows for all answers before the bound.
5. **What an exact time server would have to reproduce**: the engine's float times under
   another advance schedule, and the local run's rows under other batch splits.
6. **The built time server** (``runtime/vclock_server.py``): a virtual society on Ray next
   to the same society local, wall per tick, the server's windows per tick, rows equal.

    python benchmarks/ray_vclock.py            # K = 1, 2; M = 100; E = 20
    python benchmarks/ray_vclock.py --quick    # under a minute: fewer events, K = 2
    python benchmarks/ray_vclock.py --json out.json
    python benchmarks/ray_vclock.py --quick --society 1000 --split-agents 0
    python benchmarks/ray_vclock.py --quick --built-only --built 1000

On this 2-core box K = 2 already shares the cores with the actor and the driver: the
numbers are the cost of the protocol, not of a cluster's network (add its RTT per round).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import heapq
import json
import logging
import math
import random
import statistics
import time
from typing import Any

# --- 1. actor round trip ---------------------------------------------------------------


class Echo:
    async def ping(self, x: int) -> int:
        return x


async def _rtt(actor: Any, n: int, inflight: int) -> float:
    """Seconds per call: ``n`` calls, ``inflight`` at a time."""
    t0 = time.perf_counter()
    if inflight == 1:
        for i in range(n):
            await actor.ping.remote(i)
    else:
        for start in range(0, n, inflight):
            await asyncio.gather(*(actor.ping.remote(i) for i in range(start, start + inflight)))
    return (time.perf_counter() - t0) / n


def rtt_in_task(actor: Any, n: int) -> dict[str, float]:
    """The same round trips, measured inside a Ray worker (what an agent would pay)."""

    async def main() -> dict[str, float]:
        await _rtt(actor, 50, 1)  # warm-up
        return {"task_seq_us": await _rtt(actor, n, 1) * 1e6,
                "task_64_us": await _rtt(actor, n, 64) * 1e6}  # fmt: skip

    return asyncio.run(main())


# --- 2. conservative barrier -------------------------------------------------------------


class ClockActor:
    """Virtual time shared by K workers; advances only when all K are blocked."""

    def __init__(self, workers: int, bounds: list[float] | None = None) -> None:
        self.k = workers
        self.bounds = bounds  # windows end at these times (given) instead of min + L
        self.now = 0.0
        self.heap: list[tuple[float, int, int, int]] = []  # (t, worker, seq, waiter)
        self.blocked: dict[int, asyncio.Future[tuple[float, list[int]]]] = {}
        self.done: set[int] = set()
        self.advances = 0
        self._ready: set[int] = set()
        self._heads: dict[int, float] = {}
        self._win: asyncio.Future[float] | None = None
        self._lookahead = 0.0
        self._all_ready: asyncio.Event | None = None

    async def ready(self, worker: int) -> None:
        """A start barrier, so that no worker's wall time includes another's start-up."""
        if self._all_ready is None:
            self._all_ready = asyncio.Event()
        self._ready.add(worker)
        if len(self._ready) == self.k:
            self._all_ready.set()
        await self._all_ready.wait()

    async def block(self, worker: int, requests: list[tuple[float, int, int]]) -> Any:
        """Worker ``worker`` waits; ``requests``: new (wake time, seq, waiter id)."""
        for t, seq, waiter in requests:
            heapq.heappush(self.heap, (t, worker, seq, waiter))
        fut: asyncio.Future[tuple[float, list[int]]] = asyncio.get_running_loop().create_future()
        self.blocked[worker] = fut
        self._maybe_advance()
        return await fut

    async def finish(self, worker: int) -> None:
        self.done.add(worker)
        self._heads.pop(worker, None)
        self._maybe_advance()
        self._maybe_window()

    def _maybe_advance(self) -> None:
        # Conservative: nobody may still send an event earlier than the heap's head.
        while len(self.blocked) + len(self.done) == self.k and self.heap:
            t = self.heap[0][0]
            self.now = max(self.now, t)
            self.advances += 1
            wake: dict[int, list[int]] = {}
            while self.heap and self.heap[0][0] == t:
                _, w, _, waiter = heapq.heappop(self.heap)
                wake.setdefault(w, []).append(waiter)
            for w, waiters in wake.items():
                self.blocked.pop(w).set_result((self.now, waiters))

    async def stats(self) -> dict[str, Any]:
        return {"advances": self.advances, "now": self.now}

    # --- windows (lookahead L): one barrier per window instead of per event -----------

    async def window(self, worker: int, head: float, lookahead: float) -> float:
        """Worker reports its earliest pending event; all report -> bound = min + L."""
        if self._win is None or self._win.done():
            self._win = asyncio.get_running_loop().create_future()
        fut = self._win
        self._heads[worker] = head
        self._lookahead = lookahead
        self._maybe_window()
        return await fut

    def _maybe_window(self) -> None:
        if self._win is None or self._win.done() or not self._heads:
            return
        if len(self._heads) + len(self.done) >= self.k:
            low = min(self._heads.values())
            self._heads = {}
            self.advances += 1
            self.now = low
            if self.bounds is None:
                self._win.set_result(low + self._lookahead)
            else:
                i = bisect.bisect_right(self.bounds, low)
                self._win.set_result(self.bounds[i] if i < len(self.bounds) else math.inf)


def _durations(seed: int, m: int, e: int, quantum: float) -> list[list[float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(m):
        ds = [rng.uniform(0.05, 2.0) for _ in range(e)]
        out.append([max(quantum, round(d / quantum) * quantum) if quantum else d for d in ds])
    return out


def barrier_worker(
    clock: Any, worker: int, m: int, e: int, quantum: float, plans: list[list[float]] | None = None
) -> dict[str, Any]:
    """One Ray task: ``m`` agents, ``e`` virtual sleeps each, through the clock actor
    (``plans``: the agents' sleeps given, e.g. taken from a real society's calls)."""

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        durations = _durations(1000 + worker, m, e, quantum) if plans is None else plans
        m_ = len(durations)
        now = [0.0]
        futs: dict[int, asyncio.Future[None]] = {}
        new: list[tuple[float, int, int]] = []
        seq = iter(range(10**9))
        running = [m_]
        idle = asyncio.Event()

        async def vsleep(waiter: int, d: float) -> None:
            fut = futs[waiter] = loop.create_future()
            new.append((now[0] + d, next(seq), waiter))
            running[0] -= 1
            if running[0] == 0:
                idle.set()
            await fut

        async def agent(i: int) -> None:
            for d in durations[i]:
                await vsleep(i, d)
            running[0] -= 1
            if running[0] == 0:
                idle.set()

        await clock.ready.remote(worker)
        tasks = [asyncio.ensure_future(agent(i)) for i in range(m_)]
        rounds = 0
        t0 = time.perf_counter()
        while True:
            await idle.wait()
            idle.clear()
            if not new and not futs:  # every agent finished
                break
            batch, new[:] = list(new), []
            t, waiters = await clock.block.remote(worker, batch)
            rounds += 1
            now[0] = t
            running[0] += len(waiters)
            for w in waiters:
                futs.pop(w).set_result(None)
        await clock.finish.remote(worker)
        await asyncio.gather(*tasks)
        return {"rounds": rounds, "events": sum(map(len, durations)),
                "wall_s": time.perf_counter() - t0, "end": now[0]}  # fmt: skip

    return asyncio.run(main())


def window_worker(
    clock: Any,
    worker: int,
    m: int,
    e: int,
    lookahead: float,
    plans: list[list[float]] | None = None,
) -> dict[str, Any]:
    """One Ray task: agents on a local event heap, synchronised once per window."""

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        durations = _durations(1000 + worker, m, e, 0.0) if plans is None else plans
        heap: list[tuple[float, int, asyncio.Future[None]]] = []
        now = [0.0]
        seq = iter(range(10**9))

        async def agent(i: int) -> None:
            for d in durations[i]:
                fut = loop.create_future()
                heapq.heappush(heap, (now[0] + d, next(seq), fut))
                await fut

        await clock.ready.remote(worker)
        tasks = [asyncio.ensure_future(agent(i)) for i in range(len(durations))]
        for _ in range(3):
            await asyncio.sleep(0)  # let every agent post its first sleep
        windows = 0
        t0 = time.perf_counter()
        bound = 0.0
        while heap or not all(t.done() for t in tasks):
            while heap and heap[0][0] < bound:
                t, _, fut = heapq.heappop(heap)
                now[0] = t
                fut.set_result(None)
                await asyncio.sleep(0)  # the woken agent posts its next sleep
            head = heap[0][0] if heap else float("inf")
            if head == float("inf") and all(t.done() for t in tasks):
                break
            bound = await clock.window.remote(worker, head, lookahead)
            windows += 1
        await clock.finish.remote(worker)
        await asyncio.gather(*tasks)
        return {"rounds": windows, "events": sum(map(len, durations)),
                "wall_s": time.perf_counter() - t0}  # fmt: skip

    return asyncio.run(main())


def local_baseline(m: int, e: int, quantum: float, workers: int) -> dict[str, float]:
    """All ``workers * m`` agents on agentlab's in-process VirtualClock."""
    from agentlab.core.clock import VirtualClock

    async def main() -> float:
        clock = VirtualClock()

        async def agent(ds: list[float]) -> None:
            for d in ds:
                await clock.sleep(d)

        plans = [d for w in range(workers) for d in _durations(1000 + w, m, e, quantum)]
        t0 = time.perf_counter()
        await asyncio.gather(*(agent(ds) for ds in plans))
        return time.perf_counter() - t0

    wall = asyncio.run(main())
    events = workers * m * e
    return {"wall_s": wall, "us_per_event": wall / events * 1e6}


# --- 4. the real event stream: a society on one simulated server ------------------------


def society_stream(n: int) -> dict[str, Any]:
    """One tick of ``n`` LLM persona agents on ``social_feed`` (``sim/vllm-3b``), local
    executor, virtual clock, every batch in flight at once: its wall time, the clock's
    wake-ups, and per agent the virtual times at which it resumed from an LLM answer."""
    import tempfile
    from pathlib import Path

    from agentlab import Society
    from agentlab.core.clock import VirtualClock
    from agentlab.llm import LLMClient
    from agentlab.llm.aimd import AIMDLimiter

    wakes = [0]
    plain = VirtualClock.sleep

    async def counted(self: VirtualClock, seconds: float) -> None:
        wakes[0] += 1
        await plain(self, seconds)

    grants: list[tuple[float, float]] = []  # (answer, slot taken) of each successful call
    plain_success = AIMDLimiter.on_success

    def success(self: AIMDLimiter, latency: float, tokens: int, in_flight: int, epoch: int,
                now: float | None = None, prefill_tokens: int = 0) -> None:  # fmt: skip
        assert now is not None
        grants.append((now, now - latency))
        plain_success(self, latency, tokens, in_flight, epoch, now, prefill_tokens)

    # benchmark only: count wake-ups, and note when each call got its AIMD slot
    VirtualClock.sleep = counted  # type: ignore[method-assign]
    AIMDLimiter.on_success = success  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as d:
            run = Path(d) / "run"
            s = Society.create(run, agents=n, env=["social_feed"],
                               llm=LLMClient("sim/vllm-3b", seed=7), clock="virtual", seed=7,
                               batch_size=max(1, -(-n // 8)), progress=False)  # fmt: skip
            s.run_sync(ticks=1)
            s.close()
            rows = [json.loads(line) for f in sorted((run / "replay" / "llm_calls").glob("*.jsonl"))
                    for line in f.read_bytes().splitlines()]  # fmt: skip
            tl = [json.loads(line) for f in sorted((run / "replay" / "timeline").glob("*.jsonl"))
                  for line in f.read_bytes().splitlines()]  # fmt: skip
    finally:
        VirtualClock.sleep = plain  # type: ignore[method-assign]
        AIMDLimiter.on_success = plain_success  # type: ignore[method-assign]
    slot_taken: dict[float, list[float]] = {}
    for t1, t0 in grants:
        slot_taken.setdefault(t1, []).append(t0)
    calls = []  # (issued, slot taken, answered): issued at the agent's previous answer
    for _, rs in sorted(_by_agent(rows).items()):
        prev = 0.0
        for r in rs:
            calls.append((prev, slot_taken[float(r["end"])].pop(), float(r["end"])))
            prev = float(r["end"])
    ends: dict[str, list[float]] = {}
    for r in rows:
        ends.setdefault(r["agent_id"], []).append(float(r["end"]))
    answers = [sorted(v) for _, v in sorted(ends.items())]
    return {"agents": n, "calls": len(rows), "wakes": wakes[0], "answers": answers,
            "call_times": calls, "rows": rows,
            "tick_wall_s": float(tl[0]["wall_s"]),
            "span_s": max(t for a in answers for t in a)}  # fmt: skip


def _by_agent(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: float(r["start"])):
        out.setdefault(r["agent_id"], []).append(r)
    return out


def fifo_bounds(calls: list[tuple[float, float, float]], share_min: float) -> list[float]:
    """Window ends of a dependency-aware exact protocol (studied, not built).

    The client CPU, the AIMD gate and the engine are FIFO queues, so a call not yet known
    to the time server (issued at an answer at or after the barrier ``T``) queues behind
    every known call in each of them: it can change nothing before the gate's known
    backlog drains (``D``, the last known call's slot) nor before its own earliest slot
    (the first answer at or after ``T`` plus the smallest client share). Every answer
    before ``H = max(D, first answer + share)`` is final; the next barrier is at ``H``.
    ``calls``: (issued, slot taken, answered) per call."""
    bounds: list[float] = []
    t = 0.0
    answered = sorted(c[2] for c in calls)
    while True:
        known = [c[1] for c in calls if c[0] < t or c[0] == 0.0]
        i = bisect.bisect_left(answered, t)
        if i == len(answered):
            return bounds
        h = max(max(known), answered[i] + share_min)
        if h <= t:
            return bounds
        bounds.append(h)
        t = h


def fifo_check(n: int, st: dict[str, Any], bounds: list[float]) -> list[dict[str, Any]]:
    """Is every answer before a FIFO bound ``H`` really final? Rerun the tick with every
    call issued at or after the previous barrier ``T`` changed (4,000 more prompt
    characters: more prefill, other content and lengths) and compare each ``llm_calls`` row
    answered before ``H`` — all columns, timings included — with the unchanged run."""
    import tempfile
    from pathlib import Path

    from agentlab import Society
    from agentlab.llm import LLMClient
    from agentlab.llm.client import LLMClient as Client

    def canon(rows: list[dict[str, Any]], before: float) -> list[str]:
        drop = ("_shard", "_seq")
        return sorted(json.dumps({k: v for k, v in r.items() if k not in drop}, sort_keys=True)
                      for r in rows if float(r["end"]) < before)  # fmt: skip

    plain = Client._call
    out = []
    edges = [0.0, *bounds]
    for k in (1, 2, 3):
        if k >= len(edges):
            break
        t, h = max(edges[k - 1], 1e-12), edges[k]  # the calls at the tick's start are known

        async def changed(self: Client, live: Any, messages: list[dict[str, Any]],
                          *args: Any, _t: float = t) -> Any:  # fmt: skip
            if self._clock.now() >= _t:
                messages = [*messages, {"role": "user", "content": "x" * 4000}]
            return await plain(self, live, messages, *args)

        Client._call = changed  # type: ignore[method-assign]  # benchmark only
        try:
            with tempfile.TemporaryDirectory() as d:
                run = Path(d) / "run"
                s = Society.create(run, agents=n, env=["social_feed"],
                                   llm=LLMClient("sim/vllm-3b", seed=7), clock="virtual",
                                   seed=7, batch_size=max(1, -(-n // 8)),
                                   progress=False)  # fmt: skip
                s.run_sync(ticks=1)
                s.close()
                rows = [json.loads(line)
                        for f in sorted((run / "replay" / "llm_calls").glob("*.jsonl"))
                        for line in f.read_bytes().splitlines()]  # fmt: skip
        finally:
            Client._call = plain  # type: ignore[method-assign]
        base_before, got_before = canon(st["rows"], h), canon(rows, h)
        later = set(canon(st["rows"], math.inf)) ^ set(canon(rows, math.inf))
        out.append({"window": k, "T": t, "H": h, "answers_before_H": len(base_before),
                    "equal_before_H": base_before == got_before,
                    "changed_calls": sum(1 for c in st["call_times"] if c[0] >= t),
                    "rows_differing_overall": len(later)})  # fmt: skip
    print("  FIFO bound check (calls issued at or after T changed; rows answered before H):")
    for c in out:
        print(f"    window {c['window']}: T = {c['T']:.3f} s, H = {c['H']:.3f} s: "
              f"{c['changed_calls']} calls changed, {c['answers_before_H']} answers before H "
              f"{'identical' if c['equal_before_H'] else 'DIFFER'}, "
              f"{c['rows_differing_overall']} rows differ in all")  # fmt: skip
    return out


def windows_needed(times: list[float], lookahead: float) -> int:
    """Barriers of a lookahead-``L`` protocol over these event times: greedy windows
    ``[head, head + L)``; ``L = 0`` gives one per distinct time (a barrier per event)."""
    count, bound = 0, -math.inf
    for t in sorted(times):
        if (t > bound) if lookahead == 0 else (t >= bound):
            count += 1
            bound = t + lookahead
    return count


def _sleeps(times: list[float]) -> list[float]:
    """An agent's answer times as the successive sleeps that reach them from 0."""
    return [b - a for a, b in zip([0.0, *times[:-1]], times, strict=True)]


def replay_in_process(plans: list[list[float]]) -> float:
    """Wall seconds of the same sleeps on agentlab's one in-process ``VirtualClock``."""
    from agentlab.core.clock import VirtualClock

    async def main() -> float:
        clock = VirtualClock()

        async def agent(ds: list[float]) -> None:
            for d in ds:
                await clock.sleep(d)

        t0 = time.perf_counter()
        await asyncio.gather(*(agent(ds) for ds in plans))
        return time.perf_counter() - t0

    return asyncio.run(main())


def min_dispatch_s(client_overhead_s: float = 0.004) -> float:
    """The smallest client-CPU share ``SimServer.dispatch`` can draw (u clamped at 1e-9,
    sigma 0.5): how soon after an answer the resumed agent's next call touches the
    shared client state (dispatch queue, AIMD gate) at the earliest."""
    z = statistics.NormalDist().inv_cdf(1e-9)
    return client_overhead_s * math.exp(0.5 * z - 0.125)


def stream_table(ray: Any, workers: list[int], n: int, reps: int) -> dict[str, Any]:
    """The real stream: how many barriers each protocol needs, and their measured cost
    when K Ray workers replay the agents' answer times against one clock actor."""
    st = society_stream(n)
    times = [t for a in st["answers"] for t in a]
    events = len(times)
    looks = {"exact (a barrier per answer time)": 0.0,
             f"L = min dispatch ({min_dispatch_s() * 1e3:.2f} ms)": min_dispatch_s(),
             "L = overhead_s (4.8 ms)": 0.0048, "L = design (19 ms)": 0.019}  # fmt: skip
    need = {k: windows_needed(times, v) for k, v in looks.items()}
    bounds = fifo_bounds(st["call_times"], min_dispatch_s())
    need["FIFO-aware (unknown calls queue behind known)"] = len(bounds)
    in_process = replay_in_process([_sleeps(ts) for ts in st["answers"]])
    per_virtual_s = events / st["span_s"]
    print(f"\nreal stream: {n} persona agents, social_feed, sim/vllm-3b, one tick, local virtual")
    print(
        f"  {st['calls']} calls, {events} answers over {st['span_s']:.1f} virtual s "
        f"({per_virtual_s:.1f} answers per virtual s: the 8-slot server caps it, "
        f"{per_virtual_s * 0.019:.2f} per 19 ms window); {st['wakes']} clock wake-ups"
    )
    print(
        f"  local: {st['tick_wall_s']:.3f} s per tick, "
        f"{st['tick_wall_s'] / events * 1e6:.0f} µs per answer, "
        f"{st['tick_wall_s'] / st['wakes'] * 1e6:.1f} µs per clock wake-up (everything)"
    )
    print("  barriers an exact protocol needs per tick, by usable lookahead:")
    for k, v in need.items():
        print(f"    {k:<40} {v:6d}  ({events / v:.2f} answers per barrier)")
    rows = []
    barrier_task = ray.remote(num_cpus=1)(barrier_worker)
    window_task = ray.remote(num_cpus=1)(window_worker)
    for label, task, arg, given in (
        ("a barrier per answer time", barrier_task, 0.0, None),
        ("windows, L = 19 ms", window_task, 0.019, None),
        ("FIFO-aware windows", window_task, 0.0, bounds),
    ):
        for k in workers:
            split = [[_sleeps(ts) for ts in st["answers"][w::k]] for w in range(k)]
            walls, rounds = [], 0
            for _ in range(reps):
                clock = ray.remote(num_cpus=0)(ClockActor).remote(k, given)
                res = ray.get([
                    task.remote(clock, w, 0, 0, arg, split[w]) for w in range(k)
                ])  # fmt: skip
                walls.append(max(r["wall_s"] for r in res))
                rounds = ray.get(clock.stats.remote())["advances"]
                ray.kill(clock)
            wall = statistics.median(walls)
            rows.append({"protocol": label, "workers": k, "answers": events, "barriers": rounds,
                         "sync_wall_s": wall, "sync_us_per_answer": wall / events * 1e6,
                         "local_tick_wall_s": st["tick_wall_s"],
                         "in_process_us_per_answer": in_process / events * 1e6,
                         "local_us_per_answer": st["tick_wall_s"] / events * 1e6})  # fmt: skip
    print(
        "\n| protocol on the real stream | workers | answers | barriers | sync only, s per tick "
        "| sync µs per answer | same sleeps on one VirtualClock, µs per answer "
        "| local s per tick (all work) | local µs per answer |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['protocol']} | {r['workers']} | {r['answers']} | {r['barriers']} | "
              f"{r['sync_wall_s']:.3f} | {r['sync_us_per_answer']:.0f} | "
              f"{r['in_process_us_per_answer']:.1f} | "
              f"{r['local_tick_wall_s']:.3f} | {r['local_us_per_answer']:.0f} |")  # fmt: skip
    out = {"fifo_check": fifo_check(n, st, bounds)}
    return {**out, "stream": {k: v for k, v in st.items()
                              if k not in ("answers", "call_times", "rows")},
            "barriers_needed": need, "rows": rows}  # fmt: skip


# --- 5. what an exact time server would have to reproduce ------------------------------


def engine_granularity(n: int = 40) -> list[dict[str, Any]]:
    """The same arrivals, the simulated engine also advanced every ``dt``: how many
    requests get other float times (a time server stepping the engine at window ends
    instead of at the local run's wake-ups would not reproduce its timings bit for bit)."""
    from agentlab.llm.sim_engine import Engine, EngineRequest
    from agentlab.llm.sim_profiles import get_profile

    prof = get_profile("vllm-3b")
    rng = random.Random(1)
    arrivals, t = [], 0.0
    for _ in range(n):
        t += rng.uniform(0.0, 0.3)
        arrivals.append((t, rng.randint(200, 900), rng.randint(20, 200), rng.uniform(0.9, 1.1)))

    def times(every: float) -> list[tuple[float | None, float | None]]:
        eng, reqs = Engine(prof), []
        probes = [k * every for k in range(1, int(30 / every))] if every else []
        evs = sorted([(a[0], 0, i) for i, a in enumerate(arrivals)] + [(x, 1, -1) for x in probes])
        for tt, kind, i in evs:
            eng.advance(tt)
            if kind == 0:
                a = arrivals[i]
                req = EngineRequest(i, a[0] + prof.overhead_s, a[1], a[2], a[3])
                eng.add(req)
                reqs.append(req)
        eng.advance(math.inf, inclusive=True)
        return [(r.first_token, r.end) for r in reqs]

    base, out = times(0.0), []
    for every in (0.5, 0.1, 0.013):
        got = times(every)
        diff = [abs((x or 0) - (y or 0)) for a, b in zip(base, got, strict=True)
                for x, y in zip(a, b, strict=True)]  # fmt: skip
        changed = sum(1 for a, b in zip(base, got, strict=True) if a != b)
        out.append({"advanced_every_s": every, "requests": n, "changed": changed,
                    "max_abs_diff_s": max(diff)})  # fmt: skip
    return out


def local_split(n: int) -> list[dict[str, Any]]:
    """Local virtual runs of ``n`` persona agents (2 ticks) with other batch splits:
    rows that differ from the run whose batches are all in flight (8 batches)."""
    import os
    import tempfile
    from collections import Counter
    from pathlib import Path

    from agentlab import Society
    from agentlab.llm import LLMClient

    def rows(bs: int, max_batches: int, d: str) -> dict[str, Counter[str]]:
        os.environ["AGENTLAB_LOCAL_MAX_BATCHES"] = str(max_batches)
        try:
            run = Path(d) / f"{bs}-{max_batches}" / "run"  # the same run_id every time
            s = Society.create(run, agents=n, env=["social_feed"],
                               llm=LLMClient("sim/vllm-3b", seed=7), clock="virtual", seed=7,
                               batch_size=bs, progress=False)  # fmt: skip
            s.run_sync(ticks=2)
            s.close()
        finally:
            os.environ.pop("AGENTLAB_LOCAL_MAX_BATCHES", None)
        out: dict[str, Counter[str]] = {}
        for ds in ("llm_calls", "agent_states", "messages"):
            c: Counter[str] = Counter()
            for f in sorted((run / "replay" / ds).glob("*.jsonl")):
                for line in f.read_bytes().splitlines():
                    row = json.loads(line)
                    for k in ("_shard", "_seq", "wall_s"):
                        row.pop(k, None)
                    c[json.dumps(row, sort_keys=True)] += 1
            out[ds] = c
        return out

    with tempfile.TemporaryDirectory() as d:
        ref = rows(-(-n // 8), 8, d)
        res = []
        for bs, mb in ((-(-n // 3), 8), (-(-n // 16), 8), (-(-n // 8), 2)):
            got = rows(bs, mb, d)
            res.append({"batch_size": bs, "batches": -(-n // bs), "max_batches": mb,
                        **{f"{ds}_differ": sum((ref[ds] - got[ds]).values()) for ds in ref},
                        "llm_calls": sum(ref["llm_calls"].values())})  # fmt: skip
    return res


def _replay_rows(run: Any) -> dict[str, list[str]]:
    """Every replay row per dataset, all columns but where it was written (sorted)."""
    out: dict[str, list[str]] = {}
    for d in sorted((run / "replay").iterdir()):
        rows = []
        for f in sorted(d.glob("*.jsonl")):
            for line in f.read_bytes().splitlines():
                row = {k: v for k, v in json.loads(line).items()
                       if k not in ("_shard", "_seq", "wall_s")}  # fmt: skip
                rows.append(json.dumps(row, sort_keys=True))
        out[d.name] = sorted(rows)
    return out


def built_table(n: int, ticks: int, reps: int, workers: int = 2) -> list[dict[str, Any]]:
    """The built time server: a virtual tick on Ray next to the same tick local.

    LLM persona agents on ``social_feed`` with ``sim/vllm-3b`` in ``workers`` batches (all
    in flight), ``ticks`` ticks after a warm-up tick, per executor in alternation; wall
    per tick from the ``timeline``; windows and answers from the time server; and
    whether every replay row equals the local run's."""
    import tempfile
    from pathlib import Path

    from agentlab import Society
    from agentlab.llm import LLMClient
    from agentlab.runtime.ray_executor import RayExecutor

    out = []
    for rep in range(reps):
        res: dict[str, Any] = {"rep": rep, "agents": n, "workers": workers}
        with tempfile.TemporaryDirectory() as d:
            runs = {}
            for name in ("local", "ray", "ray_real_instant"):
                run = Path(d) / name / "run"
                ex = RayExecutor() if name.startswith("ray") else "local"
                # the last: the same society on Ray with no time server (real clock, an
                # instant model): what the Ray executor itself costs here
                real = name == "ray_real_instant"
                s = Society.create(run, agents=n, env=["social_feed"],
                                   llm=LLMClient("sim/instant" if real else "sim/vllm-3b",
                                                 seed=7),
                                   clock="real" if real else "virtual",
                                   seed=7, batch_size=-(-n // workers), executor=ex,
                                   progress=False)  # fmt: skip
                s.run_sync(ticks=ticks + 1)
                s.close()
                walls = [json.loads(line)["wall_s"]
                         for f in (run / "replay" / "timeline").glob("*.jsonl")
                         for line in f.read_bytes().splitlines()][1:]  # fmt: skip
                res[f"{name}_s_per_tick"] = statistics.mean(walls)
                if name == "ray":
                    vt = ex.vclock_ticks[1:]  # type: ignore[union-attr]
                    res["windows_per_tick"] = statistics.mean(t["windows"] for t in vt)
                    res["answers_per_tick"] = statistics.mean(t["answers"] for t in vt)
                    res["server_busy_s_per_tick"] = statistics.mean(t["busy_s"] for t in vt)
                if not real:
                    runs[name] = run
            res["rows_equal"] = _replay_rows(runs["local"]) == _replay_rows(runs["ray"])
        res["ratio"] = res["ray_s_per_tick"] / res["local_s_per_tick"]
        out.append(res)
    print(f"\nthe built time server, {n} persona agents, {workers} batches, {ticks} ticks "
          "after a warm-up (wall s per tick):")  # fmt: skip
    print("| rep | local | ray, virtual | ray / local | windows per tick | answers per tick "
          "| rows equal local | server busy s per tick "
          "| ray, real clock, sim/instant (no time server) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in out:
        print(f"| {r['rep']} | {r['local_s_per_tick']:.3f} | {r['ray_s_per_tick']:.3f} | "
              f"{r['ratio']:.2f} | {r['windows_per_tick']:.1f} | {r['answers_per_tick']:.0f} | "
              f"{r['rows_equal']} | {r['server_busy_s_per_tick']:.3f} | "
              f"{r['ray_real_instant_s_per_tick']:.3f} |")  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="under a minute: fewer events, K = 2 only, 100 agents in the society tables",
    )
    ap.add_argument("--json", default=None)
    ap.add_argument("--workers", default=None, help="worker counts K (1,2; --quick 2)")
    ap.add_argument("--agents", type=int, default=None, help="agents per worker (M)")
    ap.add_argument("--events", type=int, default=None, help="sleeps per agent (E)")
    ap.add_argument("--windows-only", action="store_true", help="skip per-event barriers")
    ap.add_argument(
        "--society",
        type=int,
        default=None,
        help="agents of the real-stream table (200; --quick 100; 0 skips it)",
    )
    ap.add_argument(
        "--split-agents", type=int, default=None,
        help="agents of the local batch-split check (200; --quick 100; 0 skips it)",
    )  # fmt: skip
    ap.add_argument(
        "--built", type=int, default=None,
        help="agents of the built time server's table (200; --quick 100; 0 skips it)",
    )  # fmt: skip
    ap.add_argument("--built-only", action="store_true", help="only the built time server")
    args = ap.parse_args()
    size = 100 if args.quick else 200  # (a table's agents unless given)
    args.society = size if args.society is None else args.society
    args.split_agents = size if args.split_agents is None else args.split_agents
    args.built = size if args.built is None else args.built
    args.workers = args.workers or ("2" if args.quick else "1,2")
    import ray

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR, configure_logging=False)  # fmt: skip
    if args.built_only:
        built = built_table(args.built, 2, 2 if args.quick else 3)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"built": built}, f, indent=1)
        ray.shutdown()
        return
    n = 300 if args.quick else 1000
    m, e = (50, 10) if args.quick else (100, 20)
    m, e = args.agents or m, args.events or e
    out: dict[str, Any] = {"m": m, "e": e}

    echo = ray.remote(num_cpus=0)(Echo).remote()
    ray.get(echo.ping.remote(0))
    asyncio.run(_rtt(echo, 50, 1))
    out["driver_seq_us"] = asyncio.run(_rtt(echo, n, 1)) * 1e6
    out["driver_64_us"] = asyncio.run(_rtt(echo, n, 64)) * 1e6
    out.update(ray.get(ray.remote(num_cpus=1)(rtt_in_task).remote(echo, n)))
    print("actor round trip (µs per call):")
    for k in ("driver_seq_us", "driver_64_us", "task_seq_us", "task_64_us"):
        print(f"  {k:<14} {out[k]:8.1f}")

    reps = 2 if args.quick else 3

    def measure(task: Any, k: int, arg: float, quantum: float) -> dict[str, Any]:
        """``k`` workers of ``task`` against one clock actor, median wall of ``reps``."""
        walls = []
        for _ in range(reps):
            clock = ray.remote(num_cpus=0)(ClockActor).remote(k)
            res = ray.get([task.remote(clock, w, m, e, arg) for w in range(k)])
            walls.append(max(r["wall_s"] for r in res))
            st = ray.get(clock.stats.remote())
            ray.kill(clock)
        wall = statistics.median(walls)
        events = sum(r["events"] for r in res)
        return {
            "workers": k, "events": events, "advances": st["advances"],
            "worker_rounds": sum(r["rounds"] for r in res),
            "wall_s": wall, "us_per_event": wall / events * 1e6,
            "us_per_advance": wall / max(1, st["advances"]) * 1e6,
            "local_us_per_event": local_baseline(m, e, quantum, k)["us_per_event"],
        }  # fmt: skip

    workers = [int(x) for x in args.workers.split(",")]
    barrier_task = ray.remote(num_cpus=1)(barrier_worker)
    window_task = ray.remote(num_cpus=1)(window_worker)
    rows = [
        {"quantum_s": quantum, **measure(barrier_task, k, quantum, quantum)}
        for quantum in (() if args.windows_only else (0.0, 0.01))
        for k in workers
    ]
    rows += [
        {"quantum_s": None, "lookahead_s": lookahead, **measure(window_task, k, lookahead, 0.0)}
        for lookahead in (0.05, 0.2)
        for k in workers
    ]
    out["barrier"] = rows
    print("\nconservative barrier (wall from the start barrier to the last event):")
    print(
        "| durations | workers | events | advances | µs/event | µs/advance | in-process µs/event |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("lookahead_s"):
            kind = f"continuous, windows of L = {r['lookahead_s'] * 1000:g} ms"
        elif not r["quantum_s"]:
            kind = "continuous, one barrier per event time"
        else:
            kind = f"{r['quantum_s'] * 1000:g} ms steps, one barrier per event time"
        print(f"| {kind} | {r['workers']} | {r['events']} | {r['advances']} | "
              f"{r['us_per_event']:.0f} | {r['us_per_advance']:.0f} | "
              f"{r['local_us_per_event']:.1f} |")  # fmt: skip
    if args.society:
        out["society"] = stream_table(ray, workers, args.society, reps)
    out["engine_granularity"] = engine_granularity()
    print("\nthe engine's float times depend on when it is advanced (same 40 arrivals):")
    for g in out["engine_granularity"]:
        print(f"  also advanced every {g['advanced_every_s']} s: {g['changed']}/{g['requests']}"
              f" requests with other first_token/end bits, max |diff| "
              f"{g['max_abs_diff_s']:.2g} s")  # fmt: skip
    if args.split_agents:
        out["local_split"] = local_split(args.split_agents)
        print(f"\nlocal virtual, {args.split_agents} persona agents, 2 ticks: rows that differ "
              "from the run with 8 batches all in flight")  # fmt: skip
        print("| batch_size | batches | max in flight | llm_calls differ | agent_states differ "
              "| messages differ |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for r in out["local_split"]:
            print(f"| {r['batch_size']} | {r['batches']} | {r['max_batches']} | "
                  f"{r['llm_calls_differ']} of {r['llm_calls']} | {r['agent_states_differ']} | "
                  f"{r['messages_differ']} |")  # fmt: skip
    if args.built:
        out["built"] = built_table(args.built, 2, reps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    ray.shutdown()


if __name__ == "__main__":
    main()
