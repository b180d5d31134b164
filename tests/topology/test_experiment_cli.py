"""``agentlab experiment``: the topology study from a terminal, stopped by Ctrl-C and resumed.

A study of hundreds of runs against a real endpoint runs for hours, in a terminal or a
batch job; it took a Python script around ``Experiment(...).run()``. A real SIGINT stops it
(exit 130; the run in flight is dropped); ``--resume`` runs the rest, and on the virtual clock
the calls are the uninterrupted study's.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from agentlab.cli import main
from agentlab.store import open_run
from agentlab.topology.experiment import ExperimentResults

COLS = ["run_id", "agent_id", "stage", "start", "end", "prompt_tokens", "completion_tokens"]
ARGS = ["--topologies", "sequential,star", "--agents", "3", "--seed", "1"]


def _calls(path: Path) -> pd.DataFrame:
    df = open_run(path).llm_calls_df()[COLS]
    return df.sort_values(["start", "run_id", "agent_id"]).reset_index(drop=True)


def test_a_study_runs_and_prints_its_traffic_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "topo"
    assert main(["experiment", "--out", str(out), "--runs", "3", *ARGS]) == 0
    text = capsys.readouterr().out
    assert f"{out}: done, 6 runs" in text
    table = text.splitlines()[2:6]
    assert table[0].split()[:3] == ["topology", "runs", "calls_per_run"]
    rows = {line.split()[0]: line.split() for line in table[2:]}
    assert set(rows) == {"sequential", "star"} and rows["star"][1] == "3"
    assert json.loads((out / "run.json").read_text())["status"] == "done"
    cfg = json.loads((out / "run.json").read_text())["config"]
    assert cfg["topologies"] == ["sequential", "star"] and cfg["clock"] == "virtual"
    assert cfg["max_error_share"] == 1.0  # (Experiment's default)
    never = tmp_path / "never"
    assert main(["experiment", "--out", str(never), "--runs", "1", *ARGS,
                 "--max-error-share", "none"]) == 0  # fmt: skip
    assert json.loads((never / "run.json").read_text())["config"]["max_error_share"] is None
    capsys.readouterr()
    # the same out again is refused (not appended to), --overwrite replaces it
    assert main(["experiment", "--out", str(out), "--runs", "3", *ARGS]) == 2
    assert "already holds a run: --resume continues it" in capsys.readouterr().err
    assert main(["experiment", "--out", str(out), "--runs", "2", *ARGS, "--overwrite"]) == 0
    assert "done, 4 runs" in capsys.readouterr().out


def test_bad_options_say_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "x")
    assert main(["experiment", "--out", out, "--max-error-share", "half"]) == 2
    assert "--max-error-share takes a number" in capsys.readouterr().err
    assert main(["experiment", "--out", out, "--topologies", "star,ring"]) == 2
    assert "unknown topology 'ring'" in capsys.readouterr().err
    assert main(["experiment", "--out", out, "--resume", "--runs", "3"]) == 2
    assert "drop --runs" in capsys.readouterr().err
    assert main(["experiment", "--out", out, "--resume"]) == 2  # nothing there to continue
    assert "holds no topology experiment" in capsys.readouterr().err
    par = str(tmp_path / "par")
    assert main(["experiment", "--out", par, "--runs", "1", "--parallel-runs", "2", *ARGS]) == 0
    capsys.readouterr()
    assert main(["experiment", "--out", par, "--resume"]) == 0  # (done: nothing to run)
    assert "interleave" not in capsys.readouterr().err  # (it refused runs in parallel)


@pytest.mark.slow
def test_ctrl_c_stops_after_the_run_in_flight_and_resume_runs_the_rest(tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    assert main(["experiment", "--out", str(straight), "--runs", "120", *ARGS]) == 0
    out = tmp_path / "stopped"
    cmd = [sys.executable, "-m", "agentlab.cli", "experiment", "--out", str(out), "--runs",
           "120", *ARGS]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    finished = out / "replay" / "experiment_runs"
    while time.monotonic() < deadline:  # a few runs in: then the terminal's Ctrl-C
        if sum(f.read_text().count("\n") for f in finished.glob("*.jsonl")) >= 5:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    done = int(stdout.split("stopped, ")[1].split()[0])
    assert 5 <= done < 240, stdout
    assert f"agentlab experiment --out {out} --resume" in stdout
    # the table counts the finished runs only (the one cut short had a few calls)
    lines = stdout.splitlines()
    rows = lines[lines.index(next(x for x in lines if x.startswith("---"))) + 1 :]
    rows = rows[: next(i for i, x in enumerate(rows) if x.startswith("more:"))]
    assert sum(int(r.split()[1]) for r in rows) == done, stdout
    assert json.loads((out / "run.json").read_text())["status"] == "stopped"
    assert set(ExperimentResults(out).calls_df()["run_id"]) <= set(
        ExperimentResults(out).runs_df()["run_id"]
    )
    resumed = subprocess.run([*cmd[:6], "--resume"], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "done, 240 runs" in resumed.stdout
    runs = ExperimentResults(out).runs_df()["run_id"]
    assert len(runs) == runs.nunique() == 240  # each run once
    pd.testing.assert_frame_equal(_calls(out), _calls(straight))  # the uninterrupted calls


def test_results_leave_out_the_calls_of_a_run_cut_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stop cancels the run in flight: its first calls are in the log (they go when the
    experiment is continued), and ``results.calls_df()`` counted that run among the runs
    (``traffic_summary_df`` read 239 runs of a study stopped after 238); so did the
    traffic table of ``agentlab report`` and of the run browser's experiment page."""
    import asyncio

    from agentlab.store import ReplaySink
    from agentlab.topology import Experiment

    out = tmp_path / "e"
    res = asyncio.run(Experiment(topologies=["star"], agents=3, runs=2, seed=0, out=out,
                                 progress=False).run())  # fmt: skip
    first = open_run(out).llm_calls_df().iloc[0].to_dict()
    msg = open_run(out).messages_df().iloc[0].to_dict()
    sink = ReplaySink(out, shard="cut")  # what the run in flight had written at the stop
    sink.append("llm_calls", {**{k: first[k] for k in ("request_id", "start", "end",
                              "agent_id", "outcome", "stage", "topology")},
                              "run_id": "star-0002"})  # fmt: skip
    sink.append("messages", {"msg_id": "cut", "sender": msg["sender"], "run_id": "star-0002"})
    sink.flush()
    assert "star-0002" in set(open_run(out).llm_calls_df()["run_id"])  # in the log
    assert set(res.calls_df()["run_id"]) == {"star-0000", "star-0001"}  # not in the results
    assert set(res.messages_df()["run_id"]) == {"star-0000", "star-0001"}
    assert len(res.calls_df()) == len(open_run(out).llm_calls_df()) - 1
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = lines[lines.index(next(x for x in lines if x.startswith("traffic per topology"))) + 3]
    assert row.split()[:2] == ["star", "2"], lines  # its 2 finished runs, not 3
    from agentlab.analysis import traffic_summary_df
    from agentlab.view import render_page

    page = render_page(tmp_path, "r/e/index.html") or ""
    star = page[page.index("topology-star-1.html") :]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", star[: star.index("</tr>")])
    per_run = round(float(traffic_summary_df(res.calls_df())["calls_per_run"].iloc[0]), 3)
    assert cells[4] == f"{per_run:g}", cells  # runs, ok, calls, score, then calls per run
    # the figures comparing the topologies hold the finished runs' calls, as the table
    from agentlab.analysis.report_figures import run_figures

    figs = dict(run_figures(open_run(out)))
    stages = figs["LLM call latency by stage and topology"]
    kept = res.calls_df()
    assert sum(len(t.y) for t in stages.data) == int((kept["end"] > kept["start"]).sum())
