"""The IAT histogram's log axis is readable at any width (marker ``browser``).

Gaps spread over six decades (100 µs to 100 s) are written to a run log; the live IAT
widget is shown in JupyterLab at a 400 px and a 1,200 px wide window. Its x tick labels
(DOM text under the plot) must be decades with short labels, at least three, inside the
chart and with no two bounding boxes overlapping.
"""

from __future__ import annotations

import base64
import itertools
import re
from pathlib import Path
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


PNG_PROBE = """async (b64) => {
  const img = new Image();
  img.src = 'data:image/png;base64,' + b64;
  await img.decode();
  const c = document.createElement('canvas');
  c.width = img.width; c.height = img.height;
  const ctx = c.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const src = document.querySelector('[data-agentlab=iat] .uplot canvas');
  const box = src.getBoundingClientRect(), k = img.width / box.width;
  const head = Math.round(24 * k);  // the title band above the canvas (chartPng)
  const bg = [...ctx.getImageData(0, 0, 1, 1).data];
  // pixels far from the background and on the far side of mid-grey from it (light ink
  // on a dark page, dark ink on a light one): readable text, not #555 on #111
  const dark = bg[0] + bg[1] + bg[2] < 384;
  const ink = (x0, y0, w, hh) => {
    const d = ctx.getImageData(Math.round(x0), Math.round(y0), Math.round(w), Math.round(hh)).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) {
      const far = Math.abs(d[i] - bg[0]) + Math.abs(d[i + 1] - bg[1]) + Math.abs(d[i + 2] - bg[2]) > 150;
      const sum = d[i] + d[i + 1] + d[i + 2];
      if (far && (dark ? sum > 480 : sum < 300)) n++;
    }
    return n;
  };
  // left of the first decade label's centre (its tick mark sits at the centre)
  const r = document.querySelector('[data-agentlab=iat] .al-xtick').getBoundingClientRect();
  const label = ink((r.left - box.left) * k, head + (r.top - box.top) * k, (r.width / 2 - 4) * k,
                    r.height * k);
  // the y axis's values, left of the plot area (drawn on the canvas by uPlot)
  const over = document.querySelector('[data-agentlab=iat] .u-over').getBoundingClientRect();
  const axis = ink(0, head + (over.top - box.top) * k, (over.left - box.left - 4) * k,
                   over.height * k);
  const title = ink(0, 0, img.width, head);
  const legend = ink(0, head + src.height, img.width, img.height - head - src.height);
  return {bg, label_ink: label, axis_ink: axis, title_ink: title, legend_ink: legend,
          height: img.height, canvas: src.height};
}"""


def _png(page: Any) -> dict[str, Any]:
    """What the IAT chart's PNG button saves, looked at pixel by pixel in the page."""
    with page.expect_download() as dl:
        page.locator("[data-agentlab=iat] button.al-export").first.click()
    data = base64.b64encode(Path(dl.value.path()).read_bytes()).decode()
    return dict(page.evaluate(PNG_PROBE, data))


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
    # the PNG button: an opaque background and the decade labels (DOM text, not on the
    # canvas: its PNG had none), in the light theme and after a switch to the dark one
    _check(lab_page, 1200)
    light = _png(lab_page)
    lab_page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme', "
        "{theme: 'JupyterLab Dark'})"
    )
    lab_page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
    lab_page.wait_for_timeout(1500)
    screenshot(lab_page, "iat_axis_dark")
    # redrawn in the new theme with every decade label still there
    assert [lab["text"] for lab in lab_page.evaluate(LABELS)] == wide
    dark = _png(lab_page)
    assert light["bg"][3] == 255 and dark["bg"][3] == 255, (light, dark)
    assert sum(light["bg"][:3]) > 600 and sum(dark["bg"][:3]) < 200, (light, dark)
    for got in (light, dark):  # ink of the labels, contrasting with the background
        assert got["label_ink"] >= 20, got
        # the canvas's own axis text (the y values) follows the theme: dark theme, light ink
        assert got["axis_ink"] >= 20, got
        # the title above and the legend (its series' names) below the canvas
        assert got["title_ink"] >= 20 and got["legend_ink"] >= 10, got
    lab_page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme', "
        "{theme: 'JupyterLab Light'})"
    )


def test_live_and_static_charts_write_the_same_short_tick_labels(lab_page: Any) -> None:
    """The live charts' y axes (``fmtTick`` in widgets/_common.js, run in the browser) and
    the saved snapshot's (``fmt_tick``) label a tick alike; the live axis's ``fmt(v, 0)``
    wrote the ticks 1M, 1.5M, 2M of a tokens-per-tick chart as "1M, 2M, 2M"."""
    from agentlab.viz._base import widgets_dir
    from agentlab.viz._static import fmt_tick

    values = [0, 0.5, 2.25, 7_500, 10_000, 12_500, 250_000, 999_999, 1_000_000, 1_500_000,
              1_250_000, 2_500_000_000, -15_000]  # fmt: skip
    common = (widgets_dir() / "_common.js").read_text()  # prepended to every widget module
    got = lab_page.evaluate(
        "([src, vs]) => vs.map(new Function(src + '\\nreturn fmtTick;')())", [common, values]
    )
    assert got == [fmt_tick(v) for v in values]
    assert got[8:10] == ["1M", "1.5M"]
