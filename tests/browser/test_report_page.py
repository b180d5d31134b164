"""``agentlab report --html`` copied alone, in Chromium (marker ``browser``): the default
page says where each chart went missing (``plotly.min.js`` left behind), never a blank
box; ``--self-contained`` draws every chart from the page alone."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlab.cli import main
from tests.analysis.test_run_report import _society_like
from tests.browser.conftest import CHROMIUM, FLAGS, SHOTS

pytestmark = pytest.mark.browser


@pytest.fixture()
def page() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium not installed (apt-get install -y chromium)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield browser.new_page(viewport={"width": 1100, "height": 900})
        browser.close()


def test_report_page_copied_alone(tmp_path: Path, page: Any) -> None:
    run = tmp_path / "run"
    _society_like(run)
    made = tmp_path / "made"
    assert main(["report", str(run), "--html", str(made / "report.html")]) == 0
    assert main(["report", str(run), "--html", str(made / "full.html"), "--self-contained"]) == 0
    assert not (made / "full.html").read_text().count('src="plotly.min.js"')
    alone = tmp_path / "copied"
    alone.mkdir()
    for name in ("report.html", "full.html"):  # copied without plotly.min.js
        shutil.copy(made / name, alone / name)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((alone / "report.html").as_uri(), wait_until="load")
    missing = page.locator(".chart-missing")
    missing.first.wait_for()  # count() does not wait for the page's script to write it
    assert missing.count() >= 1
    assert "plotly.min.js is not next to this page" in missing.first.inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "report_copied_alone.png"), full_page=True)
    errors.clear()
    page.goto((alone / "full.html").as_uri(), wait_until="load")
    page.wait_for_selector(".plotly-graph-div .main-svg", timeout=30_000)
    assert page.locator(".plotly-graph-div .main-svg").count() >= 1
    assert page.locator(".chart-missing").count() == 0 and errors == []
