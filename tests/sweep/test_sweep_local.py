"""End-to-end sweeps with real papermill kernels (each kernel start costs seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlab.sweep import Sweep, sweep

pytestmark = pytest.mark.slow


def test_sweep_failure_timeout_and_resume(tiny_notebook: Path, tmp_path: Path) -> None:
    out = tmp_path / "sw"
    grid = [
        {"x": 1},
        {"x": 2},
        {"x": 3, "fail": True},
        {"x": 4, "sleep": 60.0},
    ]
    s = sweep(
        tiny_notebook, grid, out=out, executor="local", max_parallel=2, timeout=25, progress=False
    )
    df = s.df().set_index("x")
    assert df.loc[1, "status"] == "ok" and df.loc[1, "y"] == 2
    assert df.loc[2, "status"] == "ok" and df.loc[2, "y"] == 4
    # the failing point is reported with its error and keeps its partial notebook/results
    assert df.loc[3, "status"] == "failed"
    assert "boom at x=3" in df.loc[3, "error"]
    assert df.loc[3, "y"] == 6  # recorded before the failing cell
    pid3 = df.loc[3, "point_id"]
    assert (out / pid3 / "notebook.ipynb").exists()
    # the timed-out point was killed, only that one
    assert df.loc[4, "status"] == "timeout"
    assert "timeout" in df.loc[4, "error"]
    meta = json.loads((out / "sweep.json").read_text())
    assert len(meta["points"]) == 4 and meta["schema_version"] == 1

    # resume: finished points are skipped (their status files are untouched)
    ok_status = (out / df.loc[1, "point_id"] / "status.json").read_text()
    grid[2] = {"x": 3}  # a new point replaces the failing one
    grid[3] = {"x": 4}  # same params? no: differs from the timed-out one -> new point id
    s2 = sweep(tiny_notebook, grid, out=out, executor="local", max_parallel=2, progress=False)
    assert (out / df.loc[1, "point_id"] / "status.json").read_text() == ok_status
    df2 = s2.df()
    assert list(df2["status"]) == ["ok", "ok", "ok", "ok"]
    assert sorted(df2["y"]) == [2, 4, 6, 8]
    assert isinstance(Sweep(out).df(), type(df2))


def test_resume_reruns_failed_point(tiny_notebook: Path, tmp_path: Path) -> None:
    out = tmp_path / "sw2"
    grid = {"x": [5], "fail": [True]}
    s = sweep(tiny_notebook, grid, out=out, executor="local", progress=False)
    first = s.df().iloc[0]
    assert first["status"] == "failed"
    status_path = out / first["point_id"] / "status.json"
    t0 = json.loads(status_path.read_text())["ended"]
    s = sweep(tiny_notebook, grid, out=out, executor="local", progress=False)
    assert json.loads(status_path.read_text())["ended"] > t0  # ran again


def test_sweep_and_paper_write_manifests(tiny_notebook: Path, tmp_path: Path) -> None:
    from agentlab.store import read_manifest
    from agentlab.sweep.paper import make_paper

    out = tmp_path / "m"
    sweep(tiny_notebook, {"x": [7]}, out=out, executor="local", progress=False)
    man = read_manifest(out)
    assert man["kind"] == "sweep" and man["status"] == "done"
    assert man["config"]["grid"] == [{"x": 7}]
    assert man["config"]["notebook_sha256"]
    assert man["python"].startswith("3.") and man["dependencies"]["pandas"]
    assert man["agentlab_version"] and man["started"] and man["ended"]

    html = make_paper(tiny_notebook, tmp_path / "paper", {"x": 3})
    assert html.exists() and "tiny sweep notebook" in html.read_text()
    pman = read_manifest(tmp_path / "paper")
    assert pman["kind"] == "paper" and pman["status"] == "done"
    assert pman["params"] == {"x": 3, "fail": False, "sleep": 0.0}  # defaults + given
    assert (tmp_path / "paper" / "tiny.ipynb").exists()


def test_paper_no_execute_exports_the_notebook_as_saved(tmp_path: Path) -> None:
    """``agentlab paper --no-execute``: the outputs a saved notebook holds, nothing run; a
    widget output's snapshot shows instead of its view (``tests/browser/test_saved_reopen``
    opens one saved from JupyterLab offline)."""
    import argparse

    from agentlab.errors import ConfigError
    from agentlab.sweep.paper import export_saved, main

    view = {"model_id": "abc", "version_major": 2, "version_minor": 0}
    nb = {
        "cells": [{"cell_type": "code", "execution_count": 1, "id": "c0", "metadata": {},
                   "source": "dash", "outputs": [{"output_type": "display_data", "metadata": {},
                   "data": {"application/vnd.jupyter.widget-view+json": view,
                            "text/html": "<div class='agentlab-static'>tick 7 committed</div>",
                            "text/plain": "SocietyView"}}]}],
        "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {
            "state": {"abc": {"model_name": "VBoxModel", "state": {}}},
            "version_major": 2, "version_minor": 0}}},
        "nbformat": 4, "nbformat_minor": 5,
    }  # fmt: skip
    path = tmp_path / "saved.ipynb"
    path.write_text(json.dumps(nb))
    html = export_saved(path, tmp_path / "out")
    assert html == tmp_path / "out" / "saved.html"
    text = html.read_text()
    assert "tick 7 committed" in text and "widget-view+json" not in text
    args = argparse.Namespace(notebook=str(path), out=str(tmp_path / "o2"), params=None,
                              param=["x=1"], timeout=None, no_execute=True)  # fmt: skip
    with pytest.raises(ConfigError, match="no -p"):
        main(args)
    with pytest.raises(ConfigError, match="does not exist"):
        export_saved(tmp_path / "missing.ipynb", tmp_path / "o3")


def test_an_interrupted_sweep_returns_its_finished_points(
    tiny_notebook: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Ctrl-C / the stop button ended in a KeyboardInterrupt traceback out of papermill's
    # wait; now the running point is killed and the sweep comes back, marked stopped
    import signal
    import threading
    import time

    from agentlab.store.atomic import read_json

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not Python's default handler here")
    out = tmp_path / "sw-int"
    grid = [{"x": 1}, {"x": 2, "sleep": 60.0}]
    sent: list[float] = []

    def interrupt_once_the_first_point_is_ok() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any((read_json(p, default=None) or {}).get("status") == "ok"
                   for p in out.glob("*/status.json")):  # fmt: skip
                time.sleep(1.0)  # the slow point's kernel is well into its sleep
                sent.append(time.monotonic())
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
                return
            time.sleep(0.1)

    threading.Thread(target=interrupt_once_the_first_point_is_ok, daemon=True).start()
    s = sweep(tiny_notebook, grid, out=out, executor="local", max_parallel=2, progress=False)
    assert sent and time.monotonic() - sent[0] < 15
    assert s.status == "stopped"
    df = s.df().set_index("x")
    assert df.loc[1, "status"] == "ok" and df.loc[1, "y"] == 2
    assert df.loc[2, "status"] == "killed"
    assert df.loc[2, "error"] == "stopped: the sweep was interrupted (Ctrl-C or the stop button)"
    assert "sweep stopped: 1 of 2 points ok" in capsys.readouterr().err


def test_ctrl_c_of_agentlab_sweep_says_how_to_go_on(tiny_notebook: Path, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "sw-cli"
    cli = Path(sys.executable).with_name("agentlab")  # the installed console script
    cmd = [str(cli), "sweep", str(tiny_notebook), "-p", "sleep=60.0", "--out", str(out),
           "--executor", "local"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    notebook: Path | None = None
    deadline = time.monotonic() + 120
    while notebook is None:  # the point's kernel has started executing
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        notebook = next(out.glob("*/notebook.ipynb"), None)
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)  # Ctrl-C in the terminal (the point has its own session)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "sweep stopped: 0 of 1 points ok" in stderr
    assert "interrupted: the same command with --resume runs the points" in stderr
    assert "0/1 points ok" in stdout
    status = json.loads(next(out.glob("*/status.json")).read_text())
    assert status["status"] == "killed" and status["error"].startswith("stopped:")


def test_a_notebook_that_names_no_kernel_runs(tmp_path: Path) -> None:
    """A notebook written by a script (``nbformat.v4.new_notebook()``, no ``kernelspec`` or
    ``language_info``) failed every point with papermill's "No kernel name found in
    notebook and no override provided" (and, given parameters, "No language found"); it
    runs on the environment's ``python3`` kernel."""
    import nbformat

    from tests.sweep.conftest import make_notebook

    nb_path = make_notebook(tmp_path / "bare.ipynb")
    nb = nbformat.read(nb_path, as_version=4)
    nb.metadata = {}
    nbformat.write(nb, nb_path)
    s = sweep(nb_path, {"x": [2, 3]}, out=tmp_path / "bare", executor="local", progress=False)
    df = s.df()
    assert list(df["status"]) == ["ok", "ok"] and sorted(df["y"]) == [4, 6], df


def test_a_failed_paper_keeps_the_notebook_as_far_as_it_ran(
    tiny_notebook: Path, tmp_path: Path
) -> None:
    """``agentlab paper`` of a notebook that raises wrote no HTML (only the error): the
    executed notebook, papermill's banner on top and the traceback at the failing cell,
    is now exported beside it and named in the error; ``run.json`` says ``failed``."""
    from agentlab.errors import SweepError
    from agentlab.store import read_manifest
    from agentlab.sweep.paper import make_paper

    out = tmp_path / "paper"
    with pytest.raises(SweepError, match=r"the notebook as far as it ran: .*tiny\.html"):
        make_paper(tiny_notebook, out, {"x": 5, "fail": True})
    page = (out / "tiny.html").read_text()
    assert "An Exception was encountered" in page and "boom at x=5" in page
    assert read_manifest(out)["status"] == "failed"
