"""Results that travel: an executed notebook and its paper show every widget's final state
with no kernel and no network (marker ``browser``).

One notebook with every widget (a live society dashboard, human input, an experiment
dashboard, a plotly figure) is executed once by ``agentlab paper``. Then:

- the paper HTML is opened from ``file://`` with every request that leaves the machine
  aborted and counted;
- the executed notebook is opened in a JupyterLab that has no kernel to start.

A JupyterLab with no kernel never activates the widget manager, so the ``text/html``
snapshot shows whatever the notebook holds; a notebook saved from the UI and reopened with
a *fresh* kernel is the other case (``test_saved_reopen.py``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import REPO, SHOTS, Offline, start_lab, write_notebook

pytestmark = pytest.mark.browser

CELLS = [
    "RUN = 'runs'",
    "import asyncio\n"
    "from agentlab.runtime import Society\n"
    "from agentlab.viz import live\n"
    "soc = Society.create(RUN + '/soc', agents=6, llm='sim/instant', seed=0, progress=False)\n"
    "dash = live(soc, ticks=3)\n"
    "dash",
    "stats = await dash.task\n"
    "dash.stop()  # the displayed snapshot now holds the final state\n"
    "print('final tick', soc.tick)",
    "from agentlab.store.human import answer_request, post_request\n"
    "from agentlab.viz import HumanInput\n"
    "post_request(RUN + '/soc', 'Adopt the policy?', {'enum': ['yes', 'no']}, agent_id='alice',\n"
    "             request_id='q1')\n"
    "post_request(RUN + '/soc', 'Raise taxes?', {'enum': ['yes', 'no']}, agent_id='bob',\n"
    "             request_id='q2')\n"
    "answer_request(RUN + '/soc', 'q2', 'no')\n"
    "HumanInput(RUN + '/soc', follow=False)",
    "from agentlab.topology import Experiment\n"
    "from agentlab.viz import show\n"
    "exp = Experiment(topologies=['star'], agents=3, runs=2, llm='sim/instant', seed=0,\n"
    "                 clock='virtual', out=RUN + '/exp', progress=False)\n"
    "res = await exp.run()\n"
    "show(RUN + '/exp', follow=False)",
    "from agentlab.analysis import iat_df, iat_histogram_figure\n"
    "iat_histogram_figure(iat_df(res.calls_df()))",
]


@dataclass
class Paper:
    out: Path
    html: Path
    notebook: Path
    tick: int
    calls: dict[str, int] = field(default_factory=dict)


@pytest.fixture(scope="module")
def paper(tmp_path_factory: pytest.TempPathFactory) -> Paper:
    base = tmp_path_factory.mktemp("paper")
    nb = base / "every_widget.ipynb"
    write_notebook(nb, CELLS)
    out = base / "out"
    env = {**os.environ, "AGENTLAB_PROGRESS": "0", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "agentlab.cli", "paper", str(nb), "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    executed = out / "every_widget.ipynb"
    text = json.dumps(json.loads(executed.read_text()))
    tick = int(re.search(r"final tick (\d+)", text).group(1))  # type: ignore[union-attr]
    calls = {
        "soc": _count_rows(out / "runs" / "soc", "llm_calls"),
        "exp": _count_rows(out / "runs" / "exp", "llm_calls"),
    }
    return Paper(out, out / "every_widget.html", executed, tick, calls)


def _count_rows(run: Path, dataset: str) -> int:
    from agentlab.store import open_run

    r = open_run(run)
    try:
        return int(r.sql(f"select count(*) as n from {dataset}")["n"].iloc[0])
    finally:
        r.close()


def _static_texts(page: Any) -> dict[str, list[str]]:
    return page.evaluate(
        """() => {
          const out = {};
          for (const k of ['society', 'conversation', 'iat', 'human']) {
            out[k] = [...document.querySelectorAll('.agentlab-static-' + k)]
              .map((e) => e.innerText);
          }
          out.images = [...document.querySelectorAll('.agentlab-static img')]
            .map((i) => String(i.complete && i.naturalWidth > 0));
          return out;
        }"""
    )


def _assert_final_state(got: dict[str, list[str]], paper: Paper) -> None:
    assert len(got["society"]) == 1, got
    soc = got["society"][0]
    assert "done" in soc and re.search(rf"\b{paper.tick}\s+tick", soc), soc
    assert re.search(rf"\b{paper.calls['soc']}\s+LLM calls", soc), (soc, paper.calls)
    assert len(got["conversation"]) == 2  # the society's and the experiment's
    assert any("expert" in c for c in got["conversation"]), got["conversation"]
    assert len(got["iat"]) == 2
    assert any(f"{paper.calls['exp']} calls" in t for t in got["iat"]), (got["iat"], paper.calls)
    (human,) = got["human"]
    assert "1 pending, 1 answered" in human and "Adopt the policy?" in human, human
    assert got["images"] and all(v == "true" for v in got["images"]), got["images"]


@pytest.fixture()
def page(tmp_path: Path) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    from tests.browser.conftest import CHROMIUM, FLAGS

    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium not installed (apt-get install -y chromium)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        pg = browser.new_page(viewport={"width": 1300, "height": 1400})
        yield pg
        browser.close()


def test_paper_html_shows_every_widget_offline(paper: Paper, page: Any) -> None:
    net = Offline(page)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(paper.html.as_uri(), wait_until="load")
    page.wait_for_selector(".plotly-graph-div .main-svg", timeout=30_000)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "paper_offline.png"), full_page=True)
    _assert_final_state(_static_texts(page), paper)
    assert net.blocked == [] and net.failed == [], (net.blocked, net.failed)
    assert errors == []
    # one shared plotly.js next to the page, none inlined
    assert (paper.out / "plotly.min.js").is_file()
    assert paper.html.stat().st_size < 1_000_000


def test_plain_nbconvert_of_the_executed_notebook_shows_every_widget_offline(
    paper: Paper, page: Any, tmp_path: Path
) -> None:
    # `jupyter nbconvert --to html` as anyone would run it on the saved notebook
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--output-dir",
         str(tmp_path), str(paper.notebook)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    net = Offline(page)
    page.goto((tmp_path / "every_widget.html").as_uri(), wait_until="load")
    _assert_final_state(_static_texts(page), paper)
    page.screenshot(path=str(SHOTS / "nbconvert_offline.png"), full_page=True)
    # nbconvert's own template still asks a CDN for require.js and MathJax (blocked here):
    # nothing shown depends on them, and no widget manager is requested
    assert all(u.startswith("https://cdnjs.cloudflare.com/") for u in net.blocked), net.blocked


def test_saved_notebook_shows_every_widget_without_a_kernel(
    paper: Paper, page: Any, tmp_path: Path
) -> None:
    # a JupyterLab that cannot start any kernel: what a reader without the env sees
    with start_lab(tmp_path / "lab", ["--KernelSpecManager.allowed_kernelspecs=no-such"]) as lab:
        (lab.root / "paper.ipynb").write_bytes(paper.notebook.read_bytes())
        net = Offline(page)
        page.goto(f"{lab.url}/lab/tree/paper.ipynb?reset", wait_until="domcontentloaded")
        page.wait_for_selector(".jp-Dialog", timeout=90_000)  # "Select Kernel"
        assert "No Kernel" in page.inner_text(".jp-Dialog")
        page.locator(".jp-Dialog button.jp-mod-accept").click()
        page.wait_for_selector(".agentlab-static-iat", timeout=60_000)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(SHOTS / "notebook_no_kernel.png"), full_page=True)
        _assert_final_state(_static_texts(page), paper)
        body = page.inner_text("body")
        assert "model not found" not in body and "Loading widget" not in body
        assert net.blocked == [] and net.failed == [], (net.blocked, net.failed)
