"""A point that fails with an agentlab error names that error, not the traceback's note.

agentlab's short traceback ends with a note ("agentlab's own frames are hidden; ...") below
the exception line. ``Sweep.df()``'s ``error``, the sweep's ``run.json`` and ``agentlab
paper``'s took the error's last line, so a point that failed with, say, an unknown topology
read only "(agentlab's own frames are hidden; AGENTLAB_TRACEBACK=full shows them)".
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from agentlab.sweep import sweep
from agentlab.sweep.runner import error_line

BAD = "ConfigError: x=3 is not a valid x; use 1 or 2"


def _notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("x = 1")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [
        params,
        nbformat.v4.new_code_cell(
            "from agentlab.errors import ConfigError\n"
            "if x == 3:\n"
            "    raise ConfigError(f'x={x} is not a valid x; use 1 or 2')"
        ),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


def test_the_exception_line_is_taken_above_the_note() -> None:
    short = (
        "papermill.exceptions.PapermillExecutionError: \n---\nTraceback (most recent call last):\n"
        f"Cell In[2], line 3, in <module>\n{BAD}\n"
        "(agentlab's own frames are hidden; AGENTLAB_TRACEBACK=full shows them)\n\n"
    )
    assert error_line(short) == BAD
    assert error_line("Traceback ...\nValueError: boom\n") == "ValueError: boom"
    assert error_line("") is None and error_line(None) is None


@pytest.mark.slow
def test_a_failed_points_error_names_the_agentlab_error(tmp_path: Path) -> None:
    from agentlab.store import read_manifest

    out = tmp_path / "sw"
    s = sweep(_notebook(tmp_path / "nb.ipynb"), {"x": [1, 3]}, out=out, executor="local",
              max_parallel=2, progress=False)  # fmt: skip
    df = s.df().set_index("x")
    assert df.loc[1, "status"] == "ok"
    assert df.loc[3, "status"] == "failed" and df.loc[3, "error"] == BAD, df.loc[3, "error"]
    # the sweep's own record names it too (what `agentlab runs` and the run browser show)
    assert read_manifest(out)["error"].endswith(f"failed: {BAD}"), read_manifest(out)["error"]


@pytest.mark.slow
def test_a_failed_papers_run_json_names_the_agentlab_error(tmp_path: Path) -> None:
    from agentlab.errors import SweepError
    from agentlab.store import read_manifest
    from agentlab.sweep.paper import make_paper

    out = tmp_path / "paper"
    with pytest.raises(SweepError):
        make_paper(_notebook(tmp_path / "nb.ipynb"), out, {"x": 3})
    assert read_manifest(out)["error"] == f"failed: {BAD}", read_manifest(out)["error"]
