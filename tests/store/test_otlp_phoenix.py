"""The demo run pushed over OTLP/HTTP (protobuf) into a real Arize Phoenix, read back.

Phoenix is installed into ``.venv-phoenix`` by ``scripts/phoenix.sh`` (seconds from a warm
cache); an install or start failure fails this test, it never skips.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from agentlab.cli import main as cli_main
from agentlab.store import open_run

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TICKS = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def _spans(base: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        q = "limit=1000" + (f"&cursor={cursor}" if cursor else "")
        page = _get(f"{base}/v1/projects/default/spans?{q}")
        out += page["data"]
        cursor = page.get("next_cursor")
        if not cursor:
            return out


def test_demo_run_loads_into_phoenix_as_one_tree_per_trace(tmp_path: Path) -> None:
    subprocess.run(["bash", str(ROOT / "scripts/phoenix.sh")], check=True, timeout=600)
    run = tmp_path / "demo"
    assert cli_main(["demo", "--out", str(run), "--ticks", str(TICKS)]) == 0
    port, grpc = _free_port(), _free_port()
    log = (tmp_path / "phoenix.log").open("wb")
    proc = subprocess.Popen(
        ["bash", str(ROOT / "scripts/phoenix.sh"), "serve", str(tmp_path / "phx"), str(port),
         str(grpc)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # its start can take minutes on a loaded 2-core box
        while True:
            try:
                _get(f"{base}/v1/projects")
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "phoenix.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "Phoenix did not start in 300 s: " + (
                    tmp_path / "phoenix.log").read_text()[-2000:]  # fmt: skip
                time.sleep(1)

        def push_demo() -> int:
            with open_run(run) as r:
                return r.export_otlp(endpoint=base)

        n = push_demo()
        assert n > 2000  # the demo: 200 agents x 5 ticks
        spans = _await_spans(base, n, push_demo, tmp_path / "phoenix.log")
        assert len(spans) == n
        live = _live_experiment_and_threads(tmp_path, base)
        after = _await_spans(base, n + live, lambda: _repush_live(tmp_path, base),
                             tmp_path / "phoenix.log")  # fmt: skip
        assert len(after) == n + live
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()

    trees = _trees(spans)
    assert len(trees) == TICKS
    assert {root for root, _ in trees.values()} == {"society.tick"}
    kinds = Counter((s["name"].split(" ")[0], s["span_kind"]) for s in spans)
    assert kinds[("invoke_agent", "AGENT")] >= 200 * TICKS
    llm = [s for s in spans if s["span_kind"] == "LLM"]
    assert len(llm) > 1000 and all(s["name"] == "chat sim/vllm-3b" for s in llm)
    for s in llm:
        a = s["attributes"]
        assert a["llm.token_count.prompt"] > 0 and "llm.token_count.completion" in a
        assert a["gen_ai.agent.name"] == "llm" and a["gen_ai.agent.id"].startswith("citizen")

    # the experiment and the thread system pushed live: their own trees, one root each
    demo = {s["context"]["trace_id"] for s in spans}
    others = _trees([s for s in after if s["context"]["trace_id"] not in demo])
    roots = Counter(root for root, _ in others.values())
    assert roots == {"experiment.run": 2, "agent.thread": 2}, roots
    for root, tree in others.values():
        chats = [s for s in tree if s["span_kind"] == "LLM"]
        assert chats and all(s["attributes"]["llm.token_count.prompt"] > 0 for s in chats)
        assert all(s["attributes"]["gen_ai.agent.name"] for s in chats)
        below = "experiment.stage" if root == "experiment.run" else "invoke_agent"
        by_id = {s["context"]["span_id"]: s for s in tree}
        assert {by_id[s["parent_id"]]["name"].split(" ")[0] for s in chats} == {below}


def _await_spans(base: str, want: int, repush: Any, log: Path) -> list[dict[str, Any]]:
    """Phoenix's spans once it holds ``want`` of them (or after 300 s).

    Phoenix inserts in the background, into SQLite; on a loaded 2-core box a batch it has
    accepted can fail to commit, and Phoenix then drops it ("Releasing N spans without
    replay" in its log; seen once in CI, 3,012 of 3,250 spans). A count that stalls for
    20 s is pushed again with ``repush`` (at most twice): Phoenix inserts ON CONFLICT
    (span_id) DO NOTHING, so a second push only fills what was dropped.
    """
    deadline = time.monotonic() + 300
    last, since, repushes = -1, time.monotonic(), 0
    while True:
        spans = _spans(base)
        now = time.monotonic()
        if len(spans) >= want or now > deadline:
            if len(spans) != want:
                tail = [ln for ln in log.read_text().splitlines() if "without replay" in ln]
                print(f"Phoenix holds {len(spans)} of {want} spans; its drops: {tail[-3:]}")
            return spans
        if len(spans) != last:
            last, since = len(spans), now
        elif now - since > 20 and repushes < 2:
            repush()
            repushes, since = repushes + 1, now
        time.sleep(2)  # Phoenix's REST reads compete with its inserts: poll gently


def _repush_live(tmp_path: Path, base: str) -> None:
    """Push the live runs' finished traces again (a fresh follower starts at offset 0)."""
    from agentlab.store.otlp_live import live_otlp

    for name in ("exp", "threads"):
        with live_otlp(tmp_path / name, base, interval=0.2):
            pass


def _trees(spans: list[dict[str, Any]]) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """Phoenix's spans per trace: ``{trace_id: (root name, spans)}``, each a whole tree."""
    trees: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in spans:
        trees[s["context"]["trace_id"]].append(s)
    out = {}
    for tid, tree in trees.items():
        ids = {s["context"]["span_id"] for s in tree}
        roots = [s["name"] for s in tree if s["parent_id"] is None]
        assert len(roots) == 1, roots
        assert all(s["parent_id"] in ids for s in tree if s["parent_id"] is not None)
        out[tid] = (roots[0], tree)
    return out


def _live_experiment_and_threads(tmp_path: Path, base: str) -> int:
    """An experiment (2 repetitions) and a thread system (2 threads) pushed to Phoenix
    live (``live_otlp``); returns the spans pushed."""
    import asyncio

    from agentlab.llm import LLMClient
    from agentlab.runtime.threads import AgentSystem, LLMClientModel, Tool
    from agentlab.store.otlp_live import live_otlp
    from agentlab.topology import Experiment

    pushed = 0
    with live_otlp(tmp_path / "exp", base, interval=0.2) as live:
        Experiment(topologies=["star"], agents=3, runs=2, llm="sim/instant", seed=1,
                   out=tmp_path / "exp", progress=False, max_iterations=1).run_sync()  # fmt: skip
    pushed += live.stats["pushed"]

    async def threads() -> None:
        model = LLMClientModel(LLMClient("sim/instant", seed=2), per_call=lambda m: {
            "sim_tool_call_p": 1.0 if m[-1]["role"] == "user" else 0.0})  # fmt: skip
        tool = Tool("lookup", lambda ctx, args: "found")
        async with AgentSystem(model, tools=[tool], agent_tools=False,
                               run_dir=tmp_path / "threads") as system:  # fmt: skip
            for t in ("ann", "bob"):
                system.send_user(t, f"hello {t}", "u1")
            await system.drain()

    with live_otlp(tmp_path / "threads", base, interval=0.2) as live:
        asyncio.run(threads())
    pushed += live.stats["pushed"]
    assert pushed > 0 and live.stats["dropped"] == 0
    return pushed
