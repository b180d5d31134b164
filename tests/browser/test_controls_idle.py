"""The society buttons with an idle kernel, as a researcher presses them (marker ``browser``).

No task but the society's own runs on the kernel's loop: nothing else wakes the loop when a
button's message arrives (the older controls test kept a 50 ms probe task running, which
hid exactly that). The page's sampler is the only observer; the kernel is asked nothing
until the end.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Lab, history, open_notebook, screenshot, wait_for

pytestmark = pytest.mark.browser

ROOT = "[data-agentlab=society]"


def _shutdown_kernels(lab: Lab) -> None:
    with urllib.request.urlopen(lab.url + "/api/kernels", timeout=10) as r:
        kernels = json.loads(r.read())
    for k in kernels:
        req = urllib.request.Request(f"{lab.url}/api/kernels/{k['id']}", method="DELETE")
        urllib.request.urlopen(req, timeout=10).close()


@pytest.fixture()
def lab(jupyter_lab: Lab) -> Iterator[Lab]:
    yield jupyter_lab
    _shutdown_kernels(jupyter_lab)


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
