"""One writer per run directory, with real processes: a second writer is refused with the
holder's pid, host and start time; readers never block; kill -9 of the holder frees it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentlab import open_run
from agentlab.errors import RunLockedError, StoreError
from agentlab.runtime import Society

ROOT = Path(__file__).resolve().parents[2]

HOLDER = r"""
import sys
from agentlab import Society
s = Society.create(sys.argv[1], agents={"counter": 3}, env=["social_feed"], seed=1,
                   clock="virtual", progress=False)
s.run_sync(ticks=1)
print("ready", flush=True)
sys.stdin.read()          # hold the run open until the test closes our stdin
s.run_sync(ticks=1)
s.close()
"""

WRITER = r"""
import sys
from agentlab import Society
from agentlab.errors import RunLockedError
try:
    s = Society.open(sys.argv[1], progress=False)
except RunLockedError as exc:
    print(exc, file=sys.stderr)
    sys.exit(3)
s.run_sync(ticks=2)
s.close()
"""


def _py(code: str, *args: str, **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "AGENTLAB_PROGRESS": "0"}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, cwd=ROOT, text=True, **kw)  # type: ignore[call-overload]


def _start_holder(run: Path) -> subprocess.Popen[str]:
    p = _py(HOLDER, str(run), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.strip() == "ready", f"holder did not start: {line!r}"
    return p


def _timeline_ticks(run: Path) -> list[int]:
    return [int(t) for t in open_run(run).sql("select tick from timeline order by tick")["tick"]]


def test_second_writer_process_is_refused_naming_the_holder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    holder = _start_holder(run)
    try:
        # In this process and in another one: both refused, both told who holds it.
        with pytest.raises(RunLockedError) as err:
            Society.open(run, progress=False)
        msg = str(err.value)
        assert f"pid {holder.pid}" in msg and socket.gethostname() in msg and "since 20" in msg
        assert "open_run" in msg  # and how to read it meanwhile
        with pytest.raises(RunLockedError, match=f"pid {holder.pid}"):
            Society.create(run, agents=2)
        other = _py(WRITER, str(run), stderr=subprocess.PIPE)
        _, stderr = other.communicate(timeout=60)
        assert other.returncode == 3, stderr
        assert f"pid {holder.pid}" in stderr
        # Readers never take the lock: reading while the holder writes works at once.
        t0 = time.perf_counter()
        assert _timeline_ticks(run) == [1]
        ro = Society.open(run, read_only=True)
        assert ro.tick == 1 and len(ro.agent_states()) == 3 and ro.env_state()
        with pytest.raises(StoreError, match="read_only=True"):
            asyncio.run(ro.step())
        assert time.perf_counter() - t0 < 10
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(60) == 0
    # The holder is gone: a new writer gets the run, and every tick has one row.
    w = _py(WRITER, str(run), stderr=subprocess.PIPE)
    _, stderr = w.communicate(timeout=60)
    assert w.returncode == 0, stderr
    assert _timeline_ticks(run) == [1, 2, 3, 4]
    steps = open_run(run).sql("select tick, agent_id, count(*) n from agent_states group by 1, 2")
    assert set(steps["n"]) == {1}


def test_deleting_the_lock_file_does_not_let_a_second_writer_in(tmp_path: Path) -> None:
    run = tmp_path / "run"
    holder = _start_holder(run)
    try:
        (run / "WRITER.lock").unlink()  # a cleanup script, a user tidying the folder
        other = _py(WRITER, str(run), stderr=subprocess.PIPE)
        _, stderr = other.communicate(timeout=60)
        assert other.returncode == 3, stderr
        assert "WRITER.lock, which was deleted" in stderr
        with pytest.raises(RunLockedError):
            Society.open(run, progress=False)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(60) == 0
    assert _timeline_ticks(run) == [1, 2]  # only the holder wrote
    s = Society.open(run, progress=False)  # free again once the holder is gone
    s.close()


def test_kill_9_of_the_holder_frees_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    holder = _start_holder(run)
    holder.send_signal(signal.SIGKILL)
    holder.wait(30)
    s = Society.open(run, progress=False)  # no stale lock to clean up by hand
    asyncio.run(s.run(ticks=1))
    s.close()
    assert _timeline_ticks(run) == [1, 2]


def test_in_one_process_a_later_open_takes_over_and_the_earlier_object_stops(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    first = Society.create(run, agents={"counter": 2}, progress=False)
    asyncio.run(first.run(ticks=1))
    second = Society.open(run, progress=False)  # e.g. a notebook cell run again
    with pytest.raises(RunLockedError, match="took over"):
        asyncio.run(first.run(ticks=1))
    asyncio.run(second.run(ticks=1))
    second.close()
    with pytest.raises(StoreError, match="advanced it after close"):
        asyncio.run(first.run(ticks=1))
    assert _timeline_ticks(run) == [1, 2]
    # close() frees the run for another process
    w = _py(WRITER, str(run), stderr=subprocess.PIPE)
    _, stderr = w.communicate(timeout=60)
    assert w.returncode == 0, stderr
    holder_doc = (run / "WRITER.lock").read_text()
    assert holder_doc == ""  # a released lock names nobody
    assert json.loads((run / "SOCIETY_STEP.json").read_text())["tick"] == 4


def test_a_running_society_is_not_taken_over_in_its_own_process(tmp_path: Path) -> None:
    run = tmp_path / "run"
    s = Society.create(run, agents={"counter": 2}, clock="virtual", progress=False)

    async def main() -> None:
        task = asyncio.create_task(s.run())  # runs until stop()
        while s.tick < 2:
            await asyncio.sleep(0)
        with pytest.raises(RunLockedError, match="running Society object in this process") as e:
            Society.open(run, progress=False)
        # a re-run live cell lost its view (the cell's output): how to get it back
        assert "The run goes on: a new cell holding its live view's name" in str(e.value)
        s.stop()
        await task

    asyncio.run(main())
    t = s.tick
    Society.open(run, progress=False).close()  # stopped: now it may be taken over
    assert json.loads((run / "SOCIETY_STEP.json").read_text())["tick"] == t
