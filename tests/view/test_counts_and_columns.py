"""What the run browser counts and how it titles it (review audit20, defects 5, 7, 10):
an experiment's tables title the workflow iteration "iteration" and show each call's
discussion round; one LLM failure that failed a step is one error, not two; counted nouns
agree with their count; ``agentlab view`` on a taken port is one line."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import socket
from pathlib import Path

import pytest

from tests.view.conftest import make_society


def _table(page: str, table_id: str) -> tuple[list[str], list[list[str]]]:
    """The headings and the rows (cell texts) of table ``table_id`` of a page."""
    m = re.search(rf'<table id="{table_id}".*?</table>', page, re.S)
    assert m, table_id
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", m.group(0), re.S)

    def cells(row: str) -> list[str]:
        found = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)
        return [re.sub(r"<[^>]+>", "", c).strip() for c in found]

    return cells(rows[0]), [cells(r) for r in rows[1:]]


def test_an_experiments_tables_show_the_iteration_and_each_calls_round(
    mixed_folder: Path,
) -> None:
    """Defect 5: an experiment's ``tick`` holds the workflow iteration, titled "round":
    a round-3 discussion call, and every recruitment call, read as round 1. The tables
    now title it "iteration" and show ``llm_calls.round`` ("–" outside the discussion);
    a message shows the round of the call that wrote it."""
    import pandas as pd

    from agentlab.store.run import open_run
    from agentlab.view import render_page

    run = open_run(mixed_folder / "experiment")
    try:
        want = run.sql('select request_id, tick, "round", stage from llm_calls')
    finally:
        run.close()
    rounds = {r.request_id: r for r in want.itertuples(index=False)}
    # what a round cell should read: the call's round, "–" where it has none
    shown = {r.request_id: "–" if pd.isna(r.round) else str(r.round)
             for r in want.itertuples(index=False)}  # fmt: skip
    assert (want["round"].fillna(0) > 1).any(), "no call past the first round to tell apart"
    for name in ("xrun-star-0000.html", "calls-1.html"):
        page = render_page(mixed_folder, f"r/experiment/{name}") or ""
        heads, rows = _table(page, "calls")
        it, rd = heads.index("iteration"), heads.index("round")
        assert rows and it + 1 == rd, heads
        for cells in rows:
            call = rounds[cells[0]]
            assert cells[it] == str(call.tick), cells
            assert cells[rd] == shown[cells[0]], (cells[0], call.stage, cells[rd], call.round)
        assert any(c[rd] == "–" for c in rows) and any(c[rd] not in ("–", "1") for c in rows)
    for name in ("xrun-star-0000.html", "messages-1.html"):
        page = render_page(mixed_folder, f"r/experiment/{name}") or ""
        heads, rows = _table(page, "messages")
        assert heads[:2] == ["iteration", "round"], heads
        links = re.findall(r'<table id="messages".*?</table>', page, re.S)[0]
        by_row = re.findall(r"<tr[^>]*>(.*?)</tr>", links, re.S)[1:]
        for cells, raw in zip(rows, by_row, strict=True):
            rid = re.search(r'#c-([^"]+)"', raw)
            if rid:  # the message's round is its call's
                assert cells[1] == shown[rid.group(1)], (cells, rid.group(1))
        assert any(c[1] not in ("–", "1") for c in rows), rows[:3]
    spans = render_page(mixed_folder, "r/experiment/spans-1.html") or ""
    assert " round " not in spans and ", iteration " in spans
    society = render_page(mixed_folder, "r/my run <b>'s/calls-1.html") or ""
    heads, _ = _table(society, "calls")
    assert "tick" in heads and "iteration" not in heads and "round" not in heads


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a society whose every LLM call fails (each failing its step attempt)
    and a topology experiment whose runs all fail on their first call."""
    from agentlab.llm import LLMClient
    from agentlab.runtime import Society
    from agentlab.topology import Experiment

    root = tmp_path_factory.mktemp("failing") / "runs"
    llm = LLMClient("sim/instant", seed=1, max_retries=0, sim_p_malformed=1.0)
    soc = Society.create(root / "soc", agents=3, env=["social_feed"], llm=llm, seed=0,
                         progress=False, max_error_share=None)  # fmt: skip
    soc.run_sync(1)
    soc.close()
    exp = Experiment(topologies=["star"], agents=3, runs=2, seed=0, clock="virtual",
                     llm=LLMClient("sim/vllm-3b", max_retries=0, sim_p_malformed=1.0),
                     out=root / "exp", progress=False, max_error_share=None)  # fmt: skip
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, exp.run()).result()
    return root


@pytest.mark.parametrize("name", ["soc", "exp"])
def test_an_llm_failure_that_failed_a_step_is_one_error(failing: Path, name: str) -> None:
    """Defect 10b: a run whose 6 calls all failed its 6 step attempts showed step errors
    6, LLM failures 6, "Errors (12)", twice the failures there were. The failure is one
    error, the step error (the errors page lists it once, linked to its call); the list,
    ``agentlab runs``, the header link and the errors page say the same number."""
    from agentlab.store.summary import summarize_run
    from agentlab.view import format_runs, render_page, runs_rows

    e = summarize_run(failing / name).errors
    llm = sum(e.llm_failures.values())
    assert e.step_errors and llm and e.llm_in_steps == min(e.step_errors, llm), e
    assert e.total == e.step_errors + e.tool_errors + llm - e.llm_in_steps < e.step_errors + llm
    row = {r["run"]: r for r in runs_rows(failing)}[name]
    assert row["errors"] == e.total and row["llm_failures"] == llm
    assert f"Errors ({e.total})" in (render_page(failing, f"r/{name}/index.html") or "")
    page = render_page(failing, f"r/{name}/errors-1.html") or ""
    _, rows = _table(page, "errors")
    assert len(rows) == e.total, [r[0] for r in rows]
    calls = re.findall(r'#c-([^"]+)"', page)
    assert len(calls) == len(set(calls)), "a failed call listed twice"
    line = next(x for x in format_runs(runs_rows(failing)).splitlines() if x.startswith(name))
    assert line.split()[-1] == str(e.total), line


def test_counted_nouns_agree_with_their_count(failing: Path, tmp_path: Path) -> None:
    """Defect 10a: a folder of one run was headed "1 runs (1 society)"."""
    import shutil

    from agentlab.view import render_page
    from agentlab.view.page_parts import counted

    assert [counted(1, "run"), counted(2, "run"), counted(2, "society")] == [
        "1 run", "2 runs", "2 societies"]  # fmt: skip
    assert counted(1, "step error (retried)") == "1 step error (retried)"
    assert counted(3, "LLM failure: timeout") == "3 LLM failures: timeout"
    assert counted(2, "threads") == "2 threads" and counted(1_200, "point") == "1,200 points"
    one = tmp_path / "runs"
    shutil.copytree(failing / "soc", one / "soc")
    assert "1 run (1 society)" in (render_page(one, "index.html") or "")
    assert "2 runs (1 experiment, 1 society)" in (render_page(failing, "index.html") or "")
    make_society(one / "two", ticks=1)
    assert "2 runs (2 societies)" in (render_page(one, "index.html") or "")
    assert "2 runs" in (render_page(failing, "r/exp/topology-star-1.html") or "")


def test_view_on_a_port_in_use_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                           ) -> None:  # fmt: skip
    """Defect 7: a second ``agentlab view`` on the same port printed a 23-line traceback
    ending in ``OSError: [Errno 98] Address already in use``."""
    from agentlab.cli import main

    (tmp_path / "runs").mkdir()
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        rc = main(["view", str(tmp_path / "runs"), "--port", str(port)])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and len(err.splitlines()) == 1, err
    assert err.startswith(f"agentlab view: error: port {port} is in use"), err
    assert "--port" in err and "Traceback" not in err
