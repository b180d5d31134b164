"""Virtual time with the Ray executor: refused, every way in, with the reason.

Why it is not built (runtime/README.md, "Virtual time across Ray workers", measured): the
timings of a virtual run are a function of the one simulated server, client-CPU queue and
AIMD gate every agent shares in one event loop. A time server that runs the client as it
is needs a round trip per LLM answer, serially (slower than local at any size); one that
exploits the FIFO order of those queues needs ~32-37 barriers per tick and would be cheap,
but needs the client's call path split in two and was not built. What is checked here:

- ``Society.create``, a run config, ``Society.open`` of a virtual run, and a live
  ``RayExecutor`` object are all refused with one ``ConfigError`` that says why and what
  to use instead, before anything of the run is written or changed;
- the local virtual run those timings come from (the reference any Ray version would have
  to equal) does not depend on how agents are split into batches while every batch is in
  flight at once (``AGENTLAB_LOCAL_MAX_BATCHES``, default 8).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlab.errors import ConfigError
from agentlab.llm import LLMClient
from agentlab.runtime import Society
from agentlab.runtime.config import validate_society_config
from tests.runtime.resume_helpers import committed_files, diff_summary, strict_rows

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WHY = "designed and costed but not built"


def _assert_refusal(exc: pytest.ExceptionInfo[ConfigError]) -> None:
    msg = str(exc.value)
    assert "clock 'virtual' needs executor 'local', got 'ray'" in msg
    assert WHY in msg and "Virtual time across Ray workers" in msg
    assert "use clock='real' with 'ray', or executor='local'" in msg


def _virtual_run(path: Path, n: int, ticks: int, batch_size: int) -> None:
    s = Society.create(
        path, agents=n, env=["social_feed"], llm=LLMClient("sim/vllm-3b", seed=7),
        clock="virtual", seed=7, batch_size=batch_size, progress=False,
    )  # fmt: skip
    s.run_sync(ticks=ticks)
    s.close()


def test_create_refuses_virtual_time_on_ray_before_writing_anything(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with pytest.raises(ConfigError) as exc:
        Society.create(
            run, agents=4, env=["social_feed"], llm=LLMClient("sim/vllm-3b", seed=7),
            clock="virtual", executor="ray", seed=7, progress=False,
        )  # fmt: skip
    _assert_refusal(exc)
    assert not (run / "SOCIETY.json").exists()


def test_a_run_config_with_virtual_time_on_ray_is_refused() -> None:
    with pytest.raises(ConfigError) as exc:
        validate_society_config({"agents": 4, "clock": "virtual", "executor": "ray"})
    _assert_refusal(exc)
    # the same config on real time, or on the local executor, is valid
    validate_society_config({"agents": 4, "clock": "real", "executor": "ray"})
    validate_society_config({"agents": 4, "clock": "virtual", "executor": "local"})


def test_reopening_a_virtual_run_on_ray_is_refused_and_leaves_it_runnable(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    _virtual_run(run, n=6, ticks=1, batch_size=3)
    before = committed_files(run)
    with pytest.raises(ConfigError) as exc:
        Society.open(run, executor="ray", progress=False)
    _assert_refusal(exc)
    assert committed_files(run) == before
    s = Society.open(run, progress=False)  # the local executor still runs it on
    assert s.run_sync(ticks=1)["tick"] == 2
    s.close()


@pytest.mark.ray
@pytest.mark.slow
def test_a_live_ray_executor_is_refused_for_virtual_time(ray_session: Any, tmp_path: Path) -> None:
    from agentlab.runtime.ray_executor import RayExecutor

    run = tmp_path / "run"
    _virtual_run(run, n=4, ticks=1, batch_size=2)
    before = committed_files(run)
    ex = RayExecutor()
    try:
        with pytest.raises(ConfigError) as exc:
            Society.open(run, executor=ex, progress=False)
        _assert_refusal(exc)
        with pytest.raises(ConfigError) as exc:
            Society.create(
                tmp_path / "new", agents=4, llm="sim/vllm-3b", clock="virtual", executor=ex,
                progress=False,
            )  # fmt: skip
        _assert_refusal(exc)
    finally:
        ex.close()
    assert committed_files(run) == before
    assert not (tmp_path / "new" / "SOCIETY.json").exists()


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
