"""Ray failures: a killed worker, env actor or node leaves no duplicate and no missing row.

Real Ray, real ``SIGKILL``s of real processes (found by their Ray process titles among the
descendants of the process that started the cluster), LLM persona agents on
``social_feed`` with ``sim/vllm-3b`` (real clock, as Ray requires), compared row by row —
content columns, not timing — with an uninterrupted run of the same seed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentlab.errors import EnvActorDiedError, WorkerLostError
from agentlab.runtime import Society
from agentlab.store import open_run
from tests.runtime.society_helpers import log_rows, span_rows

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

TICKS = 3
LLM_SOCIETY: dict[str, Any] = {
    "agents": [{"type": "llm", "n": 8, "config": {"max_iterations": 2}}],
    "env": ["social_feed"],
    "llm": "sim/vllm-3b",
    "seed": 7,
    "batch_size": 2,
}
COUNTER_SOCIETY: dict[str, Any] = {
    "agents": [{"type": "counter", "n": 8, "config": {"llm_calls": 2}}],
    "llm": "sim/vllm-3b",
    "seed": 7,
    "batch_size": 2,
}
# No latencies: for the test that needs no kill timing.
INSTANT_SOCIETY: dict[str, Any] = {**COUNTER_SOCIETY, "llm": "sim/instant"}
# One call per step: batches of a few seconds, for the deadline test.
COUNTER1_SOCIETY: dict[str, Any] = {
    **COUNTER_SOCIETY,
    "agents": [{"type": "counter", "n": 8, "config": {"llm_calls": 1}}],
}
SOCIETIES = {
    "llm_feed": LLM_SOCIETY,
    "counter": COUNTER_SOCIETY,
    "instant": INSTANT_SOCIETY,
    "counter1": COUNTER1_SOCIETY,
}
BATCH_TITLE = "ray::run_staged_batch"
ENV_TITLE = "ray::EnvActor"
# Rows the driver adds about lost attempts: they are the difference we expect.
EXPECTED_EXTRA = {"batch_failures"}


def snapshot(path: Path) -> dict[str, Any]:
    """Everything a run committed, reduced to what two runs of one seed share."""
    # read_only: nothing is cut, so rows past the last commit would be counted too
    s = Society.open(path, executor="local", progress=False, read_only=True)
    run = open_run(path)
    try:
        rows = log_rows(path)
        return {
            "tick": s.tick,
            "agents": s.agent_states(),
            "env": [d["state"] for d in s.env_state()],
            # (an empty dataset directory is what truncating an aborted tick's rows leaves)
            "rows": {k: v for k, v in rows.items() if k not in EXPECTED_EXTRA and v},
            "spans": span_rows(path),
            "lost": rows.get("batch_failures", Counter()),
            # what the store's reader (DuckDB over the shards) sees
            "sql": {
                name: int(run.sql(f"select count(*) from {name}").iloc[0, 0])
                for name in ("agent_states", "llm_calls", "env_events", "timeline")
            },
        }
    finally:
        run.close()
        s.close()


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Uninterrupted runs (local executor: same results as Ray, see test_ray.py)."""
    out = {}
    for name, cfg in SOCIETIES.items():
        path = tmp_path_factory.mktemp(f"ref-{name}") / "run"
        s = Society.create(path, executor="local", progress=False, **cfg)
        s.run_sync(until=TICKS)
        s.close()
        out[name] = snapshot(path)
    return out


def assert_same(got: dict[str, Any], ref: dict[str, Any]) -> None:
    """Row by row: no duplicate (multiset counts) and no missing row, states equal."""
    assert got["tick"] == ref["tick"] == TICKS
    assert set(got["rows"]) == set(ref["rows"])
    for name, rows in ref["rows"].items():
        extra, missing = got["rows"][name] - rows, rows - got["rows"][name]
        assert not extra and not missing, f"{name}: {sum(extra.values())} extra, " + (
            f"{sum(missing.values())} missing; first extra: {next(iter(extra), None)}"
        )
    assert got["spans"] == ref["spans"]
    assert got["sql"] == ref["sql"]
    assert got["agents"] == ref["agents"]
    assert got["env"] == ref["env"]


def descendants_titled(title: str) -> list[int]:
    """Pids of this process's descendants (the session's Ray) whose title starts so."""
    out = []
    for p in psutil.Process().children(recursive=True):
        with suppress(psutil.Error):
            if " ".join(p.cmdline()).startswith(title):
                out.append(p.pid)
    return out


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def run_in_thread(s: Society) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["out"] = s.run_sync(until=TICKS)
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, box


def kill_mid_batch(s: Society, title: str, *, after_tick: int = 1) -> int:
    """Once ``after_tick`` is committed and a batch task is running, SIGKILL ``title``."""
    wait_for(lambda: s.tick >= after_tick, 90, f"tick {after_tick}")
    wait_for(lambda: descendants_titled(BATCH_TITLE), 60, "a running batch task")
    time.sleep(1.0)  # batches take seconds (vllm-3b latencies): well inside one
    pid = wait_for(lambda: descendants_titled(title), 30, title)[0]
    os.kill(pid, signal.SIGKILL)
    return pid


@pytest.mark.parametrize("society", ["llm_feed", "counter"])
def test_worker_killed_mid_batch_is_retried_without_duplicates(
    ray_session: Any,
    tmp_path: Path,
    references: dict[str, Any],
    society: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "run"
    s = Society.create(path, executor="ray", progress=False, **SOCIETIES[society])
    thread, box = run_in_thread(s)
    killed_at = s.tick + 1
    kill_mid_batch(s, BATCH_TITLE)
    thread.join(timeout=150)
    assert not thread.is_alive(), "the run did not finish after the worker kill"
    assert "error" not in box, repr(box.get("error"))
    s.close()
    got = snapshot(path)
    assert_same(got, references[society])
    lost = [json.loads(k) for k in got["lost"]]
    assert lost, "the killed attempt was not recorded in batch_failures"
    assert {r["error_class"] for r in lost} <= {"WorkerCrashedError", "TaskCancelledError"}
    assert all(r["tick"] >= killed_at for r in lost)
    # one line of agentlab's says what happened and what it did (Ray's own is shortened)
    err = capsys.readouterr().err
    assert "lost its Ray worker on attempt 1" in err and "runs again" in err, err[-2000:]


@pytest.mark.parametrize("resume", ["open", "in_place"])
def test_worker_killed_with_no_attempt_left_then_retried(
    ray_session: Any, tmp_path: Path, references: dict[str, Any], resume: str
) -> None:
    """The found case: the tick fails (here: retries disabled); retrying it in place or
    after ``Society.open`` must not duplicate the killed attempt's steps or calls."""
    path = tmp_path / "run"
    options = {"max_attempts": 1}
    s = Society.create(
        path, executor="ray", executor_options=options, progress=False, **COUNTER_SOCIETY
    )
    thread, box = run_in_thread(s)
    kill_mid_batch(s, BATCH_TITLE)
    thread.join(timeout=150)
    assert not thread.is_alive()
    err = box.get("error")
    assert isinstance(err, WorkerLostError), repr(err)
    assert "WorkerCrashedError" in str(err) and "nothing of the tick was committed" in str(err)
    if resume == "open":
        s.close()
        s = Society.open(path, executor="ray", progress=False)
    s.run_sync(until=TICKS)
    s.close()
    got = snapshot(path)
    assert_same(got, references["counter"])


def tree(path: Path) -> dict[str, bytes]:
    """Every file of a run directory with its bytes."""
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_a_superseded_attempt_running_late_cannot_touch_the_run(
    ray_session: Any, tmp_path: Path, references: dict[str, Any]
) -> None:
    """What a partitioned node's orphan does: finish a batch attempt the driver gave up
    on, long after. Batches are staged, so not one byte of the run changes."""
    from agentlab.runtime.staging import read_segment, run_staged_batch

    path = tmp_path / "run"
    s = Society.create(path, executor="ray", progress=False, **INSTANT_SOCIETY)
    s.run_sync(until=2)
    before = tree(path)
    late = ray_session.remote(num_cpus=1, max_retries=0)(run_staged_batch)
    # An attempt of the committed tick 2 and of the coming tick 3, each run to the end.
    late_batches = [s._batches(2)[0], *s._batches(3)]
    segments = [read_segment(s.store, [a.agent_id for a in b.agents]) for b in late_batches]
    refs = [late.remote(b, s.proxy, seg) for b, seg in zip(late_batches, segments, strict=True)]
    staged = ray_session.get(refs, timeout=150)
    assert sum(x.result.steps for x in staged) == 10 and all(x.log and x.writes for x in staged)
    after = tree(path)
    assert after.keys() == before.keys()
    assert [k for k in before if before[k] != after[k]] == []
    s.run_sync(until=TICKS)
    s.close()
    assert_same(snapshot(path), references["instant"])


@pytest.mark.parametrize("resume", ["open", "in_place"])
def test_env_actor_killed_mid_tick_errors_then_resumes_cleanly(
    ray_session: Any, tmp_path: Path, references: dict[str, Any], resume: str
) -> None:
    path = tmp_path / "run"
    s = Society.create(path, executor="ray", progress=False, **LLM_SOCIETY)
    thread, box = run_in_thread(s)
    kill_mid_batch(s, ENV_TITLE)
    thread.join(timeout=150)
    assert not thread.is_alive()
    err = box.get("error")
    assert isinstance(err, EnvActorDiedError), repr(err)
    assert "env actor" in str(err) and "Society.open" in str(err)
    committed = s.tick
    assert 1 <= committed < TICKS
    if resume == "open":
        s.close()
        s = Society.open(path, executor="ray", progress=False)
        assert s.tick == committed
    out = s.run_sync(until=TICKS)
    assert out["tick"] == TICKS
    s.close()
    assert_same(snapshot(path), references["llm_feed"])


@pytest.mark.parametrize("society", ["counter1", "llm_feed"])
def test_a_hung_worker_is_abandoned_at_the_batch_deadline(
    ray_session: Any, tmp_path: Path, references: dict[str, Any], society: str
) -> None:
    """A worker that stops answering (SIGSTOP: what a partitioned node that Ray never
    declares dead looks like to the driver) would make the tick wait forever; past
    ``batch_deadline_s`` the attempt is abandoned and the batch (with an env: the tick)
    runs again elsewhere, with the same rows as an uninterrupted run."""
    path = tmp_path / "run"
    # Measured here (local, unloaded): ticks of these societies take 3-9 s; a batch as
    # long as the tick at most. vllm-3b decodes are slow, so leave a wide margin.
    deadline = 30.0
    s = Society.create(
        path,
        executor="ray",
        executor_options={"batch_deadline_s": deadline},
        progress=False,
        **SOCIETIES[society],
    )
    thread, box = run_in_thread(s)
    wait_for(lambda: s.tick >= 1, 90, "tick 1")
    pid = wait_for(lambda: descendants_titled(BATCH_TITLE), 60, "a running batch task")[0]
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        thread.join(timeout=240)
        assert not thread.is_alive(), "the tick waited on the stopped worker"
        assert "error" not in box, repr(box.get("error"))
        assert time.monotonic() - stopped >= deadline * 0.9
        # Ray's force-cancel is an RPC a stopped worker never serves: the executor killed
        # it (it had reported its pid), so its CPU went back to the run.
        wait_for(lambda: not psutil.pid_exists(pid), 30, "the stopped worker's end")
    finally:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    s.close()
    got = snapshot(path)
    assert_same(got, references[society])
    lost = [json.loads(k) for k in got["lost"]]
    assert "BatchDeadlineError" in {r["error_class"] for r in lost}, lost
    assert all("batch_deadline_s=30" in r["error"] for r in lost
               if r["error_class"] == "BatchDeadlineError")  # fmt: skip


def test_batch_deadline_option_is_checked() -> None:
    from agentlab.errors import ConfigError
    from agentlab.runtime.ray_executor import _deadline

    assert _deadline(None) is None and _deadline(0) is None and _deadline("2.5") == 2.5
    with pytest.raises(ConfigError, match="batch_deadline_s"):
        _deadline(-1)
    with pytest.raises(ConfigError, match="'soon'"):
        _deadline("soon")


_DRIVER = r"""
import json, sys, time
import ray
from agentlab.runtime import Society
from agentlab.store import open_run
from agentlab.runtime.ray_init import ensure_ray

path, address, ticks, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
cfg = json.loads(sys.argv[5])
ensure_ray(address)
deadline = time.monotonic() + 90
while sum(n["Alive"] for n in ray.nodes()) < 2 and time.monotonic() < deadline:
    time.sleep(0.2)
options = {"address": address, "max_workers": 2}
if mode == "create":
    s = Society.create(path, executor="ray", executor_options=options, progress=False, **cfg)
else:
    s = Society.open(path, executor="ray", executor_options=options, progress=False)
head = [n["NodeID"] for n in ray.nodes() if "node:__internal_head__" in n["Resources"]]
here = ray.get_runtime_context().get_node_id()
print("DRIVER_ON_HEAD", here in head, flush=True)
try:
    out = s.run_sync(until=ticks)
    print("RESULT " + json.dumps({"tick": out["tick"]}), flush=True)
except Exception as exc:
    cause = exc.__cause__
    print("ERROR " + json.dumps({"class": type(exc).__name__, "msg": str(exc),
                                 "cause": repr(cause)[:2000]}), flush=True)
    sys.exit(3)
"""


def test_second_node_killed_mid_tick(
    tmp_path: Path, references: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    from tests.runtime.ray_cluster import two_node_cluster

    path = tmp_path / "run"
    repo = Path(__file__).resolve().parents[2]
    with two_node_cluster(tmp_path / "cluster") as cluster:

        def driver(mode: str) -> subprocess.Popen[str]:
            return subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _DRIVER,
                    str(path),
                    cluster.address,
                    str(TICKS),
                    mode,
                    json.dumps(LLM_SOCIETY),
                ],
                cwd=repo,
                env=cluster.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )

        proc = driver("create")
        # Kill the second node while one of its workers runs a batch of tick >= 2.
        step_file = path / "SOCIETY_STEP.json"

        def committed() -> int:
            with suppress(OSError, ValueError, KeyError):
                return int(json.loads(step_file.read_text())["tick"])
            return -1

        wait_for(lambda: committed() >= 1 or proc.poll() is not None, 120, "tick 1")
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert cluster.worker is not None
        node2 = cluster.worker
        wait_for(lambda: node2.task_pids(BATCH_TITLE), 60, "a batch on node 2")
        time.sleep(1.0)
        n_killed = node2.kill()
        assert n_killed >= 2  # ray start + raylet + workers
        out, _ = proc.communicate(timeout=150)
        result = [line for line in out.splitlines() if line.startswith(("RESULT", "ERROR"))]
        assert result, out[-3000:]
        if result[-1].startswith("ERROR"):
            # Allowed: a clear error and a clean resume on the surviving head.
            assert json.loads(result[-1][6:])["class"] in {"WorkerLostError", "EnvActorDiedError"}
            again = driver("open")
            out2, _ = again.communicate(timeout=150)
            assert "RESULT" in out2, out2[-3000:]
        else:
            # The tick completed on the head: the lost attempt is in the committed log.
            assert sum(snapshot(path)["lost"].values()) >= 1
        print("two-node outcome:", result[-1], [ln for ln in out.splitlines() if "DRIVER" in ln])
    assert_same(snapshot(path), references["llm_feed"])
