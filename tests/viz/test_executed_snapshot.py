"""A notebook executed by nbclient (papermill, nbconvert, nbmake) keeps a live view's and a
progress bar's final snapshot, and the plain ``jupyter nbconvert --to html`` CLI exports
those snapshots.

The run of ``live(soc, ticks)`` ends while a *later* cell runs (``await dash.task``): its
last snapshot must reach the first cell's output. The exported HTML must show it without
the widget manager nbconvert loads from a CDN (blank offline).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from agentlab.sweep.widget_state import SNAPSHOT_FIRST

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _society_text(html: str) -> str:
    start = html.index('data-agentlab-static="society"')
    return re.sub(r"<[^>]+>", " ", html[start : start + 3000])


def _live_society_cell(tmp_path: Path) -> Any:
    """A cell that shows ``live(soc, ticks=2)``: the run ends after the cell does."""
    return nbformat.v4.new_code_cell(
        "import agentlab\n"
        "from agentlab.runtime import Society\n"
        f"soc = Society.create({str(tmp_path / 'run')!r}, agents=4, env=['social_feed'],\n"
        "                     llm='sim/instant', clock='virtual', seed=1, progress=False)\n"
        "dash = agentlab.live(soc, ticks=2)\n"
        "dash"
    )


def _client(nb: Any, tmp_path: Path) -> NotebookClient:
    """nbclient (as papermill, nbconvert and nbmake run it) on a python3 kernel."""
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}  # fmt: skip
    return NotebookClient(nb, timeout=120, kernel_name="python3",
                          resources={"metadata": {"path": str(tmp_path)}})  # fmt: skip


def test_a_run_ending_in_a_later_cell_updates_the_snapshot_and_the_cli_exports_it(
    tmp_path: Path,
) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _live_society_cell(tmp_path),
        nbformat.v4.new_code_cell("await dash.task\nsoc.tick"),
        # live(exp): the experiment ends while a later cell awaits it, as the society does
        nbformat.v4.new_code_cell(
            "from agentlab.topology import Experiment\n"
            f"exp = Experiment(topologies=['star'], agents=3, runs=2, out={str(tmp_path / 'exp')!r},\n"
            "                 progress=False)\n"
            "dash2 = agentlab.live(exp)\n"
            "dash2"
        ),
        nbformat.v4.new_code_cell("res = await dash2.task\nres.runs_done"),
        # a progress bar (tqdm's notebook widget) keeps its last line as a snapshot
        nbformat.v4.new_code_cell(
            "import os\nos.environ['AGENTLAB_PROGRESS'] = '1'  # (off in some test setups)\n"
            f"bar = Society.create({str(tmp_path / 'bar')!r}, agents=3, llm='sim/instant',\n"
            "                     clock='virtual', seed=1)\n"
            "await bar.run(ticks=3)\n"
            "bar.close()"
        ),
    ]
    _client(nb, tmp_path).execute()
    assert nb.cells[1].outputs[-1]["data"]["text/plain"] == "2"
    shown = nb.cells[0].outputs[0]["data"]
    assert "application/vnd.jupyter.widget-view+json" in shown
    text = _society_text(shown["text/html"])
    assert "done" in text and "tick 2 committed" in text, text
    assert "press start" not in text, "the executed notebook kept the first snapshot"
    assert nb.cells[3].outputs[-1]["data"]["text/plain"] == "2"
    exp_html = nb.cells[2].outputs[0]["data"]["text/html"]
    start = exp_html.index('data-agentlab-static="experiment"')
    exp_text = re.sub(r"<[^>]+>", " ", exp_html[start : start + 3000])
    assert "done: 2 of 2 runs" in exp_text, exp_text  # (it kept its first frame: 0 runs)
    bar = nb.cells[4].outputs[0]["data"]
    assert "application/vnd.jupyter.widget-view+json" in bar  # live: tqdm's widget
    assert "100%" in bar["text/plain"] and "3/3" in bar["text/plain"], bar["text/plain"]
    assert "3/3" in bar["text/html"] and "tick=3" in bar["text/html"], bar["text/html"]

    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, path)
    assert nb.metadata["widgets"]  # nbclient saved the widget state: the CDN case
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "executed.html").read_text()
    assert "tick 2 committed" in _society_text(html)
    assert re.search(r'class="agentlab-static-progress"[^>]*>society: 100%[^<]*3/3', html)
    # the output's view is not drawn through the CDN's widget manager (only the state is kept)
    assert '<script type="application/vnd.jupyter.widget-view+json">' not in html


def test_a_run_the_view_did_not_start_reaches_the_executed_snapshot(tmp_path: Path) -> None:
    """``await soc.run(ticks=3)`` in the notebook's last cell, after the view's own run: the
    snapshot kept "done: tick 2 committed" (refreshed only when a run the view started
    ended), which the HTML export and ``agentlab paper`` showed while the widget state said
    tick 5. The run ends inside that cell and goes out as it, before its reply."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _live_society_cell(tmp_path),
        nbformat.v4.new_code_cell("await dash.task"),
        nbformat.v4.new_code_cell("await soc.run(ticks=3)\nsoc.tick"),
    ]
    _client(nb, tmp_path).execute()
    assert nb.cells[2].outputs[-1]["data"]["text/plain"] == "5"
    shown = nb.cells[0].outputs[0]["data"]
    text = _society_text(shown["text/html"])
    assert "done: tick 5 committed" in text, text
    assert "tick 5," in shown["text/plain"], shown["text/plain"]


def test_the_cli_config_is_the_server_extensions_priority() -> None:
    """``etc/jupyter/jupyter_nbconvert_config.json`` (installed by ``make setup``) holds the
    same priority the server extension gives JupyterLab's export."""
    shipped = json.loads(
        (ROOT / "jupyter-config" / "nbconvert" / "jupyter_nbconvert_config.json").read_text()
    )
    assert shipped == {"WidgetsDataTypeFilter": {"display_data_priority": SNAPSHOT_FIRST}}
    installed = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_nbconvert_config.json"
    assert json.loads(installed.read_text()) == shipped


def test_a_run_ending_between_two_cells_still_updates_the_snapshot(tmp_path: Path) -> None:
    """nbclient had finished the starting cell and not yet sent the next one when the run
    ended: the update went out as the finished cell, which nbclient no longer reads, and
    the executed notebook kept the first form. (It failed so under load; a pause between
    the cells, as here, failed it every time.) The update is sent again as the next cell."""
    import time

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _live_society_cell(tmp_path),
        nbformat.v4.new_code_cell("soc.tick"),  # the run is over before this cell starts
    ]
    client = _client(nb, tmp_path)
    with client.setup_kernel():
        client.execute_cell(nb.cells[0], 0)
        time.sleep(2.0)  # the run ends while no cell runs
        client.execute_cell(nb.cells[1], 1)
    assert nb.cells[1].outputs[-1]["data"]["text/plain"] == "2"
    text = _society_text(nb.cells[0].outputs[0]["data"]["text/html"])
    assert "done" in text and "tick 2 committed" in text, text
