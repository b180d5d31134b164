"""A sweep point whose kernel dies before its first reply is started again, not failed.

Kernels started at the same moment by separate processes can pick the same ports and one of
them dies on startup ("Kernel died before replying to kernel_info", seen in CI with three
points at once). The kernel here is a real ipykernel behind a kernelspec whose first start
exits at once; the second start runs the notebook.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentlab.sweep import _worker

pytestmark = pytest.mark.slow

LAUNCHER = """\
import os, sys
marker, deaths = sys.argv[1], int(sys.argv[2])
n = int(open(marker).read()) if os.path.exists(marker) else 0
if n < deaths:  # die before answering kernel_info, as a kernel that lost its port race does
    open(marker, "w").write(str(n + 1))
    sys.exit(1)
from ipykernel import kernelapp
kernelapp.launch_new_instance(argv=sys.argv[3:])
"""


def _flaky_kernel(tmp_path: Path, deaths: int) -> tuple[Path, Path]:
    """A kernelspec ``flaky`` (under its own JUPYTER_PATH) whose first ``deaths`` starts die."""
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER)
    marker = tmp_path / "starts"
    spec_dir = tmp_path / "jupyter" / "kernels" / "flaky"
    spec_dir.mkdir(parents=True)
    argv = [sys.executable, str(launcher), str(marker), str(deaths), "-f", "{connection_file}"]
    spec = {"argv": argv, "display_name": "flaky", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return tmp_path / "jupyter", marker


def _run(tmp_path: Path, tiny_notebook: Path, deaths: int, monkeypatch: pytest.MonkeyPatch) -> int:
    jupyter_path, _ = _flaky_kernel(tmp_path, deaths)
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_path))
    for key in ("AGENTLAB_RUN_DIR",):
        monkeypatch.delenv(key, raising=False)
    spec = {
        "notebook": str(tiny_notebook),
        "out_dir": str(tmp_path / "point"),
        "parameters": {"x": 21},
        "kernel_name": "flaky",
    }
    monkeypatch.setattr(_worker, "KERNEL_START_TRIES", 3)
    return _worker.execute(spec)


def test_a_kernel_that_dies_on_start_is_started_again(
    tmp_path: Path, tiny_notebook: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run(tmp_path, tiny_notebook, 1, monkeypatch) == 0
    assert (tmp_path / "starts").read_text() == "1"  # it really died once
    values = [json.loads(line) for line in (tmp_path / "point" / "results.jsonl").open()]
    assert {"y": 42}.items() <= {v["name"]: v["value"] for v in values}.items()
    assert not (tmp_path / "point" / "error.txt").exists()


def test_a_kernel_that_never_starts_fails_the_point_with_the_reason(
    tmp_path: Path, tiny_notebook: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run(tmp_path, tiny_notebook, 99, monkeypatch) == 1
    assert (tmp_path / "starts").read_text() == "3"  # three tries, then the point fails
    assert "Kernel died before replying" in (tmp_path / "point" / "error.txt").read_text()
