"""The live society view and its exported snapshot show the same numbers (marker ``browser``).

A real-clock society on the simulated vLLM server (ticks of different lengths) runs in
JupyterLab's live view; the notebook is saved from the UI. Every tile the live panel and
the saved ``text/html`` snapshot (what ``jupyter nbconvert --to html`` shows) both carry
must read the same number (the live tiles write large ones short: "26.7k" for 26,745).
The live "LLM calls/s (clock)" tile showed the last tick's rate, the
snapshot's the whole run's: 4.70 live against 4.27 in the export of the quickstart.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from typing import Any

import pytest

from tests.browser.conftest import Lab, open_notebook, screenshot, wait_for

pytestmark = pytest.mark.browser

LIVE_TILES = """() => Object.fromEntries(
  [...document.querySelectorAll('[data-agentlab=society] .al-tile')].map(
    (t) => [t.querySelector('.al-label').textContent, t.querySelector('.al-value').textContent]))"""


def _snapshot_tiles(html: str) -> dict[str, str]:
    """``{label: value}`` of the snapshot's stat tiles (a value cell, then its label)."""
    cells = [c.strip() for c in re.sub(r"<[^>]+>", "|", html).split("|") if c.strip()]
    return {label: value for value, label in itertools.pairwise(cells)}


def _number(text: str) -> float:
    """A tile's value: "26.7k" -> 26,700, "26,745" -> 26,745, "4.27" -> 4.27."""
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}.get(text[-1:], 1.0)
    return float(text.rstrip("kMG").replace(",", "")) * scale


def test_live_tiles_and_the_saved_snapshot_agree(lab: Lab, lab_page: Any) -> None:
    run = str(lab.root / "runs" / "agree")
    cells = [
        "from agentlab.runtime import Society\n"
        "from agentlab.viz import live\n"
        f"soc = Society.create({run!r}, agents=4, env=['social_feed'], llm='sim/vllm-3b',\n"
        "                     seed=0, clock='real', progress=False)\n"
        "dash = live(soc, ticks=3, group_by=None)\n"
        "dash",
        "await dash.task\ndash.stop()\nprint('final tick', soc.tick)",
    ]
    open_notebook(lab_page, lab, "agree.ipynb", cells)
    wait_for(lab_page, "society", "d.status === 'done'", timeout=240)
    lab_page.wait_for_function(
        "() => document.body.innerText.includes('final tick 3')", timeout=60_000
    )
    live = lab_page.evaluate(LIVE_TILES)
    screenshot(lab_page, "live_vs_export")
    lab_page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    path = lab.root / "agree.ipynb"
    deadline = time.monotonic() + 20
    while "final tick 3" not in path.read_text() and time.monotonic() < deadline:
        time.sleep(0.3)
    nb = json.loads(path.read_text())
    (out,) = [
        o
        for o in nb["cells"][0]["outputs"]
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    static = _snapshot_tiles("".join(out["data"]["text/html"]))
    shared = sorted(set(live) & set(static))
    # (the rate, the tick, the agents and the step errors at least)
    assert {"LLM calls/s (clock)", "tick", "agents", "step errors"} <= set(shared), (live, static)
    differ = {
        k: (live[k], static[k])
        for k in shared
        if not math.isclose(_number(live[k]), _number(static[k]), rel_tol=5e-3, abs_tol=5e-3)
    }
    assert not differ, (differ, live, static)
