"""``agentlab view`` in Chromium (marker ``browser``): a society run, a topology
experiment, a sweep and a paper with every link followed; a 600-run experiment whose
largest page stays under 1 MB; a folder of 300 runs filtered by a parameter; an error row
to its LLM call's prompt and reply; an index that makes no request while nothing changes
and follows a running run; ``--bundle`` offline. Screenshots at 400 and 1,600 px go to
``test-output/browser/view_*.png``."""

# ruff: noqa: F811 (the session fixtures of tests/view, shared with these tests)
from __future__ import annotations

import contextlib
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

from agentlab.view.server import POLL_S, SETTLE_S
from tests.browser.conftest import CHROMIUM, FLAGS, REPO, SHOTS, _free_port
from tests.browser.test_static_forms import Offline
from tests.view.conftest import (  # noqa: F401
    SOCIETY,
    big_experiment,
    folder_300,
    mixed_folder,
)

pytestmark = pytest.mark.browser

WIDTHS = (400, 1600)
TILE = """(key) => {
  const t = document.querySelector(`.tile[data-key="${key}"] .v`);
  return t ? t.textContent.trim() : null;
}"""
LINKS = """() => [...new Set([...document.querySelectorAll('a[href]')]
  .map((a) => a.href.split('#')[0]).filter((h) => h.startsWith(location.origin)))]"""


@contextlib.contextmanager
def view_server(folder: Path) -> Iterator[str]:
    """``agentlab view FOLDER`` as a user starts it (the CLI, its own process)."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "agentlab.cli", "view", str(folder), "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url + "view.js", timeout=5).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()  # type: ignore[union-attr]
            time.sleep(0.3)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium not installed (apt-get install -y chromium)")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield b
        b.close()


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    pg = browser.new_page(viewport={"width": 1200, "height": 900})
    yield pg
    pg.close()


@pytest.fixture(scope="module")
def mixed_url(mixed_folder: Path) -> Iterator[str]:
    with view_server(mixed_folder) as url:
        yield url


def shoot(page: Any, name: str) -> None:
    """Screenshots of the current page at 400 and 1,600 px."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for w in WIDTHS:
        page.set_viewport_size({"width": w, "height": 900})
        page.wait_for_timeout(300)  # charts follow their cell's width
        page.screenshot(path=str(SHOTS / f"view_{name}_{w}.png"), full_page=False)
    page.set_viewport_size({"width": 1200, "height": 900})


def crawl(page: Any, start: str, limit: int | None = None) -> dict[str, int]:
    """Open every page reachable from ``start`` in the browser; ``{url: bytes}``.
    Fails on any status but 200."""
    seen, todo, sizes = {start}, [start], {}
    while todo and (limit is None or len(sizes) < limit):
        url = todo.pop(0)
        res = page.goto(url)
        assert res is not None and res.status == 200, (url, res and res.status)
        sizes[url] = len(res.body())
        if "/f/" in url or not res.headers.get("content-type", "").startswith("text/html"):
            continue
        for link in page.evaluate(LINKS):
            if link not in seen:
                seen.add(link)
                todo.append(link)
    return sizes


def test_every_link_of_a_society_an_experiment_a_sweep_and_a_paper(
    mixed_url: str, page: Any
) -> None:
    net = Offline(page)
    sizes = crawl(page, mixed_url)
    names = {u.rsplit("/", 1)[-1].split("-")[0] for u in sizes}
    assert {"index.html", "errors", "calls", "messages", "agents", "agent", "topology", "xrun",
            "point", "paper.html"} <= names, names  # fmt: skip
    assert max(sizes.values()) < 1_000_000
    failed = [u for u in net.failed if "/_events" not in u]  # a stream left by navigation
    assert net.blocked == [] and failed == [], (net.blocked, failed)

    page.goto(mixed_url)
    rows = page.locator("#runs tbody tr")
    assert rows.count() == 5
    shoot(page, "index")
    page.locator("#runs a", has_text=SOCIETY).click()
    page.wait_for_selector(".js-plotly-plot .main-svg")
    assert page.evaluate(TILE, "ticks") == "3"
    assert int(page.evaluate(TILE, "step_errors")) > 0
    shoot(page, "society")
    page.locator("#parts a", has_text="Agents").click()
    page.locator("#agents a").first.click()
    page.wait_for_selector("#timeline tbody tr")
    assert page.locator("#timeline tbody tr").count() == 3  # one row per tick
    shoot(page, "agent_timeline")

    page.goto(mixed_url)
    page.locator("#runs a", has_text="sweep").click()
    page.wait_for_selector(".js-plotly-plot .main-svg")
    assert "twice vs x" in page.inner_text("body")  # metric against parameter, with CIs
    assert page.locator("#points tbody tr").count() == 4
    shoot(page, "sweep")
    page.locator("#points a").first.click()
    assert "Recorded results" in page.inner_text("body")

    page.goto(mixed_url)
    page.locator("#runs a", has_text="paper").first.click()
    page.wait_for_selector("#table-table1")
    assert page.locator("#child-runs a", has_text="society").count() == 1
    shoot(page, "paper")
    with page.expect_navigation():
        page.locator("#paper-html a").click()
    assert page.url.endswith("/f/paper/paper.html")


def test_from_an_error_row_to_its_llm_calls_prompt_and_reply(mixed_url: str, page: Any) -> None:
    page.goto(mixed_url)
    page.locator("#runs a", has_text=SOCIETY).click()
    page.locator("#parts a", has_text="Errors").click()
    row = page.locator("#errors tbody tr", has_text="step error").first
    agent = row.locator("td").nth(1).inner_text()
    tick = row.locator("td").nth(2).inner_text()
    row.locator("td").nth(4).locator("summary").click()  # the traceback
    assert "Traceback (most recent call last)" in row.inner_text()
    shoot(page, "errors")
    row.locator("a", has_text="prompt & reply").click()
    target = page.locator("#calls tbody tr:target")
    target.wait_for()
    cells = target.locator("td")
    assert cells.nth(1).inner_text() == agent and cells.nth(2).inner_text() == tick
    assert cells.nth(6).inner_text() != "ok"  # the call the step failed on
    io = target.locator("details")
    assert io.get_attribute("open") is not None  # opened by the link
    text = io.inner_text()
    assert "prompt · system" in text and "prompt · user" in text and "reply" in text
    assert f"You are {agent}" in text or agent in text  # the agent's own prompt
    shoot(page, "call")

    # from a message and from a span to the call that wrote / made it
    for part, table in (("Messages", "#messages"), ("Spans", "#spans")):
        page.goto(mixed_url)
        page.locator("#runs a", has_text=SOCIETY).click()
        page.locator("#parts a", has_text=part).click()
        row = page.locator(f"{table} tbody tr", has_text="prompt & reply").first
        sender = row.locator("td").nth(2 if part == "Messages" else 1).inner_text()
        row.locator("a", has_text="prompt & reply").click()
        target = page.locator("#calls tbody tr:target")
        assert target.locator("td").nth(1).inner_text() == sender
        assert "prompt · user" in target.locator("details[open]").inner_text()
    page.goto(mixed_url)
    page.locator("#runs a", has_text=SOCIETY).click()
    page.locator("#parts a", has_text="Messages").click()
    rows = page.locator("#messages tbody tr")
    rows.first.wait_for()  # count() does not wait: the click's navigation may not have landed
    total = rows.count()
    page.fill("input.row-filter", "llm-00001")
    visible = page.evaluate("() => [...document.querySelectorAll('#messages tbody tr')]"
                            ".filter((r) => !r.hidden).length")  # fmt: skip
    assert 0 < visible < total  # the conversation filter


@pytest.mark.slow
def test_a_600_run_experiment_drills_down_and_stays_small(big_experiment: Path, page: Any) -> None:
    with view_server(big_experiment) as url:
        page.goto(url)
        page.locator("#runs a", has_text="topology600").click()
        page.wait_for_selector("#topologies")
        assert page.locator("#topologies tbody tr").count() == 3
        shoot(page, "experiment600")
        exp = page.url
        sizes = crawl(page, exp, limit=30)  # overview, its parts, topologies, runs
        page.goto(exp)
        page.locator("#topologies a", has_text="full_mesh").click()
        assert "200 runs" in page.inner_text("body")
        page.locator(".pager a[rel=next]").first.click()
        page.locator("#xruns a").first.click()
        page.wait_for_selector(".js-plotly-plot .main-svg")  # the call graph
        assert "Call graph" in page.inner_text("body")
        shoot(page, "experiment600_run")
        # the last page of each paged part exists and is small as well
        for part in ("calls", "messages", "errors", "agents"):
            page.goto(url + f"r/topology600/{part}-1.html")
            last = page.locator(".pager a", has_text="last")
            if last.count():
                res = page.goto(last.first.evaluate("(a) => a.href"))
                assert res is not None and res.status == 200
                sizes[page.url] = len(res.body())
        assert max(sizes.values()) < 1_000_000, max(sizes.items(), key=lambda kv: kv[1])
        print(f"\nlargest of {len(sizes)} pages: {max(sizes.values()):,} bytes")


def test_a_folder_of_300_runs_filtered_by_a_parameter(folder_300: Path, page: Any) -> None:
    with view_server(folder_300) as url:
        page.goto(url)
        assert page.locator("#runs tbody tr").count() == 300
        page.fill("#f-param", "agents=3, topology=b")
        shown = page.evaluate(
            "() => [...document.querySelectorAll('#runs tbody tr')].filter((r) => !r.hidden)"
            ".map((r) => r.cells[0].textContent)"
        )
        want = [f"run-{i:03d}" for i in range(300) if 1 + i % 5 == 3 and i % 3 == 1]
        assert sorted(shown) == want and len(want) == 20
        assert page.inner_text("#shown").startswith("20 of 300")
        shoot(page, "index300_filtered")
        page.fill("#f-param", "")
        page.fill("#q", "run-29")
        assert page.evaluate("() => [...document.querySelectorAll('#runs tbody tr')]"
                             ".filter((r) => !r.hidden).length") == 10  # fmt: skip


def test_the_index_is_silent_when_idle_and_follows_a_commit(tmp_path: Path, page: Any) -> None:
    from agentlab.runtime import Society

    root = tmp_path / "runs"
    soc = Society.create(root / "growing", agents=2, llm="sim/instant", seed=1, progress=False)
    soc.run_sync(1)
    with view_server(root) as url:
        page.goto(url)
        page.wait_for_load_state("networkidle")
        cell = "#runs tbody tr td:nth-child(5)"
        assert page.inner_text(cell) == "1"
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.wait_for_timeout(5000)
        assert requests == []  # nothing changes: not one request
        worker = threading.Thread(target=soc.run_sync, args=(1,), daemon=True)
        worker.start()
        worker.join(30)
        t0 = time.monotonic()  # the run's last write (status "done")
        page.wait_for_function(f"() => document.querySelector('{cell}').textContent === '2'",
                               timeout=10_000)  # fmt: skip
        took = time.monotonic() - t0
        assert took < POLL_S + SETTLE_S + 2.0, took  # seen, settled, one fetch and render
        assert len([r for r in requests if "/_events" not in r]) == 1  # one fetch of the rows
        # a run's own page follows it the same way (its header tiles)
        with page.expect_navigation():  # so the tile read below is the run page's
            page.locator("#runs a", has_text="growing").click()
        page.wait_for_load_state("networkidle")
        assert page.evaluate(TILE, "ticks") == "2"
        worker = threading.Thread(target=soc.run_sync, args=(1,), daemon=True)
        worker.start()
        worker.join(30)
        page.wait_for_function(f"() => ({TILE})('ticks') === '3'", timeout=10_000)
    soc.close()


def test_the_bundle_opens_offline(mixed_folder: Path, page: Any, tmp_path: Path) -> None:
    out = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "agentlab.cli", "view", str(mixed_folder), "--bundle", str(out)],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(list(out.rglob("plotly.min.js"))) == 2  # the viewer's, and the paper's own
    net = Offline(page)
    page.goto((out / "index.html").as_uri())
    page.locator("#runs a", has_text=SOCIETY).click()
    page.wait_for_selector(".js-plotly-plot .main-svg")
    assert page.evaluate(TILE, "ticks") == "3"
    page.locator("#parts a", has_text="Errors").click()
    page.locator("#errors a", has_text="prompt & reply").first.click()
    page.locator("#calls tbody tr:target details[open]").wait_for()
    page.goto((out / "index.html").as_uri())
    page.locator("#runs a", has_text="experiment").click()
    page.locator("#topologies a").first.click()
    page.locator("#xruns a").first.click()
    page.wait_for_selector(".js-plotly-plot .main-svg")
    shoot(page, "bundle_xrun")
    failed = [u for u in net.failed if "/_events" not in u]  # a stream left by navigation
    assert net.blocked == [] and failed == [], (net.blocked, failed)


def test_the_runs_list_keeps_dates_on_one_line_and_parameters_readable(
    mixed_url: str, page: Any
) -> None:
    """At 1,200 px the list squeezed its date column to three lines and its parameters to
    ~130 px, so a paper's row (nine parameters) stood 12 lines tall; the date now keeps
    one line and the parameters a readable width (the table scrolls sideways instead)."""
    page.goto(mixed_url)
    page.wait_for_selector("#runs tbody tr")
    page.check("#f-nested")  # every row, the paper's own run too
    dims = page.evaluate("""() => [...document.querySelectorAll('#runs tbody tr')].map((tr) => {
        const td = tr.querySelectorAll('td');
        const text = document.createRange();
        text.selectNodeContents(td[3]);  // one client rect per line the date takes
        const lines = new Set([...text.getClientRects()].map((r) => Math.round(r.top)));
        return [lines.size, td[11].getBoundingClientRect().width];
    })""")
    assert dims and all(lines == 1 for lines, _ in dims), dims
    assert all(width >= 280 for _, width in dims), dims
    assert (
        page.evaluate("() => getComputedStyle(document.querySelector('.scroll')).overflowX")
        == "auto"
    )


def test_the_runs_list_shows_the_runs_inside_sweeps_and_papers_on_request(
    mixed_url: str, page: Any
) -> None:
    """Two papers of notebook 02 and 04 made a list of 62 rows, 60 of them the papers' own
    runs (listed on each paper's page). They are hidden until asked for (a checkbox), and a
    search or a parameter filter finds them either way."""

    def shown() -> list[str]:
        return list(page.evaluate(
            "() => [...document.querySelectorAll('#runs tbody tr')].filter((r) => !r.hidden)"
            ".map((r) => r.cells[0].textContent)"
        ))  # fmt: skip

    page.goto(mixed_url)
    page.wait_for_selector("#runs tbody tr")
    top = shown()
    assert "paper" in top and "paper/society" not in top and len(top) == 4, top
    assert "runs inside sweeps and papers (1)" in page.inner_text("#filters")
    page.check("#f-nested")
    assert "paper/society" in shown() and len(shown()) == 5
    page.reload()  # the choice is kept in the address, as the other filters are
    page.wait_for_selector("#runs tbody tr")
    assert page.is_checked("#f-nested") and len(shown()) == 5
    page.uncheck("#f-nested")
    page.fill("#q", "society")
    assert "paper/society" in shown()
    page.fill("#q", "")
    page.select_option("#f-kind", "society")  # a kind filter looks inside papers too
    assert "paper/society" in shown() and "paper" not in shown()
