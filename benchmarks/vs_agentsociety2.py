"""agentlab vs AgentSociety 2.9.3, like for like: one litellm ``mock_response`` call per step.

Both systems run N agents for T timed ticks (after one untimed warm-up tick), every
agent-step making exactly one LLM call through ``litellm`` with ``mock_response`` (no
network), and writing its state back to its store:

- **AS2**: the real ``agentsociety2==2.9.3`` package in its own venv (it pins its own
  dependency set), driven by ``benchmarks/_as2_harness.py``: ``SimplePersonAgent`` s whose
  ``step`` calls ``AgentBase.acompletion`` → AS2's ``LLMClient`` (AIMD semaphore) →
  ``litellm.Router.acompletion(mock_response=...)``. ``local`` = AS2's in-process batch core
  (no Ray), ``ray`` = ``AgentSociety.run`` with its Ray tasks. AS2 has no mock model of its
  own, so litellm's ``mock_response`` is its only offline path.
- **agentlab**: ``counter`` agents with ``llm_calls=1`` and
  ``LLMClient("openai/<model>", mock_response=...)`` → ``litellm.acompletion``; every call
  still writes its ``llm_calls`` row, span and state. For context, the same society on
  ``sim/instant`` (the in-process simulator) and over real HTTP to ``agentlab sim-serve``
  with the lean transport and with litellm (client + server CPU: the server is a child
  process, counted in the tree).

Same model name on both sides (``--model``, default ``gpt-4o-mini``: litellm prices it, as
it would a real model; an unknown name makes litellm's cost lookup ~1.5 ms dearer per call
in both systems). CPU is the process tree's (driver, and for Ray the raylet, GCS and
workers); ``x AS2`` compares with AS2 on the same executor, both as steps/s (wall, noisy on
a shared box) and as CPU per step (the steadier figure). The litellm section measures
litellm's own per-call CPU (main thread vs its executor thread) and each litellm setting
that might cut it.

    python benchmarks/vs_agentsociety2.py --quick            # N = 100, local, ~1 min
    python benchmarks/vs_agentsociety2.py                    # N = 1k, 5k; local and Ray
    python benchmarks/vs_agentsociety2.py --json out.json --py-spy /tmp/prof

Measured (Dec 2026, 2-core box shared with other work at load 3-5, 3 timed ticks, model
gpt-4o-mini, local executor; CPU ms per agent-step; ``x`` = AS2 as shipped over this row,
``x set`` = AS2 with agentlab's litellm settings over this row; two runs, N = 1000 from run 1,
N = 5000 from run 2; ``before`` = the previous commit's agentlab in the same run):

    system    path                        N=1000                N=5000
    AS2       litellm Router mock         5.39                  6.42
    AS2       Router mock, agentlab set.  5.30                  5.53
    agentlab  litellm mock (before)       3.09  x1.7  set x1.7  3.45  x1.9  set x1.6
    agentlab  litellm mock_response       2.53  x2.1  set x2.1  2.80  x2.3  set x2.0
    agentlab  sim/instant                 0.10  x56             0.15  x43
    agentlab  lean -> sim-serve HTTP      0.32  x17             0.54  x12   (client CPU *)
    agentlab  litellm -> sim-serve HTTP   5.77  x0.9            6.91  x0.9  (client CPU *)

(*) these two rows were measured before the server's CPU was counted; the server adds
~0.13 ms per call (issue 26: at N = 1k the lean row's ratio falls from ~29x to ~17x).

Single runs are noisy on this box (run 2 had N = 1000 at 3.64 before / 3.65 after);
interleaved (``before, after`` x 3 processes, N = 1000): 3.18/3.61/3.30 before, 2.86/2.90/3.18
after. Per call: litellm ``acompletion`` + mock alone 2.06-2.34 ms CPU (~1.2-1.35 ms on the
event-loop thread, ~0.9-1.0 ms in the executor thread every ``acompletion`` hops to); AS2's
own LLM path (its ``LLMClient.call`` → ``Router``) 5.04 ms, 4.60 ms with agentlab's
settings. py-spy (``--gil --native``) of agentlab's mocked step, N = 1000: litellm 2.06 ms,
the cyclic GC 0.14 ms (0.44 before ``gc.freeze``), the response cache recorder 0.04 ms
(0.12 before), adapter + client + records 0.11 ms, agent step and store 0.15 ms (the full
split is in ``agentlab/llm/README.md``). Hence the bound: even if agentlab's own work cost
nothing, a step still pays litellm's call, and AS2's step over that call is 2.4-2.9x
(5.3-6.7 ms / 2.06-2.34 ms). **≥ 5x through litellm is not reachable like for like**;
only leaving litellm out is (the lean transport's row is real HTTP to a server against
AS2's in-process mock, so not like for like; ``sim/instant`` 43-56x). Of the litellm
settings tried only ``gc.freeze()`` of the import heap helps (set by ``import_litellm``);
the others are -4% to +22% (within noise or dearer), so none is set. AS2 Ray mode runs
here too (AS2's own ``ray.init``, its env-router actor, one task per 256 agents), without
the settings row: they reach only AS2's driver, not its Ray workers. Last round's Ray
figures (before this round's changes): AS2 6.09/6.33, agentlab 3.31/3.29 ms per step at
N = 1k/5k. ``--quick`` runs in under a minute at load ~1: AS2's import alone is 11-36 s here, so its per-call rows are timed in the two run processes, after their runs.

AS2's interpreter: ``$AS2_PYTHON``, else ``.venv-as2/bin/python``, created on first use with
``.venv/bin/uv venv .venv-as2`` and ``uv pip install agentsociety2==2.9.3`` (git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from _as2_harness import MOCK, _tree_cpu_s  # noqa: E402  (the same mock text and CPU meter)
from lean_client import start_server  # noqa: E402

AS2_VERSION = "2.9.3"
GOAL = 5.0


def as2_python() -> str:
    """The AS2 interpreter: ``$AS2_PYTHON`` or a git-ignored ``.venv-as2`` made with uv."""
    env = os.environ.get("AS2_PYTHON")
    if env:
        return env
    py = REPO / ".venv-as2" / "bin" / "python"
    if not py.exists():
        uv = shutil.which("uv", path=str(REPO / ".venv" / "bin")) or shutil.which("uv") or "uv"
        subprocess.run([uv, "venv", "-q", "--python", "3.11", str(py.parent.parent)], check=True)
        pkg = f"agentsociety2=={AS2_VERSION}"
        subprocess.run([uv, "pip", "install", "-q", "--python", str(py), pkg], check=True)
    return str(py)


# ---------------------------------------------------------------- agentlab side


def _llm(path: str, model: str, base: str | None) -> Any:
    from agentlab.llm import LLMClient

    if path == "sim/instant":
        return "sim/instant"
    if path == "litellm mock_response":
        return LLMClient(f"openai/{model}", mock_response=MOCK, seed=0)
    transport = "lean" if path.startswith("lean") else "litellm"
    return LLMClient("openai/instant", base_url=base, seed=0, transport=transport)


def _children_now(pid: int) -> frozenset[int]:
    """The pids whose parent is ``pid`` now (``/proc``)."""
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.add(int(d))
            except (OSError, IndexError, ValueError):
                continue
    return frozenset(out)


def agentlab_rows(n: int, ticks: int, executor: str, paths: list[str], model: str) -> list[dict]:
    """Each path as its own society in this process; CPU of the whole process tree."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from agentlab.runtime import Society

    # children alive before we start anything (under pytest: the session's Ray, servers of
    # other tests) are not this benchmark's work: their background CPU once made 20
    # sim/instant steps read 80 ms
    skip = _children_now(os.getpid())
    server = None
    if any("sim-serve" in p for p in paths):
        server = start_server()
    # the sim-serve server is a child of this process: its CPU is counted with the client's
    # (the whole tree), so the lean row holds client + server against AS2's whole step
    ray_init_s = 0.0
    if executor == "ray":
        import ray

        t = time.perf_counter()
        ray.init(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        ray_init_s = time.perf_counter() - t
    root = Path(tempfile.mkdtemp(prefix="vs-as2-agentlab-"))
    rows = []
    try:
        for path in paths:
            llm = _llm(path, model, server[1] if server else None)
            t = time.perf_counter()
            s = Society.create(
                root / path.replace("/", "_").replace(" ", "_"),
                agents=[{"type": "counter", "n": n, "config": {"llm_calls": 1}}],
                llm=llm,
                seed=0,
                executor=executor,
                progress=False,
            )
            create_s = time.perf_counter() - t
            s.run_sync(ticks=1)  # warm-up: imports, litellm's lazy modules, Ray workers
            c0, t0 = _tree_cpu_s(os.getpid(), skip), time.perf_counter()
            out = s.run_sync(ticks=ticks)
            wall = time.perf_counter() - t0
            cpu = _tree_cpu_s(os.getpid(), skip) - c0
            s.close()
            if out["steps"] != n * ticks or out["llm_calls"] != n * ticks or out["errors"]:
                raise RuntimeError(f"{path}: expected {n * ticks} steps and calls, got {out}")
            rows.append(
                {
                    "system": "agentlab",
                    "path": path,
                    "mode": executor,
                    "n": n,
                    "ticks": ticks,
                    "steps": out["steps"],
                    "llm_calls": out["llm_calls"],
                    "wall_s": wall,
                    "cpu_s": cpu,
                    "create_s": create_s,
                    "ray_init_s": ray_init_s,
                }
            )
    finally:
        if server:
            server[0].terminate()
            server[0].wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)
    return rows


# ---------------------------------------------------------------- litellm per call


async def _lm_rep(lm: Any, model: str, extra: dict[str, Any], n: int, conc: int) -> float:
    msgs = [{"role": "user", "content": "a0 tick 1 draw 5"}]

    async def one() -> None:
        await lm.acompletion(
            model=model, messages=msgs, mock_response=MOCK, timeout=120, num_retries=0, **extra
        )

    t = time.process_time()
    for _ in range(0, n, conc):
        await asyncio.gather(*[one() for _ in range(conc)])
    return (time.process_time() - t) / n * 1e6


def _thread_cpu() -> dict[int, float]:
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for t in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{t}/stat") as f:
            p = f.read().rsplit(")", 1)[1].split()
        out[int(t)] = (int(p[11]) + int(p[12])) / tick
    return out


# litellm settings that might skip per-call work; each measured, none assumed. The default
# row is what agentlab's import_litellm sets (gc.freeze() of the import heap included).
NO_FREEZE = "no gc.freeze() (litellm's import heap GC-tracked)"
SETTINGS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "default (agentlab's import_litellm)": ({}, {}),
    NO_FREEZE: ({}, {}),
    "no-log=True per call": ({}, {"no-log": True}),
    "litellm.turn_off_message_logging": ({"turn_off_message_logging": True}, {}),
    "litellm.disable_token_counter": ({"disable_token_counter": True}, {}),
    "litellm.logging = False": ({"logging": False}, {}),
    "zero custom pricing per call": (
        {},
        {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0},
    ),
}


def litellm_per_call(model: str, n: int, reps: int) -> dict[str, Any]:
    """litellm's own CPU per mocked call, its thread split, and each setting side by side."""
    from agentlab.llm.litellm_backend import import_litellm

    lm = import_litellm()
    full = f"openai/{model}"

    async def run() -> dict[str, Any]:
        await _lm_rep(lm, full, {}, 200, 16)  # warm lazy imports
        a, t = _thread_cpu(), time.process_time()
        await _lm_rep(lm, full, {}, n, 16)
        b, tot = _thread_cpu(), time.process_time() - t
        main = b[os.getpid()] - a.get(os.getpid(), 0.0)
        saved = {k: getattr(lm, k) for g, _ in SETTINGS.values() for k in g}
        res: dict[str, list[float]] = {k: [] for k in SETTINGS}
        for _ in range(reps):  # interleaved, so load drifts hit every setting alike
            for name, (glob, kw) in SETTINGS.items():
                for k, v in saved.items():
                    setattr(lm, k, glob.get(k, v))
                frozen = gc.get_freeze_count()
                if name == NO_FREEZE:
                    gc.unfreeze()
                res[name].append(await _lm_rep(lm, full, kw, n // 2, 16))
                if name == NO_FREEZE and frozen:
                    gc.freeze()
        for k, v in saved.items():
            setattr(lm, k, v)
        return {
            "total_us": tot / n * 1e6,
            "main_thread_us": main / n * 1e6,
            "executor_threads_us": (tot - main) / n * 1e6,
            "settings_min_us": {k: min(v) for k, v in res.items()},
            "settings_median_us": {k: sorted(v)[len(v) // 2] for k, v in res.items()},
        }

    return asyncio.run(run())


# ---------------------------------------------------------------- py-spy


# frames of imports and of building / removing the society: not the ticks being compared
_SETUP = ("_find_and_load", "Society.create", "create_agents_batch", "AgentSociety.init", "rmtree")


def _spy_shares(raw: Path) -> dict[str, float]:
    """Share of py-spy samples: litellm, the system's own code, the rest.

    Recorded with ``--gil`` (only the thread running Python counts); imports, creating and
    removing the society are left out, so the shares are of the ticks (warm-up included).
    """
    c: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, k = line.rpartition(" ")
        if not stack or any(x in stack for x in _SETUP):
            continue
        if "litellm/" in stack:
            cat = "litellm"
        elif "_worker (concurrent/futures/thread.py" in stack:
            continue  # a parked executor thread
        elif "posthog/" in stack:
            cat = "telemetry thread"
        elif any(m in stack for m in ("agentsociety2/", "agentlab/", "simple_person.py")):
            cat = "own code (agents, state, records)"
        else:
            cat = "event loop, stdlib, Ray"
        c[cat] += int(k)
    tot = sum(c.values()) or 1
    return {k: round(v / tot * 100, 1) for k, v in c.most_common()}


def _spy_cmd(cmd: list[str], out: Path | None) -> list[str]:
    if out is None:
        return cmd
    spy = shutil.which("py-spy", path=str(REPO / ".venv" / "bin")) or "py-spy"
    # --gil: sample only the thread holding the GIL, so parked threads do not count
    return [spy, "record", "--gil", "-r", "200", "-f", "raw", "-o", str(out), "--", *cmd]


# ---------------------------------------------------------------- driver


def _run_json(cmd: list[str], what: str) -> list[dict] | None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith(("{", "["))]
    if proc.returncode != 0 or not lines:
        print(f"{what}: failed (rc {proc.returncode})\n{proc.stderr[-1500:]}", file=sys.stderr)
        return None
    got = json.loads(lines[-1])
    got = got if isinstance(got, list) else [got]
    for r in got:  # progress, so a long run shows its rows as they come
        if "steps" in r:
            print(
                f"  {what}: {r['path']}: {r['steps'] / r['cpu_s']:.0f} steps per CPU-s",
                file=sys.stderr,
            )
    return got


SETTINGS_PATH = "Router mock, agentlab settings"
QUICK_CALLS = 400  # --quick: AS2 LLMClient.call s timed after each local run


def _table(rows: list[dict]) -> None:
    """``x AS2``: AS2 as shipped over this row; ``x AS2+set``: AS2 with agentlab's settings."""
    as2 = {
        (r["mode"], r["n"]): r
        for r in rows
        if r["system"] == "agentsociety2" and r["path"] != SETTINGS_PATH
    }
    as2s = {(r["mode"], r["n"]): r for r in rows if r["path"] == SETTINGS_PATH}
    head = (
        f"{'system':<14} {'path':<30} {'exec':<5} {'N':>6} {'steps/s':>8} {'CPU ms/step':>11} "
        f"{'x AS2 steps/s':>13} {'x AS2 CPU':>9} {'x AS2+set CPU':>13}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        r["steps_per_s"] = r["steps"] / r["wall_s"]
        r["cpu_ms_per_step"] = r["cpu_s"] / r["steps"] * 1e3
        base = as2.get((r["mode"], r["n"]))
        if base is not None and base is not r:
            r["x_as2_steps_per_s"] = r["steps_per_s"] / (base["steps"] / base["wall_s"])
            r["x_as2_cpu"] = (base["cpu_s"] / base["steps"]) / (r["cpu_s"] / r["steps"])
        sbase = as2s.get((r["mode"], r["n"]))
        if sbase is not None and r["system"] != "agentsociety2":
            r["x_as2_settings_cpu"] = (sbase["cpu_s"] / sbase["steps"]) / (r["cpu_s"] / r["steps"])
        xs = f"{r['x_as2_steps_per_s']:.1f}" if "x_as2_steps_per_s" in r else "-"
        xc = f"{r['x_as2_cpu']:.1f}" if "x_as2_cpu" in r else "-"
        xz = f"{r['x_as2_settings_cpu']:.1f}" if "x_as2_settings_cpu" in r else "-"
        print(
            f"{r['system']:<14} {r['path']:<30} {r['mode']:<5} {r['n']:>6} "
            f"{r['steps_per_s']:>8.0f} {r['cpu_ms_per_step']:>11.2f} {xs:>13} {xc:>9} {xz:>13}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="N = 100, local only, AS2's per-call rows timed in its run processes (under a minute)",
    )
    ap.add_argument("--ticks", type=int, default=3)
    ap.add_argument("--sizes", default=None, help="comma-separated N (default 1000,5000)")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray executor")
    ap.add_argument("--model", default="gpt-4o-mini", help="model name on both sides")
    ap.add_argument("--json", default=None, help="write the figures to this path")
    ap.add_argument("--py-spy", default=None, help="dir: profile the N-smallest local mock runs")
    ap.add_argument(
        "--before",
        default=None,
        help="a checkout of an earlier agentlab (e.g. `git worktree add DIR HEAD~1`): its "
        "litellm mock row runs in the same session, for a before/after in one run",
    )
    ap.add_argument("--one", nargs=3, metavar=("N", "EXECUTOR", "PATHS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        n, ex, paths = int(args.one[0]), args.one[1], args.one[2].split(",")
        print(json.dumps(agentlab_rows(n, args.ticks, ex, paths, args.model)))
        return 0
    sizes = [100] if args.quick else [int(x) for x in (args.sizes or "1000,5000").split(",")]
    modes = ["local"] if (args.quick or args.no_ray) else ["local", "ray"]
    py = as2_python()
    spy_dir = Path(args.py_spy) if args.py_spy else None
    if spy_dir:
        spy_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    spy: dict[str, dict[str, float]] = {}
    context = ["sim/instant", "lean -> sim-serve HTTP", "litellm -> sim-serve HTTP"]
    for n in sizes:
        for mode in modes:
            prof = spy_dir if (spy_dir and mode == "local" and n == sizes[0]) else None
            cmd = [py, str(HERE / "_as2_harness.py"), "--n", str(n), "--ticks", str(args.ticks)]
            cmd += ["--mode", mode, "--model", args.model]
            # --quick: AS2's per-call rows come from the local runs' processes (each AS2
            # import costs 11-36 s here); the full run times them in fresh processes
            after = ["--calls-after", str(QUICK_CALLS)] if args.quick and mode == "local" else []
            spied = _spy_cmd([*cmd, *after], prof and prof / "as2.raw")
            rows += _run_json(spied, f"AS2 N={n} {mode}") or []
            if mode == "local":  # the same litellm settings as agentlab's (driver process only)
                setting = [*cmd, *after, "--agentlab-settings"]
                rows += _run_json(setting, f"AS2+settings N={n}") or []
            me = [sys.executable, __file__, "--ticks", str(args.ticks), "--model", args.model]
            if args.before and mode == "local":
                env = {**os.environ, "PYTHONPATH": str(Path(args.before).resolve())}
                one = [*me, "--one", str(n), mode, "litellm mock_response"]
                proc = subprocess.run(one, capture_output=True, text=True, env=env)
                got = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("[")]
                for r in got[-1] if got else []:
                    r["path"] = "litellm mock (before)"
                    rows.append(r)
            paths = ["litellm mock_response"] + (context if mode == "local" else ["sim/instant"])
            if prof:  # profile the like-for-like path alone, then the rest unprofiled
                one = [*me, "--one", str(n), mode, paths[0]]
                rows += _run_json(_spy_cmd(one, prof / "agentlab.raw"), "agentlab") or []
                paths = paths[1:]
            rows += _run_json([*me, "--one", str(n), mode, ",".join(paths)], "agentlab") or []
            if prof:
                spy = {s: _spy_shares(prof / f"{s}.raw") for s in ("as2", "agentlab")}
    print(
        f"like for like: one litellm mock_response call per agent-step, model openai/{args.model}"
    )
    print(f"{args.ticks} timed ticks after one warm-up; load avg {os.getloadavg()[0]:.1f}")
    _table(rows)
    per_call_n = QUICK_CALLS if args.quick else 4000
    per_call = litellm_per_call(args.model, per_call_n, 2 if args.quick else 6)
    print(
        f"litellm.acompletion + mock_response alone: {per_call['total_us']:.0f} us CPU per call "
        f"({per_call['main_thread_us']:.0f} event-loop thread, "
        f"{per_call['executor_threads_us']:.0f} in the executor thread its acompletion hops to)"
    )
    print("litellm settings (min / median us per call of interleaved reps, 16 in flight):")
    best = per_call["settings_min_us"]["default (agentlab's import_litellm)"]
    for k, v in per_call["settings_min_us"].items():
        med = per_call["settings_median_us"][k]
        print(f"  {k:<38} {v:>6.0f} / {med:>6.0f}  ({(v - best) / best * 100:+.0f}% vs default)")
    for s, shares in spy.items():
        print(f"py-spy {s}: " + ", ".join(f"{k} {v}%" for k, v in shares.items()))
    if args.quick:  # timed after the local runs, in their processes
        local_as2 = {
            r["path"]: r.get("llm_call_us") for r in rows if r["system"] == "agentsociety2"
        }
        as2_us = local_as2.get("litellm Router mock_response")
        as2_us_s = local_as2.get(SETTINGS_PATH)
    else:
        cmd = [py, str(HERE / "_as2_harness.py"), "--n", "1", "--model", args.model]
        got = _run_json([*cmd, "--calls", str(per_call_n)], "AS2 LLMClient.call")
        as2_us = (got or [{}])[0].get("llm_call_us")
        cmd_s = [*cmd, "--calls", str(per_call_n), "--agentlab-settings"]
        got = _run_json(cmd_s, "AS2 LLMClient.call, settings")
        as2_us_s = (got or [{}])[0].get("llm_call_us")
    if as2_us:
        print(
            f"AS2's LLM path alone (LLMClient.call: AIMD semaphore + litellm Router + mock): "
            f"{as2_us:.0f} us CPU per call as shipped, {as2_us_s or float('nan'):.0f} with "
            "agentlab's litellm settings"
        )
    print("per step (local): CPU = LLM call path + own work (the rest: agent, state, records)")
    for r in rows:
        if r["mode"] != "local" or r["path"] not in (
            "litellm mock_response",
            "litellm Router mock_response",
            SETTINGS_PATH,
        ):
            continue
        if r["system"] != "agentsociety2":
            call = per_call["total_us"]
        else:
            call = as2_us_s if r["path"] == SETTINGS_PATH else as2_us
        if call:
            r["llm_call_ms"] = call / 1e3
            r["own_ms"] = r["cpu_ms_per_step"] - call / 1e3
            print(
                f"  {r['system']:<14} {r['path']:<30} N={r['n']:<6} {r['cpu_ms_per_step']:.2f} ms = "
                f"{r['llm_call_ms']:.2f} LLM call + {r['own_ms']:.2f} own"
            )
    # If agentlab's own per-step work cost nothing, a step would still pay litellm's call:
    # AS2's CPU per step over litellm's per-call CPU bounds the like-for-like ratio.
    lm_ms = per_call["total_us"] / 1e3
    for r in rows:
        if r["system"] == "agentsociety2":
            r["ratio_bound_through_litellm"] = r["cpu_ms_per_step"] / lm_ms
            print(
                f"bound through litellm ({r['path']}, {r['mode']}, N={r['n']}): AS2 "
                f"{r['cpu_ms_per_step']:.2f} ms/step / litellm {lm_ms:.2f} ms/call = "
                f"{r['ratio_bound_through_litellm']:.1f}x"
            )
    mock = [r for r in rows if r["path"] == "litellm mock_response" and "x_as2_cpu" in r]
    met = bool(mock) and all(r["x_as2_cpu"] >= GOAL for r in mock)
    met_s = bool(mock) and all(r.get("x_as2_settings_cpu", 0) >= GOAL for r in mock)
    print(
        f"goal >= {GOAL:.0f}x AS2 through litellm (CPU per step): vs AS2 as shipped "
        f"{'MET' if met else 'NOT MET'}; vs AS2 with the same settings "
        f"{'MET' if met_s else 'NOT MET'}"
    )
    if args.json:
        doc = {
            "rows": rows,
            "litellm_per_call": per_call,
            "as2_llm_call_us": as2_us,
            "as2_llm_call_us_agentlab_settings": as2_us_s,
            "goal_met_vs_as2_with_settings": met_s,
            "py_spy_shares": spy,
            "goal_met": met,
        }
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
