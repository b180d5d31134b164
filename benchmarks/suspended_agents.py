"""Suspended agents at scale — the Infinity measurement shape on agentlab's thread runtime.

Waves of new agents each run ``--turns`` turns. A turn: user text → completion (~1.1 KB
streamed in 12 chunks, ending in a tool call) → tool result (~340 chars) back through the
queue → second completion (~1.1 KB, 12 chunks) ending the turn. After each wave: cold
histories compressed, ``gc.collect()`` + ``malloc_trim(0)``, then resident memory per idle
agent (RSS growth since before the first wave / agents alive), completions/s on one core
(one asyncio loop), and the ratio of resident bytes to the raw (uncompressed JSON) history.

The model is :class:`~agentlab.runtime.threads.ScriptedModel` (deterministic, in-process),
not ``sim/instant``: the point is the runtime's own cost per completion.

    python benchmarks/suspended_agents.py            # full: 100,000 agents in memory
    python benchmarks/suspended_agents.py --quick    # < 1 minute
    python benchmarks/suspended_agents.py --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentlab.runtime.threads import (
    AgentSystem,
    MemoryThreadStore,
    ScriptedModel,
    SQLiteThreadStore,
    Tool,
)
from agentlab.store.thread_codec import raw_history

INFINITY_CPS = 7800  # 2,000,000 completions in 255 s on one thread (Rust)
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def _trim() -> int:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass
    return _rss()


def _tool_result(ctx: Any, args: dict[str, Any]) -> str:
    # ~340 characters, varying per call so compression sees realistic text
    return (f"result for {args.get('query', '')!s} @{ctx.call_id}: " + "ok " * 120)[:340]


async def _run_store(
    kind: str, waves: int, per_wave: int, turns: int, tmp: Path
) -> list[dict[str, Any]]:
    store: Any = (
        MemoryThreadStore(hot_limit=None)
        if kind == "memory"
        else SQLiteThreadStore(tmp / "threads.db")
    )
    model = ScriptedModel(tool="work", chunks=12, chunk_chars=92)
    system = AgentSystem(model, store, [Tool("work", _tool_result)], agent_tools=False)
    base = _trim()
    rows = []
    alive, prev_rss = 0, base
    async with system:
        for w in range(waves):
            ids = [f"w{w}-a{i}" for i in range(per_wave)]
            c0, t0, cpu0 = system.completions, time.perf_counter(), time.process_time()
            for t in range(turns):
                for tid in ids:
                    system.send_user(tid, f"turn {t}: please look into item {t * 7 % 13}", f"u{t}")
                await system.drain()
            run_s = time.perf_counter() - t0
            cpu_s = time.process_time() - cpu0
            done = system.completions - c0
            t1 = time.perf_counter()
            store.compress_cold()
            compress_s = time.perf_counter() - t1
            alive += per_wave
            rss = _trim()
            sample = ids[:: max(1, per_wave // 200)]
            raw = sum(len(raw_history(store.read(i, "history"))) for i in sample) / len(sample)
            held = sum(
                len(store.read(i, "history") or b"") + len(store.read(i, "state") or b"")
                for i in sample
            ) / len(sample)
            per_agent = (rss - base) / alive
            marginal = (rss - prev_rss) / per_wave  # growth caused by this wave alone
            prev_rss = rss
            rows.append(
                {
                    "store": kind,
                    "wave": w + 1,
                    "agents": alive,
                    "completions": done,
                    "completions_per_s": done / run_s,
                    "completions_per_cpu_s": done / cpu_s,
                    "vs_infinity": done / cpu_s / INFINITY_CPS,
                    "compress_s": compress_s,
                    "rss_mib": rss / 2**20,
                    "kib_per_idle_agent": per_agent / 1024,
                    "marginal_kib_per_agent": marginal / 1024,
                    "raw_history_kib": raw / 1024,
                    "stored_kib": held / 1024,
                    "resident_over_raw": per_agent / raw,
                }
            )
            r = rows[-1]
            print(
                f"{kind:7} {r['wave']:>4} {alive:>8} {r['completions_per_s']:>9.0f} "
                f"{r['completions_per_cpu_s']:>9.0f} "
                f"{r['vs_infinity']:>6.2f} {r['kib_per_idle_agent']:>9.2f} "
                f"{r['marginal_kib_per_agent']:>9.2f} {r['raw_history_kib']:>8.1f} "
                f"{r['stored_kib']:>8.1f} {r['resident_over_raw']:>6.3f} {r['rss_mib']:>8.0f}",
                flush=True,
            )
    if kind == "sqlite":
        store.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small run (< 1 minute)")
    p.add_argument("--json", default=None, help="write figures to this path")
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--waves", type=int, default=None)
    p.add_argument("--per-wave", type=int, default=None)
    p.add_argument("--sqlite-agents", type=int, default=None)
    a = p.parse_args(argv)
    waves = a.waves or (2 if a.quick else 10)
    per_wave = a.per_wave or (400 if a.quick else 10_000)
    sq = a.sqlite_agents if a.sqlite_agents is not None else (80 if a.quick else 5000)
    print(
        f"model: ScriptedModel (deterministic, in-process); turns/agent={a.turns}; one asyncio loop"
    )
    print(
        f"{'store':7} {'wave':>4} {'agents':>8} {'compl/s':>9} {'c/cpu-s':>9} {'xInf':>6} {'KiB/idle':>9} {'KiB/new':>9} "
        f"{'raw KiB':>8} {'held KiB':>8} {'res/raw':>6} {'RSS MiB':>8}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(_run_store("memory", waves, per_wave, a.turns, Path(tmp)))
        if sq:
            rows += asyncio.run(_run_store("sqlite", 2, sq // 2, a.turns, Path(tmp)))
    print(
        "KiB/idle: RSS growth per idle agent after gc+malloc_trim (target <= 32 KiB in memory);"
        " raw KiB: uncompressed history JSON per agent; held KiB: bytes the store keeps;"
        f" c/cpu-s: completions per CPU-second of this process (load-independent); xInf: c/cpu-s / Infinity's {INFINITY_CPS}/s"
    )
    if a.json:
        Path(a.json).write_text(
            json.dumps({"rows": rows, "model": "ScriptedModel", "turns": a.turns}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
