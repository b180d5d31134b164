"""Suspended agents at scale — the Infinity measurement shape on agentlab's thread runtime.

Waves of new agents each run ``--turns`` turns (20 = the Infinity shape). A turn: user text
→ completion (ending in a tool call) → tool result (~340 chars) back through the queue →
second completion ending the turn. After each wave: cold histories compressed,
``gc.collect()`` + ``malloc_trim(0)``, then resident memory per idle agent (RSS growth since
before the first wave / agents alive), swap and memory figures from ``/proc``,
completions/s on one core (one asyncio loop) and the ratio of resident bytes to the raw
(uncompressed JSON) history.

Models (``--model``, comma-separated; each runs in its own process so memory figures do
not share an allocator):

- ``scripted`` — :class:`~agentlab.runtime.threads.ScriptedModel`: ~1.1 KB in 12 chunks per
  completion, the first of a turn ending in a tool call. Measures the runtime's own cost.
- ``sim`` — :class:`~agentlab.runtime.threads.LLMClientModel` over
  ``LLMClient("sim/instant")`` streaming through ``client.stream``: a forced tool call after
  user text (``sim_tool_call_p=1``), ~1.1 KB of text in 12 chunks after the tool result
  (``sim_completion_tokens=275``, no tool call). The simulator returns *either* text *or* a
  tool call, so the tool-calling completion carries no text (see the printed probe). Its
  replies are ready at once: ``AgentSystem`` takes each as one delta
  (``LLMStream.whole_when_ready``); the probe, through ``LLMClientModel.stream``, shows the
  pieces a streaming consumer gets.

    python benchmarks/suspended_agents.py            # full: scripted 5 x 20,000 agents; sim 1 x 10,000
    python benchmarks/suspended_agents.py --quick    # < 1 minute, both models
    python benchmarks/suspended_agents.py --turns 5  # FEWER turns than the Infinity shape (labelled)
    python benchmarks/suspended_agents.py --json out.json
    python benchmarks/suspended_agents.py --quick --gc-freeze  # gc.freeze() after start-up
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentlab.runtime.threads import (
    AgentSystem,
    LLMClientModel,
    MemoryThreadStore,
    ScriptedModel,
    SQLiteThreadStore,
    Tool,
)
from agentlab.runtime.threads.codec import raw_history

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _measure
from _measure import load_line

# No Infinity throughput anchor: the "7,800/s (2,000,000 completions in 255 s on one thread)"
# printed before had no source (Infinity's release post gives 80,000 agents and 3.2M
# completions but no time), so the xInf column is gone until one is measured or cited.
INFINITY_TURNS = 20
MODELS = ("scripted", "sim")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_PARAMS = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


# slots of a wave's marks (run_config): a mark + _M_COMPRESS is its compress_cold twin
_M_C0, _M_GC0, _M_WALL0, _M_CPU0, _M_WALL1, _M_CPU1 = range(6)
_M_GC1, _M_DONE, _M_CACHED_N, _M_CACHED_B, _M_HOT_RSS, _M_TURN, _M_CTURN = range(6, 13)
_M_COMPRESS = 13  # _M_WALL0..._M_CPU1 + 13: 15..18
_M_SLOTS = 19


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def _proc_kib(path: str, keys: tuple[str, ...]) -> dict[str, int]:
    out = dict.fromkeys(keys, -1)
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in out:
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def _memory() -> dict[str, int]:
    """VmRSS/VmSwap of this process and SwapTotal/SwapFree/MemAvailable, in KiB."""
    return {
        **_proc_kib("/proc/self/status", ("VmRSS", "VmSwap")),
        **_proc_kib("/proc/meminfo", ("SwapTotal", "SwapFree", "MemAvailable")),
    }


def _trim() -> int:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass
    return _rss()


class _GCTime:
    """CPU seconds the cyclic garbage collector spends, summed over collections
    (``gc.callbacks``): a share of each wave's CPU that grows with the objects alive in
    flight (decoded histories of every agent mid-turn), not with the code's own work."""

    def __init__(self) -> None:
        # [cpu_s, collections, start of the current one]: in place, so a collection during
        # a wave leaves no new float behind (see run_config's marks)
        self._v = array("d", bytes(24))

    @property
    def cpu_s(self) -> float:
        return self._v[0]

    @property
    def collections(self) -> int:
        return int(self._v[1])

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        v = self._v
        if phase == "start":
            v[2] = time.process_time()
        else:
            v[0] += time.process_time() - v[2]
            v[1] += 1


def _tool_result(ctx: Any, args: dict[str, Any]) -> str:
    # ~340 characters, varying per call so compression sees realistic text
    return (f"result for {args.get('query', '')!s} @{ctx.call_id}: " + "ok " * 120)[:340]


def _sim_policy(messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    # after user text: a tool call (the suspension); after the tool result: text, no call
    return {"sim_tool_call_p": 1.0 if messages[-1]["role"] == "user" else 0.0}


def make_model(name: str) -> Any:
    """The benchmark's model by name (``scripted`` or ``sim``)."""
    if name == "scripted":
        return ScriptedModel(tool="work", chunks=12, chunk_chars=92)
    if name == "sim":
        from agentlab.llm import LLMClient

        return LLMClientModel(
            LLMClient("sim/instant", seed=0), per_call=_sim_policy, sim_completion_tokens=275
        )
    raise SystemExit(f"unknown model {name!r}; valid: {', '.join(MODELS)}")


async def probe(model: Any, tools: list[dict[str, Any]]) -> str:
    """Chunks and characters of one completion after user text and one after a tool result."""
    out = []
    convo: list[dict[str, Any]] = [{"role": "user", "content": "turn 0: look into item 0"}]
    for label in ("after user", "after tool result"):
        n, chars, calls = 0, 0, []
        async for x in model.stream(list(convo), tools, thread_id="probe", turn=len(out)):
            if isinstance(x, str):
                n, chars = n + 1, chars + len(x)
            else:
                calls.append(x)
        out.append(f"{label}: {n} chunks, {chars} chars, tool call: {'yes' if calls else 'no'}")
        convo.append({"role": "assistant", "content": None, "tool_calls": []})
        if calls:
            convo[-1]["tool_calls"] = [
                {
                    "id": calls[0].id,
                    "type": "function",
                    "function": {"name": calls[0].name, "arguments": "{}"},
                }
            ]
            convo.append({"role": "tool", "tool_call_id": calls[0].id, "content": "ok " * 113})
    return "; ".join(out)


async def run_config(
    model_name: str,
    kind: str,
    waves: int,
    per_wave: int,
    turns: int,
    tmp: Path,
    decoded_cache: int | None = None,
    decoded_cache_bytes: int | None = None,
) -> list[dict[str, Any]]:
    """Run ``waves`` waves of ``per_wave`` agents with one model and one store."""
    store: Any = (
        MemoryThreadStore(hot_limit=None)
        if kind == "memory"
        else SQLiteThreadStore(tmp / f"threads-{model_name}.db")
    )
    model = make_model(model_name)
    tool = Tool("work", _tool_result, parameters=_PARAMS)
    kw: dict[str, Any] = {} if decoded_cache is None else {"decoded_cache": decoded_cache}
    if decoded_cache_bytes is not None:
        kw["decoded_cache_bytes"] = decoded_cache_bytes
    system = AgentSystem(model, store, [tool], agent_tools=False, **kw)
    cache = system._decoded
    print(f"# {model_name}/{kind} probe: {await probe(model, [tool.schema()])}", flush=True)
    print(
        f"# {model_name}/{kind} decoded-history cache: bound {cache.max_bytes / 2**20:.0f} MiB"
        f" of raw history, {'any number of' if cache.limit is None else cache.limit} threads"
        f"{'' if cache.enabled else ' (off)'}",
        flush=True,
    )
    base = _trim()
    rows = []
    alive, prev_rss = 0, base
    gc_time = _GCTime()
    gc.callbacks.append(gc_time)
    async with system:
        for w in range(waves):
            ids = [f"w{w}-a{i}" for i in range(per_wave)]
            # The wave's figures go into one array made before it: a float or int made while
            # the wave's objects fill the heap and kept until the row is built would pin a
            # 1 MiB pymalloc arena each after they are freed, counted in KiB/idle (measured,
            # --quick scripted with the decoded-history cache: 20 per-turn floats held ~8
            # MiB, 63.7 -> 43.3 KiB per idle agent in wave 1). Slots: CPU us per completion
            # of each turn, then the _M_* marks.
            m = array("d", bytes(8 * (turns + _M_SLOTS)))
            m[turns + _M_C0] = system.completions
            m[turns + _M_GC0] = gc_time.cpu_s
            m[turns + _M_WALL0] = _measure.clock_wall()
            m[turns + _M_CPU0] = _measure.clock_cpu()
            for t in range(turns):
                m[turns + _M_TURN] = _measure.clock_cpu()
                m[turns + _M_CTURN] = system.completions
                for tid in ids:
                    system.send_user(tid, f"turn {t}: please look into item {t * 7 % 13}", f"u{t}")
                await system.drain()
                m[t] = (_measure.clock_cpu() - m[turns + _M_TURN]) / max(
                    1, system.completions - m[turns + _M_CTURN]
                )
            m[turns + _M_CPU1] = _measure.clock_cpu()
            m[turns + _M_WALL1] = _measure.clock_wall()
            m[turns + _M_GC1] = gc_time.cpu_s  # _trim's own collection comes after
            m[turns + _M_DONE] = system.completions
            # before compression: the wave's histories raw, the decoded ones still cached
            m[turns + _M_CACHED_N] = len(cache)
            m[turns + _M_CACHED_B] = cache.nbytes
            m[turns + _M_HOT_RSS] = _trim()
            # compress_cold is part of the cost of the KiB/idle figure: timed in CPU too
            m[turns + _M_WALL0 + _M_COMPRESS] = _measure.clock_wall()
            m[turns + _M_CPU0 + _M_COMPRESS] = _measure.clock_cpu()
            store.compress_cold()
            m[turns + _M_CPU1 + _M_COMPRESS] = _measure.clock_cpu()
            m[turns + _M_WALL1 + _M_COMPRESS] = _measure.clock_wall()
            turn_us = [x * 1e6 for x in m[:turns]]
            marks = m[turns:]
            run_s = marks[_M_WALL1] - marks[_M_WALL0]
            cpu_s = marks[_M_CPU1] - marks[_M_CPU0]
            compress_s = marks[_M_WALL1 + _M_COMPRESS] - marks[_M_WALL0 + _M_COMPRESS]
            compress_cpu_s = marks[_M_CPU1 + _M_COMPRESS] - marks[_M_CPU0 + _M_COMPRESS]
            gc_s = marks[_M_GC1] - marks[_M_GC0]
            done = int(marks[_M_DONE] - marks[_M_C0])
            cached_threads, cached_raw = int(marks[_M_CACHED_N]), marks[_M_CACHED_B]
            hot_rss = marks[_M_HOT_RSS]
            alive += per_wave
            rss = _trim()
            mem = _memory()
            sample = ids[:: max(1, per_wave // 200)]
            raw = sum(len(raw_history(store.read(i, "history"))) for i in sample) / len(sample)
            held = sum(
                len(store.read(i, "history") or b"") + len(store.read(i, "state") or b"")
                for i in sample
            ) / len(sample)
            per_agent = (rss - base) / alive
            marginal = (rss - prev_rss) / per_wave  # growth caused by this wave alone
            prev_rss = rss
            r = {
                "model": model_name,
                "store": kind,
                "wave": w + 1,
                "agents": alive,
                "turns": turns,
                "completions": done,
                "wall_s": run_s,
                "cpu_s": cpu_s,
                "cpu_kind": "cpu",
                "completions_per_s": done / (run_s + compress_s),
                "completions_per_cpu_s": done / (cpu_s + compress_cpu_s),
                "completions_per_cpu_s_no_compress": done / cpu_s,
                "per_call_cpu_us": cpu_s / max(1, done) * 1e6,
                "per_call_cpu_us_by_turn": turn_us,
                "gc_cpu_s": gc_s,
                "gc_us_per_call": gc_s / max(1, done) * 1e6,
                "compress_s": compress_s,
                "compress_cpu_s": compress_cpu_s,
                "rss_mib": rss / 2**20,
                "kib_per_idle_agent": per_agent / 1024,
                "hot_kib_per_agent": (hot_rss - base) / alive / 1024,
                # the cache at the wave's end (compress_cold then drops it: KiB/idle is RSS,
                # so whatever its objects left behind is counted there)
                "cached_threads": cached_threads,
                "cached_raw_mib": cached_raw / 2**20,
                "cache_bound_mib": cache.max_bytes / 2**20 if cache.enabled else 0.0,
                "marginal_kib_per_agent": marginal / 1024,
                "raw_history_kib": raw / 1024,
                "stored_kib": held / 1024,
                "resident_over_raw": per_agent / raw,
                "vm_rss_kib": mem["VmRSS"],
                "vm_swap_kib": mem["VmSwap"],
                "swap_total_kib": mem["SwapTotal"],
                "swap_free_kib": mem["SwapFree"],
                "mem_available_kib": mem["MemAvailable"],
            }
            rows.append(r)
            print(_fmt(r), flush=True)
    gc.callbacks.remove(gc_time)
    if kind == "sqlite":
        store.close()
    return rows


_HEAD = (
    f"{'model':8} {'store':6} {'wave':>4} {'agents':>7} {'turns':>5} {'compl/s':>8} "
    f"{'c/cpu-s':>8} {'us/call':>7} {'KiB/hot':>7} {'KiB/idle':>8} {'KiB/new':>8} {'rawKiB':>6} {'heldKiB':>7} "
    f"{'res/raw':>7} {'RSS MiB':>8} {'VmSwap':>6} {'SwapFree/Total KiB':>18} {'MemAvail':>8} "
    f"{'wall s':>7} {'cmp cpu':>7} {'us t1/mid/last':>16} {'gc us':>5}"
)


def _fmt(r: dict[str, Any]) -> str:
    swap = f"{r['swap_free_kib']}/{r['swap_total_kib']}"
    return (
        f"{r['model']:8} {r['store']:6} {r['wave']:>4} {r['agents']:>7} {r['turns']:>5} "
        f"{r['completions_per_s']:>8.0f} {r['completions_per_cpu_s']:>8.0f} "
        f"{r['per_call_cpu_us']:>7.1f} {r.get('hot_kib_per_agent', float('nan')):>7.1f} "
        f"{r['kib_per_idle_agent']:>8.2f} "
        f"{r['marginal_kib_per_agent']:>8.2f} {r['raw_history_kib']:>6.1f} "
        f"{r['stored_kib']:>7.1f} {r['resident_over_raw']:>7.3f} {r['rss_mib']:>8.0f} "
        f"{r['vm_swap_kib']:>6} {swap:>18} {r['mem_available_kib'] // 1024:>7}M "
        f"{r['wall_s']:>7.1f} {r['compress_cpu_s']:>7.2f} {_by_turn(r):>16} "
        f"{r.get('gc_us_per_call', float('nan')):>5.0f}"
    )


def _by_turn(r: dict[str, Any]) -> str:
    """CPU us per completion in the wave's first, middle and last turn (histories grow)."""
    us = r.get("per_call_cpu_us_by_turn") or []
    return "/".join(f"{us[i]:.0f}" for i in (0, len(us) // 2, -1)) if us else "-"


def _child(a: argparse.Namespace) -> int:
    model_name, kind = a.child.split(":")
    if a.gc_freeze:  # as a long-running server does after start-up (see --gc-freeze)
        gc.collect()
        gc.freeze()
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(
            run_config(
                model_name,
                kind,
                a.waves,
                a.per_wave,
                a.turns,
                Path(tmp),
                a.decoded_cache,
                a.decoded_cache_bytes,
            )
        )
    Path(a.rows_out).write_text(json.dumps(rows))
    return 0


def _spawn(
    config: str,
    waves: int,
    per_wave: int,
    turns: int,
    tmp: Path,
    gc_freeze: bool = False,
    decoded_cache: int | None = None,
    decoded_cache_bytes: int | None = None,
) -> list[dict[str, Any]]:
    out = tmp / f"{config.replace(':', '-')}.json"
    cmd = [sys.executable, __file__, "--child", config, "--rows-out", str(out)]
    cmd += ["--waves", str(waves), "--per-wave", str(per_wave), "--turns", str(turns)]
    cmd += ["--gc-freeze"] if gc_freeze else []
    cmd += [] if decoded_cache is None else ["--decoded-cache", str(decoded_cache)]
    cmd += (
        [] if decoded_cache_bytes is None else ["--decoded-cache-bytes", str(decoded_cache_bytes)]
    )
    subprocess.run(cmd, check=True)
    rows: list[dict[str, Any]] = json.loads(out.read_text())
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small run (< 1 minute)")
    p.add_argument("--json", default=None, help="write figures to this path")
    p.add_argument("--model", default="scripted,sim", help="comma-separated: scripted,sim")
    p.add_argument(
        "--turns",
        type=int,
        default=INFINITY_TURNS,
        help=f"turns per agent ({INFINITY_TURNS} = the Infinity shape; fewer is labelled)",
    )
    p.add_argument("--waves", type=int, default=None, help="waves per model")
    p.add_argument("--per-wave", type=int, default=None, help="new agents per wave")
    p.add_argument("--sqlite-agents", type=int, default=None, help="agents on SQLite (scripted)")
    p.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() after start-up in each model's process, as a long-running server "
        "would: the collector then skips the imported code's objects (the `gc us` column "
        "shows what is left); off by default, and the goal is judged without it",
    )
    p.add_argument(
        "--decoded-cache",
        type=int,
        default=None,
        help="AgentSystem(decoded_cache=N): threads whose decoded history is kept between "
        "their turns (default: the system's; 0 decodes every turn's history again)",
    )
    p.add_argument(
        "--decoded-cache-bytes",
        type=int,
        default=None,
        help="AgentSystem(decoded_cache_bytes=B): raw history bytes whose decoded form is kept "
        "(default: the system's: off, or 32 MiB with --decoded-cache N; 0: off)",
    )
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--rows-out", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return _child(a)
    models = [m.strip() for m in a.model.split(",") if m.strip()]
    for m in models:
        if m not in MODELS:
            p.error(f"unknown model {m!r}; valid: {', '.join(MODELS)}")
    # (waves, per wave) per model: the scripted model carries the 100k target; the simulator
    # costs ~2x more CPU per completion, so its full run is one smaller wave.
    size = (
        {"scripted": (2, 400), "sim": (2, 400)}
        if a.quick
        else {"scripted": (5, 20_000), "sim": (1, 10_000)}
    )
    sq = a.sqlite_agents if a.sqlite_agents is not None else (80 if a.quick else 5000)
    if a.turns != INFINITY_TURNS:
        print(
            f"NOTE: {a.turns} turns per agent — NOT the Infinity shape of {INFINITY_TURNS}; "
            "per-agent memory and history sizes are for this shorter conversation"
        )
    print(
        f"turns/agent={a.turns}; one asyncio loop per model, each model in its own process"
        + ("; gc.freeze() after start-up (--gc-freeze)" if a.gc_freeze else "")
    )
    print(_HEAD, flush=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            waves, per_wave = a.waves or size[m][0], a.per_wave or size[m][1]
            rows += _spawn(
                f"{m}:memory",
                waves,
                per_wave,
                a.turns,
                Path(tmp),
                a.gc_freeze,
                a.decoded_cache,
                a.decoded_cache_bytes,
            )
        if sq and "scripted" in models:
            rows += _spawn(
                "scripted:sqlite",
                2,
                sq // 2,
                a.turns,
                Path(tmp),
                a.gc_freeze,
                a.decoded_cache,
                a.decoded_cache_bytes,
            )
    print(
        "KiB/idle: RSS growth per idle agent after gc+malloc_trim (target <= 32 KiB in memory);"
        " KiB/hot: the same before compress_cold (histories raw, decoded ones of the threads"
        " that ran last still cached by the system, within the bound printed per model;"
        " compress_cold drops them, and KiB/idle counts what their objects left resident); KiB/new: growth from this wave alone; rawKiB: uncompressed history JSON per agent;"
        " heldKiB: bytes the store keeps; c/cpu-s: completions per CPU-second of the process,"
        " turns + compress_cold (compl/s likewise in wall); us/call: CPU per completion of the"
        " turns alone; us t1/mid/last: the same in the wave's first, middle and last turn (flat ="
        " no growth as histories grow); cmp cpu: CPU s compressing the wave's histories; gc us: CPU"
        " per completion in the cyclic garbage collector (part of us/call; it grows with what"
        " the agents in flight hold, not with the code's per-call work)"
    )
    summary = {}
    for m in models:
        cps = [
            r["completions_per_cpu_s"] for r in rows if r["model"] == m and r["store"] == "memory"
        ]
        if cps:
            summary[m] = statistics.median(cps)
            print(f"median c/cpu-s {m} (incl. compression): {summary[m]:.0f}")
    print(load_line())
    if len(summary) == 2:
        print(f"scripted / sim c/cpu-s (same run): {summary['scripted'] / summary['sim']:.2f}")
    if a.json:
        Path(a.json).write_text(
            json.dumps(
                {
                    "rows": rows,
                    "models": models,
                    "turns": a.turns,
                    "summary": summary,
                    "gc_freeze": a.gc_freeze,
                    "decoded_cache": a.decoded_cache,
                    "decoded_cache_bytes": a.decoded_cache_bytes,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
