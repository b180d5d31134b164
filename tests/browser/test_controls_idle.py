"""The society buttons with an idle kernel, as a researcher presses them (marker ``browser``).

No task but the society's own runs on the kernel's loop: nothing else wakes the loop when a
button's message arrives (the older controls test kept a 50 ms probe task running, which
hid exactly that). The page's sampler is the only observer; the kernel is asked nothing
until the end.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.browser.conftest import (
    Lab,
    history,
    open_notebook,
    screenshot,
    wait_for,
    write_notebook,
)

pytestmark = pytest.mark.browser

ROOT = "[data-agentlab=society]"


def _press(page: Any, action: str) -> None:
    page.locator(f"{ROOT} button[data-action={action}]").click()


def _open_idle_society(lab: Lab, page: Any, name: str) -> None:
    run = lab.root / "runs" / name
    cells = [
        f"RUN = {str(run)!r}",
        "from agentlab.runtime import Society\n"
        "from agentlab.viz import live\n"
        # 0.2 s of real time per tick: a few ticks per second, whatever the machine
        "soc = Society.create(RUN, agents=6, llm='sim/instant', seed=0, progress=False,\n"
        "                     tick_seconds=0.2)\n"
        "dash = live(soc)  # no ticks: start runs until stop\n"
        "dash",
    ]
    open_notebook(page, lab, f"{name}.ipynb", cells)
    wait_for(page, "society", "d.status === 'idle' && d.enabled === 'start'", timeout=90)
    # the cells have run: the kernel is idle from here on
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
        " === 'idle'",
        timeout=30_000,
    )


def test_pause_then_resume_with_an_idle_kernel(lab: Lab, lab_page: Any) -> None:
    _open_idle_society(lab, lab_page, "idle_resume")
    _press(lab_page, "start")
    wait_for(lab_page, "society", "d.status === 'running' && Number(d.tick) >= 2", timeout=60)
    _press(lab_page, "pause")
    held = int(wait_for(lab_page, "society", "d.status === 'paused'", timeout=30)["tick"])
    time.sleep(1.0)
    assert int(history(lab_page, "society")[-1]["tick"]) == held  # nothing ran while paused
    state = lab_page.inner_text(f"{ROOT} .al-state")
    assert "paused" in state and "resume" in state, state
    screenshot(lab_page, "idle_paused")
    t0 = time.monotonic()
    _press(lab_page, "resume")
    # ticks go on within seconds, with no other cell run to wake the kernel
    wait_for(
        lab_page, "society", f"d.status === 'running' && Number(d.tick) >= {held + 3}", timeout=20
    )
    resumed_s = time.monotonic() - t0
    _press(lab_page, "stop")
    last = wait_for(lab_page, "society", "d.status === 'stopped'", timeout=20)
    assert int(last["tick"]) >= held + 3
    screenshot(lab_page, "idle_resumed_stopped")
    print(f"resume -> 3 more ticks in {resumed_s:.1f} s")


def test_stop_while_paused_with_an_idle_kernel(lab: Lab, lab_page: Any) -> None:
    _open_idle_society(lab, lab_page, "idle_stop")
    _press(lab_page, "start")
    wait_for(lab_page, "society", "d.status === 'running' && Number(d.tick) >= 2", timeout=60)
    _press(lab_page, "pause")
    held = int(wait_for(lab_page, "society", "d.status === 'paused'", timeout=30)["tick"])
    time.sleep(0.5)
    _press(lab_page, "stop")
    last = wait_for(lab_page, "society", "d.status === 'stopped'", timeout=15)
    assert int(last["tick"]) == held  # stop while paused runs no further tick
    assert lab_page.locator(f"{ROOT} button[data-action=start]").is_enabled()
    state = lab_page.inner_text(f"{ROOT} .al-state")
    assert "stopped" in state, state
    # start again from the button: the run continues from the tick it stopped at
    _press(lab_page, "start")
    wait_for(lab_page, "society", f"d.status === 'running' && Number(d.tick) > {held}", timeout=20)
    _press(lab_page, "stop")
    wait_for(lab_page, "society", "d.status === 'stopped'", timeout=20)


def test_pause_and_resume_while_a_cell_awaits_the_run(lab: Lab, lab_page: Any) -> None:
    # Run All: the next cell awaits dash.task. Pause must not leave it hanging: the state
    # line says what holds it, and resume (pressed while that cell still runs) finishes it
    run = lab.root / "runs" / "run_all"
    cells = [
        f"RUN = {str(run)!r}",
        "from agentlab.runtime import Society\n"
        "from agentlab.viz import live\n"
        "soc = Society.create(RUN, agents=4, llm='sim/instant', seed=0, progress=False,\n"
        "                     tick_seconds=0.2)\n"
        "dash = live(soc, ticks=60)\n"
        "dash",
        "stats = await dash.task\nprint('finished', stats['ticks'], 'ticks')",
    ]
    write_notebook(lab.root / "run_all.ipynb", cells)
    open_notebook(lab_page, lab, "run_all.ipynb")
    # Run All without waiting for it (its promise resolves when the last cell finishes)
    lab_page.evaluate(
        "() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); return 1; }"
    )
    wait_for(lab_page, "society", "d.status === 'running' && Number(d.tick) >= 2", timeout=90)
    _press(lab_page, "pause")
    held = int(wait_for(lab_page, "society", "d.status === 'paused'", timeout=30)["tick"])
    time.sleep(1.5)
    assert int(history(lab_page, "society")[-1]["tick"]) == held
    state = lab_page.inner_text(f"{ROOT} .al-state")
    assert "dash.task" in state and "resume" in state, state
    assert "finished 60 ticks" not in lab_page.inner_text("body")  # the awaiting cell still runs
    _press(lab_page, "resume")
    lab_page.wait_for_function(
        "() => document.body.innerText.includes('finished 60 ticks')", timeout=90_000
    )
    wait_for(lab_page, "society", "d.status === 'done' && d.tick === '60'", timeout=20)
    screenshot(lab_page, "run_all_paused_resumed")


def test_a_background_experiment_stops_from_its_panel_with_an_idle_kernel(
    lab: Lab, lab_page: Any
) -> None:
    """``live(exp)`` runs the experiment in the background: the cell returns and the kernel
    is idle, so the kernel's stop button (which interrupts a cell) cannot stop it; it took
    ``dash.task.cancel()`` typed in a new cell. The experiment panel counts its runs and its
    *stop* ends it (the run in flight dropped), as the stop button ends an awaited run."""
    run = lab.root / "runs" / "exp_stop"
    cells = [
        f"RUN = {str(run)!r}",
        "from agentlab.llm import LLMClient\n"
        "from agentlab.topology import Experiment\n"
        "from agentlab.viz import live\n"
        "llm = LLMClient('sim/instant', overhead_s=0.02)  # 20 ms a call: a run in ~0.5 s\n"
        "exp = Experiment(topologies=['sequential', 'star'], agents=3, runs=100, llm=llm,\n"
        "                 clock='real', seed=0, out=RUN, progress=False)\n"
        "dash = live(exp)\n"
        "dash",
    ]
    open_notebook(lab_page, lab, "exp_stop.ipynb", cells)
    lab_page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
        " === 'idle'",
        timeout=30_000,
    )
    root = "[data-agentlab=experiment]"
    wait_for(lab_page, "experiment", "d.status === 'running' && Number(d.runsDone) >= 2",
             timeout=90)  # fmt: skip
    assert lab_page.locator(f"{root} button[data-action=stop]").is_enabled()
    lab_page.locator(f"{root} button[data-action=stop]").click()
    last = wait_for(lab_page, "experiment", "d.status === 'stopped'", timeout=30)
    done = int(last["runsDone"])
    assert 2 <= done < 200, last
    state = lab_page.inner_text(f"{root} .al-state")
    assert f"stopped after {done} of 200 runs" in state and "Experiment.open(" in state, state
    assert not lab_page.locator(f"{root} button[data-action=stop]").is_enabled()
    assert "No answer" not in lab_page.inner_text(root)  # the press was answered
    # the panel says it; the experiment's own stderr line would say it twice
    assert "experiment stopped after" not in lab_page.inner_text("body")
    time.sleep(1.0)  # nothing runs after the stop
    assert int(history(lab_page, "experiment")[-1]["runsDone"]) == done
    assert json.loads((run / "run.json").read_text())["status"] == "stopped"
    screenshot(lab_page, "experiment_stopped")
