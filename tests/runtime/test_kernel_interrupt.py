"""The kernel's interrupt (JupyterLab's stop button) stops a society run in a notebook.

Found in a real kernel (ipykernel 7): ``Society.run_sync`` in a cell got the interrupt at
once, but the executor's ``with`` block joined the worker first, so all 60 ticks ran on and
the cell then ended in a ``KeyboardInterrupt`` traceback; an awaited ``run()`` that waits
(a 10 s tick on the real clock, a pause) got it only when the wait ended (ipykernel#881).
The unit tests send a real SIGINT to the waiting thread; the kernel tests drive a real
kernel through ``jupyter_client``, as JupyterLab does.
"""

from __future__ import annotations

import asyncio
import queue
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentlab.runtime.worker_loop import run_in_worker_loop
from agentlab.store.atomic import read_json


def _interrupt_when(started: threading.Event) -> None:
    """A real SIGINT to the main thread once ``started`` is set (it is then waiting)."""

    def send() -> None:
        started.wait(10)
        time.sleep(0.2)  # the main thread has long been inside its wait
        main = threading.main_thread().ident
        assert main is not None
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=send, daemon=True).start()


@pytest.fixture
def default_sigint() -> None:
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not Python's default handler here")


async def _add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


async def _boom() -> None:
    raise ValueError("inside the worker")


def test_result_and_error_come_back() -> None:
    assert run_in_worker_loop(_add(2, 3)) == 5
    with pytest.raises(ValueError, match="inside the worker"):
        run_in_worker_loop(_boom())


def test_an_interrupt_cancels_the_work_and_returns_what_it_returns(default_sigint: None) -> None:
    started = threading.Event()
    seen: list[str] = []

    async def long_work() -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append(threading.current_thread().name)
            return "stopped"
        return "ran on"

    _interrupt_when(started)
    t = time.perf_counter()
    assert run_in_worker_loop(long_work()) == "stopped"
    assert time.perf_counter() - t < 5
    assert seen == ["agentlab-run"]  # cancelled in its own loop's thread


def test_work_that_does_not_handle_the_cancel_raises_it(default_sigint: None) -> None:
    started = threading.Event()

    async def long_work() -> None:
        started.set()
        await asyncio.sleep(30)

    _interrupt_when(started)
    with pytest.raises(asyncio.CancelledError):
        run_in_worker_loop(long_work())


def _run_and_interrupt(
    tmp_path: Path, code: str, ready: Callable[[], bool], setup: str = ""
) -> tuple[str, dict[str, Any], float]:
    """Run ``code`` in a fresh kernel (after a cell ``setup``, if given), interrupt it once
    ``ready()`` (what the stop button sends), return (its output, the execute reply,
    seconds from interrupt to idle)."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        if setup:
            assert kc.execute_interactive(setup, timeout=60)["content"]["status"] == "ok"
        msg_id = kc.execute(code)
        out: list[str] = []
        deadline = time.monotonic() + 120
        interrupted_at = None
        while True:
            assert time.monotonic() < deadline, out
            if interrupted_at is None and ready():
                km.interrupt_kernel()
                interrupted_at = time.monotonic()
            try:
                msg: dict[str, Any] = kc.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                out.append(f"ERROR {content['ename']}")
            elif kind == "status" and content["execution_state"] == "idle":
                break
        ended = time.monotonic()
        reply = kc.get_shell_msg(timeout=10)["content"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    text = "".join(out)
    assert interrupted_at is not None, text
    return text, reply, ended - interrupted_at


def _tick(run: Path) -> int:  # the committed tick (both files are written atomically)
    return int((read_json(run / "SOCIETY_STEP.json", default=None) or {}).get("tick", 0))


def _status(run: Path) -> str:
    return str((read_json(run / "run.json", default=None) or {}).get("status", "missing"))


def test_interrupting_run_sync_in_a_real_kernel_stops_the_run(tmp_path: Path) -> None:
    run = tmp_path / "intr"
    code = (
        "from agentlab.runtime import Society\n"
        f"s = Society.create({str(run)!r}, agents=40, llm='sim/vllm-3b', clock='virtual',"
        " seed=1, progress=False)\n"
        "r = s.run_sync(ticks=100_000)\n"
        "print('RESULT', r['status'], r['tick'], s.tick)\n"
        "r = s.run_sync(ticks=1)\n"
        "print('AGAIN', r['status'], r['tick'])\n"
    )
    text, reply, took = _run_and_interrupt(tmp_path, code, lambda: _tick(run) >= 2)
    assert reply["status"] == "ok", text  # no KeyboardInterrupt traceback
    result = next(line for line in text.splitlines() if line.startswith("RESULT"))
    _, status, tick, now = result.split()
    assert status == "stopped" and tick == now
    assert f"stopped after tick {tick}; tick {int(tick) + 1} was discarded" in text
    assert f"AGAIN done {int(tick) + 1}" in text  # the same society runs on
    assert took < 30, text  # at the interrupt, not after 100,000 ticks


def test_interrupting_an_awaited_run_that_waits_stops_it_at_once(tmp_path: Path) -> None:
    # a 30 s tick on the real clock: the interrupt lands within the wake period, not at 30 s
    run = tmp_path / "slow"
    code = (
        "from agentlab.runtime import Society\n"
        f"s = Society.create({str(run)!r}, agents=2, clock='real', seed=1, tick_seconds=30,"
        " progress=False)\n"
        "r = await s.run(ticks=3)\n"
        "print('RESULT', r['status'], r['tick'])\n"
    )
    started: list[float] = []

    def ready() -> bool:
        if _status(run) != "running":
            return False
        started.append(time.monotonic())
        return time.monotonic() - started[0] > 1.0

    text, reply, took = _run_and_interrupt(tmp_path, code, ready)
    assert reply["status"] == "ok", text
    assert "RESULT stopped 0" in text and "stopped after tick 0" in text
    assert took < 5, (took, text)


def _after(seconds: float) -> Callable[[], bool]:
    start: list[float] = []

    def ready() -> bool:
        start.append(time.monotonic())
        return start[-1] - start[0] > seconds

    return ready


def test_any_awaiting_cell_takes_the_interrupt_once_agentlab_is_imported(tmp_path: Path) -> None:
    # ipykernel#881: without the cell timer this waits out the 30 s (measured: 20 s sleep,
    # interrupt at 3 s, took effect at 20.1 s), here it lands within the wake period
    setup = "import agentlab\nfrom agentlab.llm import LLMClient"
    sleep = "import asyncio\nawait asyncio.sleep(30)\nprint('RESULT slept')"
    text, reply, took = _run_and_interrupt(tmp_path, sleep, _after(1.0), setup)
    assert reply["status"] == "error" and "RESULT" not in text and took < 5, (took, text)
    # a long reply awaited on the real clock (~27 s), as from a slow provider
    complete = (
        "llm = LLMClient('sim/vllm-3b', seed=1)\n"
        "r = await llm.complete([{'role': 'user', 'content': 'a long story'}],"
        " max_tokens=3000, min_tokens=3000)\n"
        "print('RESULT', r.usage)"
    )
    text, reply, took = _run_and_interrupt(tmp_path, complete, _after(1.0), setup)
    assert reply["status"] == "error" and "RESULT" not in text and took < 5, (took, text)


def test_the_wakeups_leave_simulated_runs_unchanged(tmp_path: Path) -> None:
    # what a cell's timer does to an awaited run on the kernel's loop, woken every
    # millisecond of wall time instead of every 0.2 s: a society and an experiment
    from agentlab.core.kernel_wakeup import LoopWaker
    from agentlab.runtime import Society
    from agentlab.store import open_run
    from agentlab.topology import Experiment

    async def rows(name: str, waker: LoopWaker | None) -> tuple[list[Any], list[Any]]:
        if waker is not None:
            waker.start()
        try:
            s = Society.create(tmp_path / name, agents=30, env=["social_feed"],
                               llm="sim/vllm-3b", clock="virtual", seed=3, progress=False)  # fmt: skip
            await s.run(ticks=3)
            s.close()
            exp = Experiment(topologies=["sequential", "star", "full_mesh"], runs=4,
                             llm="sim/vllm-3b", seed=0, clock="virtual",
                             out=tmp_path / f"{name}-exp", progress=False)  # fmt: skip
            res = await exp.run()
        finally:
            if waker is not None:
                waker.stop()
        df = open_run(tmp_path / name).llm_calls_df()
        cols = ["agent_id", "start", "end", "prompt_tokens", "completion_tokens"]
        calls = [tuple(r) for r in df[cols].itertuples(index=False)]
        exp_calls = res.calls_df()[["run_id", "start", "end", "completion_tokens"]]
        return calls, [tuple(r) for r in exp_calls.itertuples(index=False)]

    class CountingWaker(LoopWaker):
        wakes = 0

        def _wake(self, loop: asyncio.AbstractEventLoop) -> None:
            self.wakes += 1
            super()._wake(loop)

    plain = asyncio.run(rows("plain", None))
    waker = CountingWaker(period=0.001)
    woken = asyncio.run(rows("woken", waker))
    assert len(plain[0]) > 100 and len(plain[1]) > 100
    assert waker.wakes > 100  # the loop was woken all along
    assert woken == plain


def test_interrupting_an_awaited_experiment_returns_its_finished_runs(tmp_path: Path) -> None:
    # (it ended in a CancelledError traceback; a second run() then repeated the finished
    # runs under the same ids and pooled their calls into the same traffic)
    out = tmp_path / "exp"
    code = (
        "from agentlab.topology import Experiment\n"
        "exp = Experiment(topologies=['sequential', 'star'], runs=400, llm='sim/vllm-3b',"
        f" seed=0, clock='virtual', out={str(out)!r}, progress=False)\n"
        "res = await exp.run()\n"
        "print('RESULT', res.status, res.runs_done, len(res.runs_df()))\n"
        "try:\n"
        "    await exp.run()\n"
        "except Exception as e:\n"
        "    print('AGAIN', type(e).__name__)\n"
    )

    def ready() -> bool:  # a first run finished (its row's shard is written)
        return any(f.stat().st_size for f in (out / "replay" / "experiment_runs").glob("*"))

    text, reply, took = _run_and_interrupt(tmp_path, code, ready)
    assert reply["status"] == "ok", text
    line = next(x for x in text.splitlines() if x.startswith("RESULT"))
    _, status, done, rows = line.split()
    assert status == "stopped" and done == rows and 0 < int(done) < 800, text
    assert f"experiment stopped after {done} of 800 runs" in text
    assert "AGAIN ConfigError" in text
    assert took < 10, text
