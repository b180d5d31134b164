"""One folder holding every kind of run — society (done, stopped, killed with SIGKILL),
topology experiment, thread system, sweep, paper — and every reader agreeing on each
run's status and error counts: ``summarize_run``, ``agentlab runs`` (``runs_df`` and the
printed table), ``agentlab report`` and the ``agentlab view`` index.

The error counts are also checked against the log itself (DuckDB over the datasets), so
"agree" cannot mean "all zero" or "all wrong the same way".
"""

from __future__ import annotations

import asyncio
import html
import re
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from agentlab.cli import main as cli
from agentlab.llm import LLMClient
from agentlab.runtime import Society
from agentlab.store import open_run, summarize_run
from agentlab.store.summary import find_runs

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]


def _faulty_llm() -> LLMClient:
    # tool calls with wrong arguments (tool errors), timeouts without retry (LLM failures,
    # and failed steps); the virtual clock makes the timeouts instant
    return LLMClient("sim/instant", seed=0, sim_p_invalid_args=0.5, sim_p_timeout=0.3,
                     max_retries=0)  # fmt: skip


KILLED = r"""
import sys
from agentlab import Society
s = Society.create(sys.argv[1], agents=3, seed=1, clock="virtual", progress=False)
s.run_sync(ticks=1)
from agentlab.store import mark_status
mark_status(sys.argv[1], "running")  # as inside run()'s loop
print("ready", flush=True)
sys.stdin.read()
"""

POINT = """\
from pathlib import Path
from agentlab.llm import LLMClient
from agentlab.runtime import Society
from agentlab.sweep import current_output_dir
llm = LLMClient("sim/instant", seed=seed, sim_p_timeout=0.3, max_retries=0)
out = (current_output_dir() or Path("runs")) / "soc"
s = Society.create(out, agents=3, env=["social_feed"], llm=llm, seed=seed, clock="virtual",
                   progress=False, exist_ok="replace")
s.run_sync(ticks=ticks)
s.close()
"""


def _notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("ticks = 1\nseed = 0")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(POINT)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}  # fmt: skip
    nbformat.write(nb, path)
    return path


def _society_done(out: Path) -> None:
    s = Society.create(out, agents=6, env=["social_feed"], llm=_faulty_llm(), clock="virtual",
                       progress=False)  # fmt: skip
    s.run_sync(ticks=2)
    s.close()


def _society_stopped(out: Path) -> None:
    s = Society.create(out, agents=3, clock="virtual", progress=False)

    async def stop_after_one() -> None:
        task = asyncio.ensure_future(s.run(ticks=1000))
        while s.tick < 1:
            await asyncio.sleep(0.001)
        s.stop()
        await task

    asyncio.run(stop_after_one())
    s.close()


def _society_killed(out: Path) -> None:
    p = subprocess.Popen([sys.executable, "-c", KILLED, str(out)], cwd=ROOT,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)


def _experiment(out: Path) -> None:
    from agentlab.topology import Experiment

    # (max_error_share=None: its runs fail, and the experiment would stop on them)
    Experiment(topologies=["star"], agents=3, runs=2, llm=_faulty_llm(), seed=0,
               progress=False, out=out, max_error_share=None).run_sync()  # fmt: skip


def _threads(out: Path) -> None:
    from agentlab.runtime.threads import AgentSystem, MemoryThreadStore, ScriptedModel

    async def go() -> None:
        system = AgentSystem(ScriptedModel(), MemoryThreadStore(), run_dir=out)
        async with system:
            for i in range(3):
                system.send_user(f"t{i}", "hello", dedup_id="u0")
            await system.drain()

    asyncio.run(go())


def _index_rows(page: str) -> dict[str, str]:
    """The view index's run rows: link text -> the row's cell texts joined by '|'."""
    rows = {}
    table = page.split('id="runs"', 1)[1].split("</table>", 1)[0]
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", table, flags=re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
                 for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, flags=re.S)]  # fmt: skip
        if cells:
            rows[cells[0]] = "|" + "|".join(cells) + "|"
    return rows


def test_every_reader_agrees_on_status_and_errors_for_every_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentlab.analysis.run_report import runs_df
    from agentlab.sweep import sweep
    from agentlab.sweep.paper import make_paper
    from agentlab.viewer import _index

    root = tmp_path / "runs"
    _society_done(root / "society")
    _society_stopped(root / "stopped")
    _society_killed(root / "killed")
    _experiment(root / "experiment")
    _threads(root / "threads")
    nb = _notebook(tmp_path / "point.ipynb")
    sweep(nb, {"ticks": [1, 2]}, out=root / "sweep", executor="local", max_parallel=2,
          progress=False)  # fmt: skip
    make_paper(nb, root / "paper", {"ticks": 2})

    expected = {
        "society": ("society", "done"),
        "stopped": ("society", "stopped"),
        "killed": ("society", "interrupted"),
        "experiment": ("experiment", "done"),
        "threads": ("threads", "done"),
        "sweep": ("sweep", "done"),
        "paper": ("paper", "done"),
    }
    summaries = {d.name: summarize_run(d) for d in find_runs(root)}
    assert {k: (s.kind, s.status) for k, s in summaries.items()} == expected
    assert all(s.ended for k, s in summaries.items() if k != "killed")

    # the counts are the log's, not just consistent with each other
    soc = summaries["society"]
    run = open_run(root / "society")
    spans, calls = run.spans_df(), run.llm_calls_df()
    assert soc.errors.step_errors == int(run.timeline_df()["errors"].sum()) > 0
    tool_errors = spans[(spans["name"] == "env.tool") & (spans["status"] == "error")]
    assert soc.errors.tool_errors == len(tool_errors) > 0
    failed = calls[calls["outcome"] != "ok"]["outcome"].value_counts().to_dict()
    assert soc.errors.llm_failures == {"timeout": failed["timeout"]} and failed["timeout"] > 0
    assert soc.llm_calls == len(calls) and soc.ticks == 2
    exp = open_run(root / "experiment")
    exp_failed = (exp.llm_calls_df()["outcome"] != "ok").sum()
    assert sum(summaries["experiment"].errors.llm_failures.values()) == exp_failed > 0
    assert summaries["experiment"].steps == 2 and summaries["threads"].steps == 3
    for parent in ("sweep", "paper"):  # a sweep / paper sums the runs it holds
        s = summaries[parent]
        assert s.children and s.errors.total == sum(c.errors.total for c in s.children) > 0
        assert all(c.status == "done" for c in s.children)
    assert len(summaries["sweep"].children) == 2

    # agentlab runs: the table and the printed lines
    df = runs_df(root).set_index("run")
    for name, s in summaries.items():
        row = df.loc[name]
        assert (row["kind"], row["status"]) == (s.kind, s.status), name
        assert (row["step_errors"], row["tool_errors"], row["llm_failures"], row["errors"]) == (
            s.errors.step_errors, s.errors.tool_errors, sum(s.errors.llm_failures.values()),
            s.errors.total,
        ), name  # fmt: skip
    capsys.readouterr()
    assert cli(["runs", str(root)]) == 0
    printed = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    for name, s in summaries.items():
        assert s.status in printed[name] and str(s.errors.total) in printed[name], name

    # agentlab report: the status line and the error vocabulary line
    for name, s in summaries.items():
        assert cli(["report", str(root / name)]) == 0
        out = capsys.readouterr().out
        assert re.search(rf"^status +{s.status}\b", out, flags=re.M), (name, out)
        assert s.errors.describe() in out, (name, out)

    # agentlab view: the index lists every run with the same status and error total (a
    # sweep's point runs too, where the index lists them)
    rows = _index_rows(_index(root, None))
    listed = dict(summaries)  # the sweep is a row of the runs list, too
    children = {str(c.path.relative_to(root)): c
                for parent in ("sweep", "paper") for c in summaries[parent].children}  # fmt: skip
    assert set(listed) <= set(rows) <= set(listed) | set(children)
    listed.update({n: c for n, c in children.items() if n in rows})
    for name, s in listed.items():
        assert f"|{s.status}|" in rows[name] and f"|{s.errors.total}|" in rows[name], (
            name, rows[name],
        )  # fmt: skip
