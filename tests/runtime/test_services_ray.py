"""Ray tasks write through a pickled RunServices: one shard per worker, whole lines."""

from __future__ import annotations

import pickle
from pathlib import Path

import orjson
import pytest

from agentlab.runtime import RunServices
from agentlab.store import open_run

pytestmark = pytest.mark.ray


def test_services_pickle_small_without_live_resources(run_dir: Path) -> None:
    services = RunServices(run_dir, "sim/instant", seed=3)
    services.replay.append("rows", {"i": 1})  # builds a live sink in this process
    assert services.llm.model == "sim/instant"
    data = pickle.dumps(services)
    assert len(data) < 600
    clone = pickle.loads(data)
    assert clone.run_dir == services.run_dir and clone.seed == 3 and clone._live == {}
    assert clone.llm.model == "sim/instant"  # rebuilt from the config on first use


def test_ray_tasks_write_complete_lines(run_dir: Path, ray_session) -> None:
    ray = ray_session

    # Defined here so Ray pickles it by value: workers cannot import this test module
    # (pytest imports it under a rootdir-relative name that is not on their sys.path).
    def task(proxy: RunServices, task: int, n: int) -> str:
        import os

        sink = proxy.replay
        with proxy.trace.trace_span("batch", task=task):
            for i in range(n):
                sink.append("ray_rows", {"task": task, "i": i, "pid": os.getpid()})
        proxy.flush()  # a Ray worker may be killed without atexit: flush per task
        return sink.shard

    remote = ray.remote(num_cpus=1)(task)  # at most 2 workers to start on 2 CPUs
    proxy, n, tasks = RunServices(run_dir, "sim/instant"), 500, 6
    shards = ray.get([remote.remote(proxy, t, n) for t in range(tasks)], timeout=180)
    files = sorted((run_dir / "replay/ray_rows").glob("*.jsonl"))
    assert {f.stem for f in files} == set(shards)
    per_task: dict[int, list[int]] = {}
    for f in files:
        rows = [orjson.loads(line) for line in f.read_bytes().splitlines()]
        assert [r["_seq"] for r in rows] == list(range(len(rows)))  # complete, in order
        assert len({r["pid"] for r in rows}) == 1  # one process per shard
        for r in rows:
            per_task.setdefault(r["task"], []).append(r["i"])
    assert per_task == {t: list(range(n)) for t in range(tasks)}
    run = open_run(run_dir)
    assert int(run.sql("select count(*) from ray_rows").iloc[0, 0]) == n * tasks
    assert len(run.spans_df()) == tasks
