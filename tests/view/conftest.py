"""Run folders for the browser's tests, made once per test session with the real drivers.

- ``mixed_folder``: a society run with LLM faults (step errors, LLM failures) and its
  prompts and replies recorded (``AGENTLAB_LLM_IO=1``), in a folder whose name holds
  ``<``, ``'`` and a space; a small topology experiment; a sweep (2 values × 2 seeds);
  a paper whose notebook writes a society run, a table and a figure.
- ``big_experiment``: a 600-run topology experiment (3 topologies × 200 runs, virtual
  clock, ``sim/vllm-3b``, 3 agents); its generation time is printed.
- ``folder_300``: 300 society runs (one real run copied, each with its own ``params`` in
  ``run.json``: ``agents`` 1..5, ``topology`` a/b/c, ``seed``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import shutil
import time
from pathlib import Path

import pytest

SOCIETY = "my run <b>'s"


def write_notebook(path: Path, cells: list[str], params: int = 0) -> None:
    """A notebook whose cell ``params`` is tagged ``parameters``."""
    nb = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": f"c{i}",
             "metadata": {"tags": ["parameters"]} if i == params else {}, "outputs": [],
             "source": src}
            for i, src in enumerate(cells)
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                    "name": "python3"}, "language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip
    path.write_text(json.dumps(nb, indent=1))


def make_society(out: Path, *, ticks: int = 3, seed: int = 0) -> Path:
    """A 4-agent social-feed society whose LLM answers 30 % malformed (no retries), with
    its prompts and replies recorded."""
    from agentlab.llm import LLMClient
    from agentlab.runtime import Society

    llm = LLMClient("sim/instant", seed=3, max_retries=0, sim_p_malformed=0.3)
    old = os.environ.get("AGENTLAB_LLM_IO")
    os.environ["AGENTLAB_LLM_IO"] = "1"
    try:
        soc = Society.create(out, agents=4, env=["social_feed"], llm=llm, seed=seed,
                             progress=False)  # fmt: skip
        soc.run_sync(ticks)
        soc.close()
    finally:
        if old is None:
            os.environ.pop("AGENTLAB_LLM_IO", None)
        else:
            os.environ["AGENTLAB_LLM_IO"] = old
    return out


def make_experiment(out: Path, runs: int, topologies: list[str]) -> float:
    """A topology experiment under the virtual clock; returns the seconds it took."""
    from agentlab.llm import LLMClient
    from agentlab.topology import Experiment

    t0 = time.monotonic()
    exp = Experiment(topologies=topologies, agents=3, runs=runs, llm=LLMClient("sim/vllm-3b"),
                     seed=0, clock="virtual", out=out, progress=False)  # fmt: skip
    # a thread of its own: a caller (Playwright's sync API) may hold a running loop
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, exp.run()).result()
    return time.monotonic() - t0


def build_mixed(base: Path) -> Path:
    """The ``mixed_folder`` runs under ``base/runs``."""
    from agentlab.sweep import sweep
    from agentlab.sweep.paper import make_paper

    root = base / "runs"
    make_society(root / SOCIETY)
    make_experiment(root / "experiment", 2, ["star", "sequential"])
    nb = base / "tiny.ipynb"
    write_notebook(nb, ["x = 1\nseed = 0", "from agentlab.sweep import record\n"
                        "record('twice', 2 * x + 0.1 * seed)\nrecord('label', 'x')"])  # fmt: skip
    sweep(nb, {"x": [1, 2], "seed": [0, 1]}, out=root / "sweep", executor="local", progress=False)
    paper_nb = base / "paper.ipynb"
    write_notebook(paper_nb, [
        "agents = 2",
        "import pandas as pd\n"
        "import plotly.graph_objects as go\n"
        "from agentlab.runtime import Society\n"
        "from agentlab.sweep import current_output_dir, record, record_figure, record_table\n"
        "soc = Society.create(current_output_dir() / 'society', agents=agents, llm='sim/instant',"
        " seed=0, progress=False)\n"
        "soc.run_sync(2)\nsoc.close()\n"
        "record('calls', 4)\n"
        "record_table('table1', pd.DataFrame({'topology': ['star'], 'calls': [4]}))\n"
        "record_figure('fig1', go.Figure(go.Bar(x=[1, 2], y=[3, 4])))",
    ])  # fmt: skip
    make_paper(paper_nb, root / "paper", {"agents": 2})
    return root


def build_300(base: Path) -> Path:
    """300 society runs under ``base/runs`` (see the module docstring)."""
    seed_run = make_society(base / "seed-run", ticks=1)
    (seed_run / "WRITER.lock").unlink(missing_ok=True)
    root = base / "runs"
    root.mkdir()
    for i in range(300):
        d = root / f"run-{i:03d}"
        shutil.copytree(seed_run, d)
        m = json.loads((d / "run.json").read_text())
        m["params"] = {"agents": 1 + i % 5, "topology": "abc"[i % 3], "seed": i}
        m["status"] = "done"
        m["created"] = f"2026-11-{1 + i % 28:02d}T10:00:00+00:00"
        (d / "run.json").write_text(json.dumps(m))
    return root


@pytest.fixture(scope="session")
def mixed_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_mixed(tmp_path_factory.mktemp("view"))


@pytest.fixture(scope="session")
def big_experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("big") / "runs"
    took = make_experiment(root / "topology600", 200, ["star", "sequential", "full_mesh"])
    print(f"\n600-run topology experiment generated in {took:.0f} s")
    return root


@pytest.fixture(scope="session")
def folder_300(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_300(tmp_path_factory.mktemp("three_hundred"))
