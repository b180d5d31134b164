"""Re-running the quickstart's live cell while its society runs (marker ``browser``).

The quickstart's own cells (from ``notebooks/01_quickstart.ipynb``, with small
parameters) run in JupyterLab; while tick 1 is in progress the live cell is run again, as
an impatient researcher would. The second run must be refused with an error that says
what holds the run, and the first run must go on to ``done`` with every tick intact (on
the old notebook the cell's ``rmtree`` deleted the running run first).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from agentlab.store.atomic import read_json
from tests.browser.conftest import REPO, Lab, open_notebook, screenshot, wait_for

pytestmark = pytest.mark.browser

PARAMS = "agents = 4\nticks = 3\nclock = 'real'\nseed = 0\nllm = 'sim/vllm-3b'"


def _quickstart_cells() -> list[str]:
    nb = json.loads((REPO / "notebooks" / "01_quickstart.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    # parameters, imports, the live cell (creates the society and shows live(...))
    assert "live(" in code[2], code[2]
    return [PARAMS, code[1], code[2]]


def _status(run: Path) -> str:  # (run.json is written atomically)
    return str((read_json(run / "run.json", default=None) or {}).get("status", "missing"))


def test_rerunning_the_live_cell_while_it_runs_leaves_the_run_intact(
    jupyter_lab: Lab, lab_page: Any
) -> None:
    open_notebook(lab_page, jupyter_lab, "rerun.ipynb", _quickstart_cells())
    wait_for(lab_page, "society", "d.status === 'running'", timeout=120)
    run = jupyter_lab.root / "runs" / "quickstart"
    assert _status(run) == "running"
    # run the live cell again while tick 1 is in progress
    lab_page.evaluate(
        """() => {
          const nb = window.jupyterapp.shell.currentWidget.content;
          nb.activeCellIndex = 2;
          return window.jupyterapp.commands.execute('notebook:run-cell');
        }"""
    )
    lab_page.wait_for_function(
        "() => document.body.innerText.includes('RunLockedError')", timeout=60_000
    )
    err = lab_page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    text = err.last.inner_text()
    screenshot(lab_page, "rerun_refused")
    # the message names what holds the run and what to do
    assert "being written by a running Society object in this process" in text, text
    assert "stop() it" in text, text
    # the first society goes on to the end, untouched
    deadline = time.monotonic() + 180
    while _status(run) not in ("done", "failed", "missing") and time.monotonic() < deadline:
        time.sleep(1.0)
    assert _status(run) == "done", _status(run)
    from agentlab.store.summary import summarize_run

    s = summarize_run(run)
    assert s.ticks == 3 and s.steps == 3 * 4, s
    assert s.errors.total == 0, s.errors
    tl = [json.loads(line) for p in sorted((run / "replay" / "timeline").glob("*.jsonl"))
          for line in p.read_text().splitlines() if line.strip()]  # fmt: skip
    assert [r["tick"] for r in tl] == [1, 2, 3] and all(r["steps"] == 4 for r in tl), tl
