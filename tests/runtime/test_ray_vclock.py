"""Virtual time with the Ray executor: equal to the local executor, row by row.

Under ``clock="virtual"`` the Ray executor runs every LLM call of a tick on its time
server (runtime/vclock_server.py; runtime/README.md, "Virtual time across Ray workers")
while the agents run in the batch workers with their own clocks. What is checked here:

- LLM persona agents on ``social_feed`` with ``sim/vllm-3b``, over several ticks, in two
  batches on two Ray workers, give the local executor's virtual run for the same seed:
  every row of every dataset with all its columns (times, request ids, queue waits,
  attempts, tokens), every span with its timing, every committed file (agent states, env
  checkpoint, the commit's learned LLM state) — with simulated faults and retries too;
- a run stopped after a completed tick and reopened on Ray equals the straight run;
- a batch worker SIGKILLed mid-tick: the tick runs again on a fresh time server and the
  rows equal the uninterrupted local run's (plus the ``batch_failures`` row);
- on two nodes that share no filesystem (the second cannot see the run) rows and spans
  equal the local run's: the workers' spans and rows travel staged, as on the real clock;
- what the time server cannot keep exact is refused with one ``ConfigError`` that says
  why, before anything of the run (or of the tick) is written: a model whose calls cost
  no client CPU, an env that is not tick-synchronous or has a language router, a
  backoff between agent-step attempts, more batches than run at once;
- the local reference itself does not depend on the batch split while every batch is
  in flight at once (``AGENTLAB_LOCAL_MAX_BATCHES``, default 8).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentlab.errors import ConfigError
from agentlab.llm import LLMClient
from agentlab.runtime import Society
from agentlab.runtime.config import validate_society_config
from tests.runtime.resume_helpers import committed_files, diff_summary, strict_rows, strict_spans

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WHY = "the time server keeps a run on Ray equal to the local one only then"


def _virtual_run(
    path: Path, n: int, ticks: int, batch_size: int, executor: Any = "local", **llm: Any
) -> None:
    s = Society.create(
        path, agents=n, env=["social_feed"], llm=LLMClient("sim/vllm-3b", seed=7, **llm),
        clock="virtual", seed=7, batch_size=batch_size, executor=executor, progress=False,
    )  # fmt: skip
    s.run_sync(ticks=ticks)
    s.close()


def _assert_equal_runs(ref: Path, got: Path) -> None:
    a, b = strict_rows(ref), strict_rows(got)
    assert a == b, diff_summary(a, b)
    sa, sb = strict_spans(ref), strict_spans(got)
    assert sa == sb, f"{sum((sa - sb).values())} spans differ, e.g. {sorted(sa - sb)[:1]}"
    fa, fb = committed_files(ref), committed_files(got)
    assert fa == fb, sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))


def _batch_processes(run: Path) -> set[str]:
    # the shard of a span is its writer's <host>-<pid>: where each batch ran
    shards = set()
    for f in (run / "trace").glob("*.jsonl"):
        for line in f.read_bytes().splitlines():
            span = json.loads(line)
            if span.get("name") == "society.batch":
                shards.add(span["_shard"])
    return shards


# --- refusals (no Ray needed: they come before an executor is made) -------------------


def test_create_refuses_what_the_time_server_cannot_keep_exact(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with pytest.raises(ConfigError) as exc:
        Society.create(
            run, agents=4, env=["market", {"type": "social_feed", "router": "react"}],
            llm="sim/instant", clock="virtual", executor="ray", seed=7,
            retry={"max_attempts": 2, "backoff_s": 1.0}, progress=False,
        )  # fmt: skip
    msg = str(exc.value)
    assert "clock 'virtual' on executor 'ray' needs" in msg and WHY in msg
    assert "client_overhead_s > 0" in msg and "got sim/instant" in msg
    assert "got 'market'" in msg and "with router 'react'" in msg
    assert "retry.backoff_s = 0" in msg and "use executor='local'" in msg
    assert not run.exists() or not (run / "SOCIETY.json").exists()


def test_a_run_config_is_checked_the_same_way() -> None:
    with pytest.raises(ConfigError) as exc:
        validate_society_config({"agents": 4, "clock": "virtual", "executor": "ray"})
    assert "got sim/instant" in str(exc.value) and WHY in str(exc.value)
    ok = {"agents": 4, "clock": "virtual", "executor": "ray", "llm": "sim/vllm-3b"}
    validate_society_config({**ok, "env": ["social_feed"]})
    validate_society_config({"agents": 4, "clock": "virtual", "executor": "local"})


#: an env module as a researcher writes it in a notebook cell (its module is __main__):
#: votes are collected during the tick and counted at its end, so it declares itself
#: tick-synchronous; the same class without the declaration is refused on Ray
_BALLOT_CELL = """
from agentlab.env import EnvBase, register_env, tool

class Ballot(EnvBase):
    \"\"\"A ballot: agents vote for a colour; the count is published after each tick.\"\"\"

    tick_synchronous = True

    def __init__(self, **config):
        super().__init__(**config)
        self.pending, self.counts = [], {}

    @tool
    def vote(self, agent_id: str, colour: str) -> str:
        \"\"\"Vote for a colour (counted at the end of the tick).\"\"\"
        self.pending.append([agent_id, colour[:12]])
        return "your vote is in the box"

    @tool
    def results(self, agent_id: str) -> dict:
        \"\"\"The count published after the last tick.\"\"\"
        return dict(self.counts)

    def step(self, tick):
        for _, colour in sorted(self.pending):
            self.counts[colour] = self.counts.get(colour, 0) + 1
        self.pending = []
        super().step(tick)

    def state_dict(self):
        return {"pending": self.pending, "counts": self.counts}

    def load_state_dict(self, state):
        self.pending, self.counts = list(state["pending"]), dict(state["counts"])

register_env("nb_ballot")(Ballot)
register_env("nb_ballot_unsure")(type("Unsure", (Ballot,), {"tick_synchronous": False}))
"""


def _notebook_envs() -> None:
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(_BALLOT_CELL, ns)  # a class whose module is __main__, like a notebook cell
    assert ns["Ballot"].__module__ == "__main__"


def test_an_env_class_declares_itself_tick_synchronous() -> None:
    """Only ``social_feed`` could run a virtual society on Ray (a list in the package); a
    researcher's env module declares ``tick_synchronous = True`` and is accepted, and the
    refusal of one that does not says how to declare it."""
    from agentlab.env import registry

    _notebook_envs()
    try:
        ok = {"agents": 4, "clock": "virtual", "executor": "ray", "llm": "sim/vllm-3b"}
        validate_society_config({**ok, "env": ["nb_ballot", "social_feed"]})
        with pytest.raises(ConfigError) as exc:
            validate_society_config({**ok, "env": ["nb_ballot_unsure"]})
        assert "got 'nb_ballot_unsure'" in str(exc.value)
        assert "declares tick_synchronous = True" in str(exc.value)
        with pytest.raises(ConfigError, match="with router 'react'"):
            validate_society_config({**ok, "env": [{"type": "nb_ballot", "router": "react"}]})
    finally:
        registry._REGISTRY.pop("nb_ballot", None)
        registry._REGISTRY.pop("nb_ballot_unsure", None)


@pytest.mark.ray
def test_a_notebook_defined_tick_synchronous_env_on_ray_equals_local(
    ray_session: Any, tmp_path: Path
) -> None:
    from agentlab.env import registry

    _notebook_envs()
    try:
        for executor in ("local", "ray"):
            s = Society.create(
                tmp_path / executor / "run", agents=40, env=["nb_ballot"],
                llm=LLMClient("sim/vllm-3b", seed=7), clock="virtual", seed=7, batch_size=20,
                executor=executor, progress=False,
            )  # fmt: skip
            assert s.run_sync(ticks=2)["errors"] == 0
            counts = s.env_state()[0]["state"]["counts"]
            s.close()
        assert sum(counts.values()) > 10  # the persona agents voted
        _assert_equal_runs(tmp_path / "local" / "run", tmp_path / "ray" / "run")
    finally:
        registry._REGISTRY.pop("nb_ballot", None)
        registry._REGISTRY.pop("nb_ballot_unsure", None)


def test_reopening_an_unsupported_virtual_run_on_ray_is_refused_and_leaves_it_runnable(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    s = Society.create(run, agents=4, llm="sim/instant", clock="virtual", seed=7, progress=False)
    s.run_sync(ticks=1)
    s.close()
    before = committed_files(run)
    with pytest.raises(ConfigError) as exc:
        Society.open(run, executor="ray", progress=False)
    assert "got sim/instant" in str(exc.value)
    assert committed_files(run) == before
    s = Society.open(run, progress=False)  # the local executor still runs it on
    assert s.run_sync(ticks=1)["tick"] == 2
    s.close()


# --- on Ray ---------------------------------------------------------------------------


@pytest.mark.ray
@pytest.mark.slow
def test_virtual_society_on_ray_equals_local_row_by_row(ray_session: Any, tmp_path: Path) -> None:
    # 120 persona agents in 2 batches (the session's 2 CPUs: both in flight), 3 ticks
    local, ray = tmp_path / "local" / "run", tmp_path / "ray" / "run"  # same run_id
    _virtual_run(local, n=120, ticks=3, batch_size=60)
    _virtual_run(ray, n=120, ticks=3, batch_size=60, executor="ray")
    _assert_equal_runs(local, ray)
    rows = strict_rows(local)["llm_calls"]
    calls = [json.loads(r) for r in rows.elements()]
    assert len(calls) > 300 and sum(c["queue_wait"] > 0 for c in calls) > 100
    assert len({c["start"] for c in calls}) == len(calls)  # timings really vary
    assert len(_batch_processes(ray)) == 2, _batch_processes(ray)


@pytest.mark.ray
@pytest.mark.slow
def test_virtual_society_on_ray_with_faults_and_retries_equals_local(
    ray_session: Any, tmp_path: Path
) -> None:
    faults = {"sim_p_rate_limit": 0.1, "sim_p_timeout": 0.05, "sim_p_malformed": 0.05}
    local, ray = tmp_path / "local" / "run", tmp_path / "ray" / "run"
    _virtual_run(local, n=60, ticks=3, batch_size=30, **faults)
    _virtual_run(ray, n=60, ticks=3, batch_size=30, executor="ray", **faults)
    _assert_equal_runs(local, ray)
    attempts = strict_rows(local)["llm_attempts"]
    outcomes = Counter(json.loads(r)["error_class"] for r in attempts.elements())
    assert outcomes["rate_limited"] and outcomes["timeout"], outcomes


@pytest.mark.ray
@pytest.mark.slow
def test_virtual_run_on_ray_resumed_after_a_tick_equals_the_straight_run(
    ray_session: Any, tmp_path: Path
) -> None:
    straight, resumed = tmp_path / "a" / "run", tmp_path / "b" / "run"
    _virtual_run(straight, n=60, ticks=3, batch_size=30)
    _virtual_run(resumed, n=60, ticks=1, batch_size=30, executor="ray")
    s = Society.open(resumed, executor="ray", progress=False)
    s.run_sync(ticks=2)
    s.close()
    _assert_equal_runs(straight, resumed)


@pytest.mark.ray
@pytest.mark.slow
def test_more_batches_than_run_at_once_are_refused_before_the_tick(
    ray_session: Any, tmp_path: Path
) -> None:
    from agentlab.runtime.ray_executor import RayExecutor

    run = tmp_path / "run"
    _virtual_run(run, n=6, ticks=1, batch_size=3)
    before = committed_files(run)
    ex = RayExecutor(max_workers=2)
    try:
        s = Society.open(run, executor=ex, batch_size=2, progress=False)
        why = "needs every batch in flight at once: tick 2 has 3 batches, 2 can run"
        with pytest.raises(ConfigError, match=why):
            s.run_sync(ticks=1)
        s.close()
    finally:
        ex.close()
    assert committed_files(run) == before


@pytest.mark.ray
@pytest.mark.slow
def test_a_batch_worker_killed_mid_tick_reruns_the_tick_to_the_same_rows(
    ray_session: Any, tmp_path: Path
) -> None:
    import os
    import signal
    import threading

    from tests.runtime.test_ray_faults import descendants_titled, wait_for

    local, ray = tmp_path / "local" / "run", tmp_path / "ray" / "run"
    _virtual_run(local, n=400, ticks=3, batch_size=200)
    s = Society.create(
        ray, agents=400, env=["social_feed"], llm=LLMClient("sim/vllm-3b", seed=7),
        clock="virtual", seed=7, batch_size=200, executor="ray", progress=False,
    )  # fmt: skip
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["out"] = s.run_sync(ticks=3)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    wait_for(lambda: s.tick >= 1, 120, "tick 1")
    pid = wait_for(lambda: descendants_titled("ray::run_staged_batch"), 60, "a batch task")[0]
    os.kill(pid, signal.SIGKILL)  # the other batch waits on the time server meanwhile
    thread.join(300)
    assert not thread.is_alive() and "error" not in box, repr(box.get("error"))
    s.close()
    a, b = strict_rows(local), strict_rows(ray)
    lost = b.pop("batch_failures", Counter())
    assert lost, "the kill did not hit a running batch"
    assert a == b, diff_summary(a, b)
    assert strict_spans(local) == strict_spans(ray)
    fa, fb = committed_files(local), committed_files(ray)
    assert fb["committed lines per dataset"].pop("replay/batch_failures") == sum(lost.values())
    assert fa == fb


# --- the local reference ----------------------------------------------------------------


def test_local_virtual_timings_do_not_depend_on_the_batch_split_while_all_batches_run(
    tmp_path: Path,
) -> None:
    # 48 persona agents in 1, 3 and 8 batches (all in flight at once): every row, timing
    # columns included, and every committed file are the same.
    runs = {bs: tmp_path / f"bs{bs}" / "run" for bs in (48, 16, 6)}  # same run_id
    for bs, path in runs.items():
        _virtual_run(path, n=48, ticks=2, batch_size=bs)
    ref = strict_rows(runs[48])
    rows = [r for r in ref["llm_calls"] for _ in range(ref["llm_calls"][r])]
    assert len(rows) >= 48, "too few calls for the comparison to mean anything"
    for bs in (16, 6):
        got = strict_rows(runs[bs])
        assert got == ref, diff_summary(ref, got)
        assert _files(runs[bs]) == _files(runs[48])


def _files(run: Path) -> dict[str, Any]:
    # The trace holds one span per batch besides the per-call spans: its committed line
    # count follows the number of batches (the spans' content is not compared here).
    files = committed_files(run)
    files["committed lines per dataset"].pop("trace", None)
    return files


_TWO_NODE_DRIVER = r"""
import json, sys, time
path, address = sys.argv[1:3]
import ray
from agentlab.runtime import Society
from agentlab.runtime.ray_init import ensure_ray
ensure_ray(address)
deadline = time.monotonic() + 90
while sum(n["Alive"] for n in ray.nodes()) < 2 and time.monotonic() < deadline:
    time.sleep(0.2)
second = [n["NodeID"] for n in ray.nodes()
          if n["Alive"] and "node:__internal_head__" not in n["Resources"]][0]
s = Society.create(path, agents=60, env=["social_feed"], llm="sim/vllm-3b", clock="virtual",
                   seed=7, batch_size=30, executor="ray", progress=False,
                   executor_options={"address": address, "max_workers": 2})
s.run_sync(ticks=2)
nodes = dict(s.executor.batch_nodes)
s.close()
print("RESULT " + json.dumps({"second": second, "batch_nodes": nodes}), flush=True)
"""


@pytest.mark.slow
def test_virtual_society_on_two_nodes_sharing_no_filesystem_equals_local(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.runtime.ray_cluster import can_isolate, two_node_cluster

    if not can_isolate():
        pytest.skip("needs root and unshare -m to hide the run from the second node")
    local = tmp_path / "local" / "run"
    s = Society.create(local, agents=60, env=["social_feed"], llm="sim/vllm-3b",
                       clock="virtual", seed=7, batch_size=30, progress=False)  # fmt: skip
    s.run_sync(ticks=2)
    s.close()
    hidden = tmp_path / "runs"  # the parent of the run: hidden from node 2
    hidden.mkdir()
    with two_node_cluster(tmp_path / "cluster", hide=[hidden]) as cluster:
        proc = subprocess.run(
            [sys.executable, "-c", _TWO_NODE_DRIVER, str(hidden / "run"), cluster.address],
            cwd=Path(__file__).resolve().parents[2], env=cluster.env, capture_output=True,
            text=True, timeout=400,
        )  # fmt: skip
    out = proc.stdout + proc.stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, out[-4000:]
    got = json.loads(lines[-1][7:])
    assert got["batch_nodes"].get(got["second"], 0) >= 1, got  # node 2 ran batches
    _assert_equal_runs(local, hidden / "run")
