"""``Society.run_sync`` inside a running loop (a notebook cell): the kernel's interrupt
stops the run behind it as the stop button stops an awaited ``run()``.

Found in a real kernel (ipykernel 7): the interrupt reached the cell at once, but the
executor's ``with`` block joined the worker first, so all 60 ticks ran on and the cell then
ended in a ``KeyboardInterrupt`` traceback. The unit tests send a real SIGINT to the
waiting thread; the last test drives a real kernel through ``jupyter_client``.
"""

from __future__ import annotations

import asyncio
import queue
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentlab.runtime.worker_loop import run_in_worker_loop


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


def test_interrupting_run_sync_in_a_real_kernel_stops_the_run(tmp_path: Path) -> None:
    from jupyter_client.manager import start_new_kernel

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
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        msg_id = kc.execute(code)
        out: list[str] = []
        step = run / "SOCIETY_STEP.json"
        deadline = time.monotonic() + 120
        interrupted_at = None
        while True:
            assert time.monotonic() < deadline, out
            if interrupted_at is None and step.exists() and _tick(step) >= 2:
                km.interrupt_kernel()  # what JupyterLab's stop button sends
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
    assert reply["status"] == "ok", text  # no KeyboardInterrupt traceback
    result = next(line for line in text.splitlines() if line.startswith("RESULT"))
    _, status, tick, now = result.split()
    assert status == "stopped" and tick == now
    assert f"stopped after tick {tick}; tick {int(tick) + 1} was discarded" in text
    assert f"AGAIN done {int(tick) + 1}" in text  # the same society runs on
    # it stopped at the interrupt, not after 100,000 ticks (the second run is one tick)
    assert ended - interrupted_at < 30, text


def _tick(step: Path) -> int:
    import json

    try:
        return int(json.loads(step.read_text()).get("tick", 0))
    except (OSError, ValueError):
        return 0
