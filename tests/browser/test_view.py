"""``agentlab view`` in Chromium: list a folder with a society run, an experiment and a
sweep, open each, follow a run while it is written; ``--bundle`` offline (marker
``browser``). Screenshots go to ``test-output/browser/view_*.png``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import CHROMIUM, FLAGS, REPO, SHOTS, _free_port, write_notebook
from tests.browser.test_static_forms import Offline

pytestmark = pytest.mark.browser

TILE = """(label) => {
  for (const t of document.querySelectorAll('.tile')) {
    if (t.querySelector('.l').textContent === label) return t.querySelector('.v').textContent;
  }
  return null;
}"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agentlab.llm import LLMClient
    from agentlab.runtime import Society
    from agentlab.sweep import sweep
    from agentlab.topology import Experiment

    root = tmp_path_factory.mktemp("view") / "runs"
    soc = Society.create(root / "society", agents=4, llm="sim/instant", seed=0, progress=False)
    soc.run_sync(3)
    soc.close()
    llm = LLMClient("sim/instant")
    exp = Experiment(topologies=["star"], agents=3, runs=2, llm=llm, seed=0, clock="virtual",
                     out=root / "experiment", progress=False)  # fmt: skip
    asyncio.run(exp.run())
    nb = root.parent / "tiny.ipynb"
    write_notebook(nb, ["x = 1", "from agentlab.sweep import record\nrecord('twice', 2 * x)"])
    nbj = json.loads(nb.read_text())
    nbj["cells"][0]["metadata"]["tags"] = ["parameters"]
    nb.write_text(json.dumps(nbj))
    sweep(nb, {"x": [1, 2]}, out=root / "sweep", executor="local", progress=False)
    return root


@pytest.fixture()
def page() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium not installed (apt-get install -y chromium)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        pg = browser.new_page(viewport={"width": 1200, "height": 1000})
        yield pg
        browser.close()


@pytest.fixture()
def server(folder: Path) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "agentlab.cli", "view", str(folder), "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url, timeout=5).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()  # type: ignore[union-attr]
            time.sleep(0.3)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"view_{name}.png"), full_page=True)


def test_view_lists_and_opens_a_society_an_experiment_and_a_sweep(server: str, page: Any) -> None:
    net = Offline(page)
    page.goto(server)
    runs = page.locator("#runs tr").all_inner_texts()
    names = [r.split("\t")[0] for r in runs[1:]]
    assert "society" in names and "experiment" in names, runs
    assert "society\tsociety" in "\n".join(runs)  # kind column
    sweeps = page.locator("#sweeps tr").all_inner_texts()
    assert len(sweeps) == 2 and sweeps[1].startswith("sweep\ttiny.ipynb\t2\t2"), sweeps
    _shot(page, "index")

    page.locator("#runs a", has_text="society").first.click()
    page.wait_for_selector(".plotly-graph-div .main-svg")
    assert page.evaluate(TILE, "ticks") == "3"
    assert "LLM calls per tick" in page.inner_text("body")
    # agent states by tick: the last tick is shown, another one on demand
    shown = "#agent-states tr[data-tick]:visible"
    assert page.locator(shown).count() == 4
    assert {page.locator(shown).nth(i).get_attribute("data-tick") for i in range(4)} == {"3"}
    page.select_option("#state-tick", "1")
    assert page.locator(shown).first.get_attribute("data-tick") == "1"
    _shot(page, "society")

    page.goto(server)
    page.locator("#runs a", has_text="experiment").first.click()
    page.wait_for_selector("#messages")
    rows = page.locator("#messages tr").count() - 1
    assert rows > 5
    page.fill("#msg-filter", "expert_2")
    visible = page.evaluate(
        "() => [...document.querySelectorAll('#messages tr:not(:first-child)')]"
        ".filter((r) => r.style.display !== 'none').length"
    )
    assert 0 < visible < rows  # the replay filter works
    _shot(page, "experiment")

    page.goto(server)
    page.locator("#sweeps a").first.click()
    page.wait_for_selector("h1:has-text('sweep')")
    table = page.locator("table tr").all_inner_texts()
    assert len(table) == 3 and "twice" in table[0], table
    _shot(page, "sweep")
    assert net.blocked == [] and net.failed == [], (net.blocked, net.failed)


def test_view_follows_a_run_while_it_is_written(server: str, folder: Path, page: Any) -> None:
    from agentlab.runtime import Society

    soc = Society.create(folder / "growing", agents=3, llm="sim/instant", seed=1,
                         progress=False, tick_seconds=0.4)  # fmt: skip
    soc.run_sync(1)
    page.goto(server + "run-growing.html")
    assert page.evaluate(TILE, "ticks") == "1"
    worker = threading.Thread(target=soc.run_sync, args=(15,), daemon=True)
    worker.start()
    try:
        # the page refreshes itself; no reload from the test
        page.wait_for_function(f"() => Number(({TILE})('ticks')) >= 4", timeout=30_000)
        _shot(page, "following")
    finally:
        soc.stop()
        worker.join(30)
        soc.close()


def test_view_bundle_opens_offline(folder: Path, page: Any, tmp_path: Path) -> None:
    out = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "agentlab.cli", "view", str(folder), "--bundle", str(out)],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(list(out.glob("plotly.min.js"))) == 1
    net = Offline(page)
    page.goto((out / "index.html").as_uri())
    page.locator("#runs a", has_text="society").first.click()
    page.wait_for_selector(".plotly-graph-div .main-svg")
    assert page.evaluate(TILE, "ticks") == "3"
    _shot(page, "bundle")
    assert net.blocked == [] and net.failed == [], (net.blocked, net.failed)
