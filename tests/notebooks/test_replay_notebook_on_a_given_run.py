"""Notebook 05 pointed at another run (``run_dir``), as its first cell invites: the shipped
reference run, executed with papermill from a folder with no ``runs/`` in it."""

from __future__ import annotations

import json
from pathlib import Path

import papermill as pm
import pytest

import agentlab

pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "05_replay_analysis.ipynb"


def test_the_reference_run_is_analysed_and_calibrated_not_rerun(tmp_path: Path) -> None:
    # (agentlab.datasets reached after a plain import, as the notebook's intro writes it)
    ref = agentlab.datasets.path("reference_run")
    out = tmp_path / "out.ipynb"
    pm.execute_notebook(str(NOTEBOOK), str(out), parameters={"run_dir": str(ref)},
                        cwd=str(tmp_path), progress_bar=False, kernel_name="python3")  # fmt: skip
    cells = json.loads(out.read_text())["cells"]
    # a cell's stream outputs joined as written: the kernel's flush thread can split one
    # print() into two outputs ("note:" and " slots = ..."), which a "\n" join broke apart
    text = "\n".join(
        "".join("".join(o.get("text", "")) for o in c.get("outputs", [])
                if o.get("output_type") == "stream")
        for c in cells
    )  # fmt: skip
    assert "was recorded without finish_reason" in text  # (recorded before the column)
    # fitted and saved where the notebook writes, the folder made for it (it had failed
    # with FileNotFoundError: runs/fitted.toml); no re-run of a workflow it cannot know
    assert (tmp_path / "runs" / "fitted.toml").is_file()
    assert "note: slots = " in text and not (tmp_path / "runs" / "replay_demo_fitted").exists()
    assert (tmp_path / "runs" / "trace.otlp.json").is_file()
