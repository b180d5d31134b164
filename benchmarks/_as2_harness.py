"""AgentSociety 2 side of ``benchmarks/vs_agentsociety2.py`` (run by the AS2 venv's python).

Not importable from agentlab (it needs ``agentsociety2``, which lives in its own venv).
It builds a society of N ``SimplePersonAgent`` s — an ``agentsociety2.AgentBase`` subclass
registered the documented way (a file under ``<run>/custom/agents/``), whose ``step`` makes
exactly one LLM call through AS2's own dispatcher (``AgentBase.acompletion`` →
``LLMClient.call``: its AIMD semaphore, then ``litellm.Router.acompletion``) with litellm's
``mock_response``, and writes its state back to its workspace. AS2 has no non-litellm mock
model, so that is the only mocked path it has. Modes:

- ``ray``: AS2's real executor, ``AgentSociety.init()`` + ``run()`` — one Ray task per
  ``batch_size`` agents, an env-router actor (no env modules: the agent never asks it);
- ``local``: no Ray. AS2's in-process batch core ``runner._step_agent_batch_async`` (the
  body of each Ray task: ``from_workspace`` → ``step`` → ``to_workspace`` per agent,
  ``asyncio.gather`` per batch) driven batch after batch in one event loop.

One warm-up tick (imports, Router construction, Ray worker start) is not timed; then
``--ticks`` ticks are. CPU is the whole process tree's (driver, raylet, GCS, workers).
Prints one JSON line.

    python benchmarks/_as2_harness.py --n 1000 --ticks 3 --mode local [--py-spy OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

MOCK = "I read the feed, agreed with two posts and replied to one."

AGENT_SRC = '''
"""One LLM call per step through AS2's dispatcher, with litellm's mock_response."""

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from agentsociety2.agent.base import AgentBase

MOCK = {mock!r}


class SimplePersonAgent(AgentBase):
    """A person with a persona and a short memory; one LLM call per step."""

    @classmethod
    def init_description(cls) -> str:
        return "SimplePersonAgent: one LLM call per step (benchmark)."

    @classmethod
    async def from_workspace(cls, workspace_path: Path, service_proxy: Any):
        agent = cls()
        ws = Path(workspace_path)
        meta = json.loads((ws / "AGENT.json").read_text(encoding="utf-8"))
        agent._config = json.loads((ws / "config.json").read_text(encoding="utf-8"))
        agent._id = int(meta.get("agent_id", meta.get("id", 0)))
        agent._profile = meta.get("profile", {{}})
        agent._name = meta.get("name") or f"Agent_{{agent._id}}"
        agent._bind_services(service_proxy)
        agent._step_count = int(meta.get("step_count", 0))
        agent._meta = meta
        return agent

    async def to_workspace(self, workspace_path: Path) -> None:
        self._meta["step_count"] = self._step_count
        (Path(workspace_path) / "AGENT.json").write_text(
            json.dumps(self._meta, ensure_ascii=False, indent=2, default=str),
            encoding="utf-8",
        )

    async def ask(self, message: str, readonly: bool = True, *, t: datetime | None = None) -> str:
        resp = await self.acompletion([{{"role": "user", "content": message}}], mock_response=MOCK)
        return resp.choices[0].message.content or ""

    async def step(self, tick: int, t: datetime) -> str:
        persona = self._profile.get("persona", "")
        memory = self._meta.setdefault("memory", [])
        messages = [
            {{"role": "system", "content": f"You are {{self._name}}. {{persona}}"}},
            {{"role": "user", "content": f"It is {{t.isoformat()}}. Recent: {{memory[-3:]}}. What do you do?"}},
        ]
        resp = await self.acompletion(messages, mock_response=MOCK)
        text = resp.choices[0].message.content or ""
        memory.append(text[:80])
        del memory[:-5]
        self._step_count += 1
        return f"{{self._name}}: {{text[:40]}}"
'''


def agentlab_litellm_settings() -> None:
    """What ``agentlab.llm.litellm_backend.import_litellm`` sets, applied to AS2's litellm.

    A copy (agentlab is not installed in AS2's venv); keep it in step with that function.
    Only this process (the driver): AS2's Ray workers import litellm on their own.
    """
    import gc
    import logging

    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    litellm.set_verbose = False
    litellm.drop_params = True
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if os.environ.get("AGENTLAB_GC_FREEZE", "1") != "0":
        gc.collect()
        gc.freeze()


def _tree_cpu_s(root_pid: int, exclude: frozenset[int] = frozenset()) -> float:
    """User+system CPU seconds of ``root_pid`` and its live descendants (from /proc).

    Subtrees rooted at a pid in ``exclude`` (e.g. an HTTP server we started) are left out.
    """
    tick = os.sysconf("SC_CLK_TCK")
    kids: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(d), int(parts[1])
        kids.setdefault(ppid, []).append(pid)
        cpu[pid] = (int(parts[11]) + int(parts[12])) / tick
    total, todo = 0.0, [root_pid]
    while todo:
        p = todo.pop()
        if p in exclude:
            continue
        total += cpu.get(p, 0.0)
        todo.extend(kids.get(p, []))
    return total


def _ncalls(stats: dict[str, dict[str, int]]) -> int:
    return sum(int(s.get("calls", 0)) for s in stats.values())


def _specs(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "profile": {"id": i, "name": f"person_{i}", "persona": "Curious, reads the news."},
            "config": {},
        }
        for i in range(n)
    ]


async def _run_local(run: Path, n: int, ticks: int, batch: int) -> dict[str, Any]:
    from agentsociety2.agent import runner
    from agentsociety2.agent.service_proxy import LLMClients, ServiceProxy
    from agentsociety2.config.llm_dispatcher import build_client_for_role

    root = run / "agents"
    root.mkdir(parents=True, exist_ok=True)
    specs = _specs(n)
    t = time.perf_counter()
    await runner._create_agents_batch_async(specs, str(root), "SimplePersonAgent")
    create_s = time.perf_counter() - t
    llm = LLMClients(coder=build_client_for_role("coder"), default=build_client_for_role("default"))
    proxy = ServiceProxy(env=None, llm=llm, trace=None, replay=None, run_dir=run)
    ids = [s["id"] for s in specs]

    async def tick(k: int) -> int:
        ok = 0
        for i in range(0, n, batch):
            res = await runner._step_agent_batch_async(
                ids[i : i + batch],
                str(root),
                "SimplePersonAgent",
                60,
                datetime(2026, 1, 1, k),
                proxy,
            )
            bad = [r for r in res if not r["ok"]]
            if bad:
                raise RuntimeError(f"{len(bad)} agent steps failed, first: {bad[0]}")
            ok += len(res)
        return ok

    await tick(0)  # warm-up: Router construction, lazy imports, page cache
    proxy.take_token_stats()  # count only the timed ticks' calls
    c0, t0 = _tree_cpu_s(os.getpid()), time.perf_counter()
    steps = 0
    for k in range(1, ticks + 1):
        steps += await tick(k)
    wall = time.perf_counter() - t0
    cpu = _tree_cpu_s(os.getpid()) - c0
    calls = _ncalls(proxy.take_token_stats())
    return {"steps": steps, "wall_s": wall, "cpu_s": cpu, "create_s": create_s, "llm_calls": calls}


async def _run_ray(run: Path, n: int, ticks: int, batch: int) -> dict[str, Any]:
    from agentsociety2.agent.service_proxy import build_service_proxy
    from agentsociety2.env.env_router_proxy import create_env_router_proxy
    from agentsociety2.society.society import AgentSociety

    t = time.perf_counter()
    env = await create_env_router_proxy([], run_dir=run)  # initialises Ray
    ray_init_s = time.perf_counter() - t
    proxy = build_service_proxy(env, run_dir=run, trace=False, replay=False)
    soc = AgentSociety(
        agent_specs=_specs(n),
        agent_class_name="SimplePersonAgent",
        env_router=env,
        start_t=datetime(2026, 1, 1),
        run_dir=run,
        service_proxy=proxy,
        batch_size=batch,
        enable_replay=False,
    )
    t = time.perf_counter()
    await soc.init()  # creates the workspaces in Ray tasks
    create_s = time.perf_counter() - t
    await soc.step(60)  # warm-up tick: worker start, imports, Router construction
    warm = _ncalls(soc.token_stats)
    c0, t0 = _tree_cpu_s(os.getpid()), time.perf_counter()
    await soc.run(num_steps=ticks, tick=60)
    wall = time.perf_counter() - t0
    cpu = _tree_cpu_s(os.getpid()) - c0
    calls = _ncalls(soc.token_stats) - warm
    await soc.close()
    return {
        "steps": n * ticks,
        "wall_s": wall,
        "cpu_s": cpu,
        "create_s": create_s,
        "ray_init_s": ray_init_s,
        "llm_calls": calls,
    }


async def _call_cpu(n: int, conc: int = 16) -> dict[str, Any]:
    """CPU per call of AS2's own LLM path alone: ``LLMClient.call`` (AIMD + Router + mock)."""
    from agentsociety2.config.llm_dispatcher import build_client_for_role

    client = build_client_for_role("default")
    msgs = [{"role": "user", "content": "a0 tick 1 draw 5"}]

    async def burst(k: int) -> None:
        for _ in range(0, k, conc):
            await asyncio.gather(
                *[client.call(messages=msgs, mock_response=MOCK) for _ in range(conc)]
            )

    await burst(200)  # Router construction, lazy imports
    t = time.process_time()
    await burst(n)
    return {"system": "agentsociety2", "llm_call_us": (time.process_time() - t) / n * 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--ticks", type=int, default=3)
    ap.add_argument("--mode", choices=["local", "ray"], default="local")
    ap.add_argument("--batch", type=int, default=256, help="AS2 batch_size (its default 256)")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--model", default="gpt-4o-mini", help="model name (openai/ prefix implied)")
    ap.add_argument("--calls", type=int, default=0, help="only time N bare LLMClient.call s")
    ap.add_argument(
        "--calls-after",
        type=int,
        default=0,
        help="after the run, in the same process, also time N bare LLMClient.call s (the "
        "row's llm_call_us: one AS2 import fewer, for --quick)",
    )
    ap.add_argument(
        "--agentlab-settings",
        action="store_true",
        help="apply agentlab's litellm settings (import_litellm's, incl. gc.freeze) after import",
    )
    args = ap.parse_args()
    # AS2 refuses to import without these; nothing is sent anywhere (mock_response).
    os.environ.setdefault("AGENTSOCIETY_LLM_API_KEY", "sk-mock")
    os.environ.setdefault("AGENTSOCIETY_LLM_API_BASE", "http://127.0.0.1:9/v1")
    os.environ["AGENTSOCIETY_LLM_MODEL"] = args.model
    os.environ.setdefault("AGENTSOCIETY_LLM_RAY_MAX_WORKERS", str(os.cpu_count() or 2))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # mem0 (an AS2 dependency) starts a posthog telemetry thread; agentlab has none.
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    if args.calls:
        if args.agentlab_settings:
            import agentsociety2  # litellm with it, as the run below imports them

            agentlab_litellm_settings()
        print(json.dumps(asyncio.run(_call_cpu(args.calls))))
        return 0
    base = Path(args.dir or tempfile.mkdtemp(prefix="as2-bench-"))
    run = base / f"as2-{args.mode}-{args.n}"
    shutil.rmtree(run, ignore_errors=True)
    (run / "custom" / "agents").mkdir(parents=True)
    (run / "custom" / "envs").mkdir(parents=True)
    (run / "custom" / "agents" / "simple_person.py").write_text(AGENT_SRC.format(mock=MOCK))
    # AS2 only scans custom/ under the one workspace root this variable allows (also in
    # the Ray workers, which inherit the driver's environment).
    os.environ["WORKSPACE_PATH"] = str(run.resolve())
    t = time.perf_counter()
    import agentsociety2
    from agentsociety2.registry import get_agent_module_class, get_registry

    import_s = time.perf_counter() - t
    if args.agentlab_settings:
        agentlab_litellm_settings()
    get_registry().set_workspace(run)
    if get_agent_module_class("SimplePersonAgent") is None:
        print("SimplePersonAgent was not registered from custom/agents", file=sys.stderr)
        return 2
    fn = _run_local if args.mode == "local" else _run_ray
    out = asyncio.run(fn(run, args.n, args.ticks, args.batch))
    calls = out["llm_calls"]
    if calls != out["steps"]:
        print(f"expected {out['steps']} LLM calls, AS2 counted {calls}", file=sys.stderr)
        return 3
    out.update(
        system="agentsociety2",
        path="Router mock, agentlab settings"
        if args.agentlab_settings
        else "litellm Router mock_response",
        version=agentsociety2.__version__,
        mode=args.mode,
        n=args.n,
        ticks=args.ticks,
        import_s=import_s,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    if args.calls_after:
        out["llm_call_us"] = asyncio.run(_call_cpu(args.calls_after))["llm_call_us"]
    print(json.dumps(out))
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
