"""A live society view across a kernel restart mid-run, and its charts at one tick (marker
``browser``).

After a restart the view kept saying "running" with pause and stop on, and a press showed
nothing: anywidget drops ipywidgets' own ``comm_live_update`` listener on the model when it
renders, so the widget manager's disconnect never marked agentlab's views, and the old
comm's ``send`` threw ("Cannot send") before the no-answer timer started
(``widgets/_common.js``: ``watchSaved``, ``sender``). Before that, with exactly one tick
committed, three of the four charts drew the tick-1 point under "no ticks yet".
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.browser.conftest import KERNEL_IDLE, Lab, open_notebook, screenshot, wait_for

pytestmark = pytest.mark.browser

ROOT = "[data-agentlab=society]"

#: the society panel as the page shows it: marks, buttons, lines, each chart's empty state
PANEL = """() => {
  const e = document.querySelector('[data-agentlab=society]');
  if (!e) return null;
  const text = (sel) => { const n = e.querySelector(sel); return n ? n.textContent : ''; };
  return {
    tick: e.dataset.tick, saved: e.dataset.saved || null,
    disconnected: e.dataset.disconnected || null, noAnswer: e.dataset.noAnswer || null,
    status: text('.al-status'), label: text('.al-saved'), note: text('.al-savednote'),
    state: text('.al-state'), progress: text('.al-progress'), answer: text('.al-noanswer'),
    disabled: Array.from(e.querySelectorAll('button[data-action]')).filter((b) => b.disabled)
      .map((b) => b.dataset.action),
    charts: Array.from(e.querySelectorAll('.al-chart')).map((c) => c.dataset.empty || ''),
  };
}"""


def test_a_kernel_restart_mid_run_disconnects_the_view(lab: Lab, lab_page: Any) -> None:
    errors: list[str] = []
    lab_page.on("pageerror", lambda e: errors.append(str(e)))
    run = lab.root / "runs" / "restart"
    cells = [
        "from agentlab.runtime import Society\n"
        "from agentlab.viz import live\n"
        # 1.5 s of real time per tick: the one-tick state lasts long enough to read
        f"soc = Society.create({str(run)!r}, agents=4, env=['social_feed'], llm='sim/instant',\n"
        "                     seed=0, progress=False, tick_seconds=1.5)\n"
        "dash = live(soc)  # no ticks: start runs until stop\n"
        "dash",
    ]
    open_notebook(lab_page, lab, "restart.ipynb", cells)
    wait_for(lab_page, "society", "d.status === 'idle' && d.enabled === 'start'", timeout=90)
    idle = lab_page.evaluate(PANEL)
    assert idle["charts"] == ["no ticks yet"] * 4, idle
    lab_page.locator(f"{ROOT} button[data-action=start]").click()

    # one tick committed: a point on every chart, no "no ticks yet" over it
    one = lab_page.wait_for_function(
        f"() => {{ const p = ({PANEL})(); return p && p.tick === '1' ? p : null; }}",
        timeout=60_000,
    ).json_value()
    assert one["charts"] == [""] * 4, one
    assert one["saved"] is None and one["status"] == "running", one
    screenshot(lab_page, "restart_0_one_tick")

    lab_page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()"
    )
    time.sleep(2)
    lab_page.wait_for_function(KERNEL_IDLE, timeout=90_000)
    lab_page.wait_for_function(
        "() => { const e = document.querySelector('[data-agentlab=society]');"
        " return !!(e && e.dataset.disconnected); }",
        timeout=20_000,
    )
    gone = lab_page.evaluate(PANEL)
    assert gone["saved"] == "1" and gone["label"] == "disconnected", gone
    assert sorted(gone["disabled"]) == ["pause", "resume", "start", "stop"], gone
    assert gone["status"] == "disconnected" and "kernel restarted" in gone["note"], gone
    assert gone["state"].startswith("last heard from the kernel: running"), gone
    assert gone["progress"] == "", gone  # (no "tick 2 in progress" of a run that is gone)
    icons = lab_page.evaluate(
        "() => Array.from(document.querySelectorAll('.al-view.jupyter-widgets-disconnected'))"
        ".filter((e) => getComputedStyle(e, '::before').display !== 'none').length"
    )
    assert icons == 0  # agentlab's label, not ipywidgets' broken-link icon
    screenshot(lab_page, "restart_1_disconnected")

    # a press that still reaches the old comm (the button forced on) says nothing answered;
    # its send threw "Cannot send" before the no-answer timer started, and showed nothing
    lab_page.evaluate(
        "() => { const b = document.querySelector("
        "'[data-agentlab=society] button[data-action=stop]'); b.disabled = false; b.click(); }"
    )
    lab_page.wait_for_function(
        "() => document.querySelector('[data-agentlab=society]').dataset.noAnswer === 'stop'",
        timeout=6_000,
    )
    pressed = lab_page.evaluate(PANEL)
    assert "No answer from the kernel to stop" in pressed["answer"], pressed
    assert not [e for e in errors if "Cannot send" in e], errors
    screenshot(lab_page, "restart_2_pressed")
