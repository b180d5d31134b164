"""Client CPU per LLM call: the in-process simulator vs litellm (mocked and over HTTP).

Three ways to get a completion, measured side by side in one run, sequentially on one core
(``time.process_time`` of this process; the HTTP server runs in a separate process):

(a) ``LLMClient("sim/instant").complete`` — the simulator called directly;
(b) ``litellm.acompletion(..., mock_response=...)`` — litellm's own per-call work, no IO;
(c) ``litellm.acompletion`` over HTTP to ``sim-serve`` (profile ``instant``).

Targets: (a) <= 50 us CPU per call and >= 100x cheaper than (b).

    python benchmarks/llm_overhead.py [--quick] [--json PATH] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

MSGS = [{"role": "user", "content": "Summarise the discussion in one sentence."}]


async def _loop(fn: Any, n: int) -> float:
    for _ in range(min(20, n)):  # warm caches and lazy imports
        await fn()
    t0 = time.process_time()
    for _ in range(n):
        await fn()
    return (time.process_time() - t0) / n * 1e6


def bench_sim(n: int) -> float:
    from agentlab.llm import LLMClient

    client = LLMClient("sim/instant", seed=0)
    return asyncio.run(_loop(lambda: client.complete(MSGS), n))


def bench_litellm_mock(n: int) -> float:
    from agentlab.llm.litellm_backend import import_litellm

    lm = import_litellm()
    return asyncio.run(
        _loop(
            lambda: lm.acompletion(
                model="openai/gpt-4o-mini", messages=MSGS, mock_response="A short reply."
            ),
            n,
        )
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_litellm_http(n: int) -> float:
    from agentlab.llm.litellm_backend import import_litellm

    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "agentlab.llm.sim_serve",
        "--profile",
        "instant",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/models", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        lm = import_litellm()
        return asyncio.run(
            _loop(
                lambda: lm.acompletion(
                    model="openai/instant", messages=MSGS, api_base=base, api_key="sk-none"
                ),
                n,
            )
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls (< 1 minute)")
    ap.add_argument("--json", default=None, help="write the figures to this path")
    ap.add_argument("--profile", action="store_true", help="pyinstrument profile of (a)")
    args = ap.parse_args()
    n_sim, n_mock, n_http = (20000, 200, 100) if args.quick else (100000, 2000, 1000)
    if args.profile:
        from pyinstrument import Profiler

        with Profiler(interval=0.0001) as prof:
            bench_sim(n_sim)
        print(prof.output_text(unicode=False, color=False, show_all=False))
    rows = [
        ("(a) sim/instant via LLMClient", n_sim, bench_sim(n_sim)),
        ("(b) litellm acompletion mock_response", n_mock, bench_litellm_mock(n_mock)),
        ("(c) litellm over HTTP to sim-serve", n_http, bench_litellm_http(n_http)),
    ]
    base = rows[0][2]
    print(f"{'path':<40} {'calls':>7} {'CPU us/call':>12} {'calls/s (1 core)':>17} {'x (a)':>8}")
    out = []
    for name, n, us in rows:
        print(f"{name:<40} {n:>7} {us:>12.1f} {1e6 / us:>17.0f} {us / base:>8.1f}")
        out.append(
            {
                "path": name,
                "calls": n,
                "cpu_us_per_call": round(us, 2),
                "calls_per_s": round(1e6 / us),
                "ratio_vs_sim": round(us / base, 1),
            }
        )
    ok = base <= 50 and rows[1][2] / base >= 100
    print(f"target (a) <= 50 us and >= 100x cheaper than (b): {'MET' if ok else 'NOT MET'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": out, "target_met": ok}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
