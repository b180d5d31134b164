"""A tiny parameterised notebook for sweep tests (no heavy imports: kernels start fast)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest


def make_notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("x = 1\nfail = False\nsleep = 0.0")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [
        nbformat.v4.new_markdown_cell("# tiny sweep notebook"),
        params,
        nbformat.v4.new_code_cell(
            "import time\nfrom agentlab.sweep import record\n"
            "record('y', x * 2)\nrecord('label', f'x={x}')"
        ),
        nbformat.v4.new_code_cell("if fail:\n    raise ValueError(f'boom at x={x}')"),
        nbformat.v4.new_code_cell("time.sleep(sleep)\nrecord('slept', sleep)"),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


@pytest.fixture()
def tiny_notebook(tmp_path: Path) -> Path:
    return make_notebook(tmp_path / "tiny.ipynb")
