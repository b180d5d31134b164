"""JupyterLab's stop button ("Interrupt the kernel") on a running society (marker ``browser``).

A researcher presses the notebook toolbar's stop button while a cell runs a society: the
run stops after its committed tick, the cell prints one line and the totals, no traceback,
within a second or two — whether the cell awaits ``run()`` on a run that waits (a 30 s tick
on the real clock: ipykernel delivered the interrupt only when that wait ended) or calls
``run_sync()`` (which ran every tick on in a worker thread, then raised
``KeyboardInterrupt``).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

from agentlab.store.atomic import read_json
from tests.browser.conftest import Lab, open_notebook, screenshot, write_notebook

pytestmark = pytest.mark.browser

STOP = "[data-command='notebook:interrupt-kernel']"
#: the text of every cell output (not the cells' sources, which hold 'RESULT' too)
OUTPUTS = """Array.from(document.querySelectorAll('.jp-OutputArea-output'))
  .map((e) => e.innerText).join('\\n')"""


def _json(path: Path, key: str) -> Any:
    return (read_json(path, default=None) or {}).get(key)  # (written atomically)


def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _start(page: Any, lab: Lab, name: str, run: Path, create: str, call: str) -> None:
    """Write a notebook that creates a society in ``run`` (``create``: its arguments), runs
    it (``call``) and prints ``RESULT status tick``; open it and run all its cells without
    waiting for them (the command's promise settles only when the last cell ends, as a
    researcher would not wait)."""
    cells = [
        "from agentlab.runtime import Society",
        f"s = Society.create({str(run)!r}, {create}, progress=False)\n"
        f"r = {call}\n"
        "print('RESULT', r['status'], r['tick'])",
    ]
    write_notebook(lab.root / name, cells)
    open_notebook(page, lab, name)
    page.evaluate(
        "() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); return 1; }"
    )


def _press_stop_and_read(page: Any) -> tuple[str, float]:
    """Click the toolbar's stop button; the cells' outputs once the cell printed RESULT, and
    the seconds that took."""
    t = time.monotonic()
    page.locator(STOP).first.click()
    page.wait_for_function(f"() => ({OUTPUTS}).includes('RESULT')", timeout=60_000)
    took = time.monotonic() - t
    # the one-line stop note is stderr, flushed apart from stdout (a worker thread's, with
    # run_sync): it may be drawn just after the totals
    with contextlib.suppress(Exception):
        page.wait_for_function(f"() => ({OUTPUTS}).includes('was discarded')", timeout=5_000)
    text: str = page.evaluate(f"() => {OUTPUTS}")
    return text, took


def test_stop_button_stops_an_awaited_run_that_waits(jupyter_lab: Lab, lab_page: Any) -> None:
    run = jupyter_lab.root / "runs" / "slow"
    create = "agents=2, clock='real', seed=1, tick_seconds=30"
    _start(lab_page, jupyter_lab, "stop_await.ipynb", run, create, "await s.run(ticks=3)")
    _wait(lambda: _json(run / "run.json", "status") == "running", 120, "the run to start")
    time.sleep(1.0)  # well inside the first 30 s tick
    text, took = _press_stop_and_read(lab_page)
    screenshot(lab_page, "stop_button_await")
    assert "RESULT stopped 0" in text
    assert "stopped after tick 0; tick 1 was discarded" in text
    assert "Traceback" not in text and "CancelledError" not in text
    assert took < 8, took  # not at the end of the 30 s tick
    assert _json(run / "run.json", "status") == "stopped"


def test_stop_button_stops_run_sync(jupyter_lab: Lab, lab_page: Any) -> None:
    run = jupyter_lab.root / "runs" / "sync"
    create = "agents=40, llm='sim/vllm-3b', clock='virtual', seed=1"
    _start(lab_page, jupyter_lab, "stop_sync.ipynb", run, create, "s.run_sync(ticks=100_000)")
    step = run / "SOCIETY_STEP.json"
    _wait(lambda: (_json(step, "tick") or 0) >= 2, 120, "tick 2 to commit")
    text, took = _press_stop_and_read(lab_page)
    screenshot(lab_page, "stop_button_run_sync")
    line = next(x for x in text.splitlines() if x.startswith("RESULT"))
    _, status, tick = line.split()
    assert status == "stopped" and int(tick) >= 2
    assert f"stopped after tick {tick}; tick {int(tick) + 1} was discarded" in text
    assert "KeyboardInterrupt" not in text and "Traceback" not in text
    assert took < 15, took
    _wait(lambda: _json(run / "run.json", "status") == "stopped", 10, "run.json: stopped")
