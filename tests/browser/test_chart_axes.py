"""The IAT histogram's log axis is readable at any width (marker ``browser``).

Gaps spread over six decades (100 µs to 100 s) are written to a run log; the live IAT
widget is shown in JupyterLab at a 400 px and a 1,200 px wide window. Its x tick labels
(DOM text under the plot) must be decades with short labels, at least three, inside the
chart and with no two bounding boxes overlapping.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from tests.browser.conftest import Lab, open_notebook, screenshot, wait_for

pytestmark = pytest.mark.browser

LABELS = """() => [...document.querySelectorAll('[data-agentlab=iat] .al-xtick')].map((e) => {
  const r = e.getBoundingClientRect();
  return {text: e.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
})"""

CHART_BOX = """() => {
  const r = document.querySelector('[data-agentlab=iat] .uplot').getBoundingClientRect();
  return {left: r.left, right: r.right};
}"""


def _check(page: Any, width: int) -> list[str]:
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_timeout(1500)  # the chart follows its output's new width
    page.locator("[data-agentlab=iat]").scroll_into_view_if_needed()
    labels = page.evaluate(LABELS)
    box = page.evaluate(CHART_BOX)
    screenshot(page, f"iat_axis_{width}px")
    assert box["left"] >= 0 and box["right"] <= width, (width, box)  # the chart fits
    texts = [lab["text"] for lab in labels]
    assert len(labels) >= 3, (width, texts)
    for lab in labels:
        assert re.fullmatch(r"(1|10|100|1000) (µs|ms|s)", lab["text"]), (width, lab)
        assert box["left"] - 1 <= lab["left"] and lab["right"] <= box["right"] + 1, (width, lab)
    ordered = sorted(labels, key=lambda b: b["left"])
    for a, b in itertools.pairwise(ordered):
        overlap = a["right"] > b["left"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]
        assert not overlap, (width, a, b)
    return texts


def test_iat_axis_labels_do_not_overlap_at_400_and_1200_px(jupyter_lab: Lab, lab_page: Any) -> None:
    run = jupyter_lab.root / "runs" / "axes"
    run.mkdir(parents=True)
    cells = [
        f"RUN = {str(run)!r}",
        "import numpy as np\n"
        "from agentlab.store import get_replay_sink\n"
        "from agentlab.viz import show\n"
        "rng = np.random.default_rng(0)\n"
        "gaps = 10 ** rng.uniform(-4, 2, 400)  # 100 µs .. 100 s\n"
        "starts = np.cumsum(gaps)\n"
        "sink = get_replay_sink(RUN)\n"
        "sink.extend('llm_calls', [{'start': float(s), 'topology': 'star'} for s in starts])\n"
        "sink.flush()\n"
        "dash = show(RUN, panels=['iat'], follow=False)\n"
        "dash",
    ]
    open_notebook(lab_page, jupyter_lab, "axes.ipynb", cells)
    wait_for(lab_page, "iat", "Number(d.iats) >= 399", timeout=90)
    # the notebook gets the window's width, as a reader on a small screen would have it
    lab_page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
    wide = _check(lab_page, 1200)
    narrow = _check(lab_page, 400)
    assert {"1 ms", "1 s"} <= set(wide), wide  # every decade fits at 1,200 px
    assert len(narrow) <= len(wide)
