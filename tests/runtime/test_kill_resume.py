"""THE kill-and-resume equivalence test.

A forked child process runs a small society and SIGKILLs itself (kill -9: no cleanup, no
flush, no atexit) at the K-th file-system event — a rename (``os.replace``: before or
after it), a log write (``os.write``) or an in-place state write (``os.pwrite``), whole or
torn half-way — with K drawn at random
over the whole run, so kills land mid-create, mid-batch, mid-write, between the agent
writes and the commit, and right after the commit. The run is then resumed (sometimes
killed again) until it completes. Its final agents, env state and log rows (timing, ids,
shard and seq columns excluded) must equal an uninterrupted run with the same seed: no
duplicates, no gaps.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
from pathlib import Path

import pytest

import agentlab.llm
import agentlab.runtime  # noqa: F401  (imported once here; forked children inherit it)
from tests.runtime.society_helpers import final_state, log_rows, span_rows

UNTIL = 4
TRIALS = 10


def _society_child(run_dir: str, kill_at: int, mode: str, count_file: str | None) -> None:
    # Runs in a forked child: patch the two syscalls every durable change goes through.
    events = [0]
    real_replace, real_write = os.replace, os.write

    def hit() -> bool:
        events[0] += 1
        return events[0] == kill_at

    def replace(src, dst, *a, **k):  # type: ignore[no-untyped-def]
        if mode == "before" and hit():
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(src, dst, *a, **k)
        if mode != "before" and hit():
            os.kill(os.getpid(), signal.SIGKILL)

    def write(fd, data):  # type: ignore[no-untyped-def]
        if hit():
            if mode == "torn" and len(data) > 1:
                real_write(fd, bytes(data[: len(data) // 2]))
            os.kill(os.getpid(), signal.SIGKILL)
        return real_write(fd, data)

    def pwrite(fd, data, offset):  # type: ignore[no-untyped-def]
        if hit():
            if mode == "torn" and len(data) > 1:
                real_pwrite(fd, bytes(data[: len(data) // 2]), offset)
            os.kill(os.getpid(), signal.SIGKILL)
        return real_pwrite(fd, data, offset)

    real_pwrite = os.pwrite
    os.replace, os.write, os.pwrite = replace, write, pwrite  # type: ignore[assignment]
    from agentlab.runtime import RetryPolicy, Society

    if (Path(run_dir) / "SOCIETY_STEP.json").exists():
        s = Society.open(run_dir, progress=False)
    else:
        s = Society.create(
            run_dir,
            agents=[
                {"type": "counter", "n": 5, "config": {"llm_calls": 1, "fail_every": 3}},
                {"type": "llm", "n": 4, "config": {"max_iterations": 2}},
            ],
            env=["test_notes"],
            llm="sim/instant",
            seed=11,
            batch_size=3,
            retry=RetryPolicy(max_attempts=2),
            progress=False,
        )
    s.run_sync(until=UNTIL)
    s.proxy.flush()
    if count_file:
        Path(count_file).write_text(str(events[0]))
    os._exit(0)


def _run_child(
    run_dir: Path, kill_at: int = 0, mode: str = "after", count_file: Path | None = None
) -> int:
    ctx = mp.get_context("fork")
    p = ctx.Process(
        target=_society_child, args=(str(run_dir), kill_at, mode, str(count_file or ""))
    )
    p.start()
    p.join(60)
    assert p.exitcode is not None, "society child hung"
    return p.exitcode


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, object, int]:
    d = tmp_path_factory.mktemp("ref") / "run"
    count = d.parent / "events.txt"
    assert _run_child(d, count_file=count) == 0
    return final_state(d), log_rows(d), span_rows(d), int(count.read_text())


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("trial", range(TRIALS))
def test_kill_anywhere_then_resume_equals_uninterrupted(
    reference: tuple[dict, dict, object, int], tmp_path: Path, trial: int
) -> None:
    ref_state, ref_rows, ref_spans, n_events = reference
    rng = random.Random(1000 + trial)
    run = tmp_path / "run"
    kills = 0
    # first kill anywhere in the run; later kills (at most 2 more) anywhere in the rest
    for attempt in range(3):
        mode = rng.choice(["before", "after", "torn"])
        code = _run_child(run, kill_at=rng.randint(1, n_events), mode=mode)
        if attempt == 0:  # the run is deterministic, so event K <= n_events is reached
            assert code == -signal.SIGKILL, f"first child was not killed (exit code {code})"
        if code == 0:
            break
        assert code == -signal.SIGKILL, f"child failed with exit code {code}"
        kills += 1
        if attempt == 0 or rng.random() < 0.5:
            continue
        break
    if not (run / "SOCIETY_STEP.json").exists() or final_state(run)["tick"] < UNTIL:
        assert _run_child(run) == 0
    assert kills >= 1
    got = final_state(run)
    assert got["tick"] == UNTIL
    assert got["agents"] == ref_state["agents"]
    assert got["env"] == ref_state["env"]
    rows = log_rows(run)
    assert rows.keys() == ref_rows.keys()
    for name in ref_rows:
        assert rows[name] == ref_rows[name], f"dataset {name} differs after resume"
    assert span_rows(run) == ref_spans
