"""``agentlab report`` and ``agentlab runs``: one run, a sweep, a folder of runs, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentlab.analysis.run_report import fmt_num, runs_df, summarize_run
from agentlab.cli import main
from agentlab.store import ReplaySink, Tracer, write_manifest


def _society_like(run_dir: Path, ticks: int = 3) -> None:
    write_manifest(run_dir, kind="society", config={"model": "sim/x"}, seed=1)
    sink, tracer = ReplaySink(run_dir, shard="s"), Tracer(run_dir, shard="s")
    t0 = 1.796110184e9  # epoch seconds: the report must show time since the first call
    for tick in range(1, ticks + 1):
        with tracer.trace_span("tick", tick=tick):
            sink.extend("llm_calls", [
                {"agent_id": f"a{i}", "tick": tick, "start": t0 + tick + 0.1 * i,
                 "end": t0 + tick + 0.1 * i + 0.123456789, "prompt_tokens": 1000,
                 "ttft": 0.02 * i if i else None,  # (the failed call streamed nothing)
                 "completion_tokens": 5, "outcome": "ok" if i else "timeout",
                 "finish_reason": (None, "stop", "tool_calls", "tool_calls")[i]}
                for i in range(4)
            ])  # fmt: skip
        sink.append("timeline", {"tick": tick, "ts": t0 + tick, "llm_calls": 4})
    sink.flush()


def test_run_summary_text_and_html(run_dir: Path, tmp_path: Path, capsys) -> None:
    _society_like(run_dir)
    s = summarize_run(run_dir)
    assert (s["ticks"], s["agents"], s["llm_calls"]) == (3, 4, 12)
    assert s["tokens"] == {"prompt_tokens": 12000, "completion_tokens": 60, "total": 12060}
    assert s["errors"]["llm_calls"] == 3 and len(s["slowest_spans"]) == 3
    out = tmp_path / "html" / "report.html"
    assert main(["report", str(run_dir), "--html", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "llm calls  12  tokens 12,060 (12,000 prompt)" in printed
    # how the answered calls ended, the most first, under the calls (none for failures)
    assert s["replies"] == {"tool_calls": 6, "stop": 3}
    assert (
        "llm calls  12  tokens 12,060 (12,000 prompt)\nreplies    6 tool calls, 3 text" in printed
    )
    assert "p50 123 ms" in printed
    # time to first token beside the latency (over the calls that streamed one)
    assert s["ttft_s"]["p50"] == pytest.approx(0.04) and "TTFT       p50 40 ms" in printed
    page = out.read_text()
    assert "TTFT p50" in page and "40 ms" in page
    # offline and small: one shared plotly.min.js next to the page, nothing remote
    assert re.findall(r"<script src=\"([^\"]+)\"", page) == ["plotly.min.js"]
    assert (out.parent / "plotly.min.js").is_file() and len(page) < 200_000
    assert page.count("Plotly.newPlot") >= 3
    assert "replies: 6 tool calls, 3 text" in page
    assert "12,060" in page and "border=" not in page and "{'" not in page  # no dict reprs
    assert "seconds since the first LLM call" in page and "1.796" not in page
    assert '"tickformat":"d"' in page.replace(" ", "")  # integer ticks


def test_span_durations_on_decade_ticks_and_zero_spans_named(tmp_path: Path) -> None:
    """The span box plot: a log time axis with the decade labels of every log time axis
    ("100 ms", "1 s"), and spans of 0 s (a virtual clock's tools) named in the title
    instead of an empty column."""
    import pandas as pd

    from agentlab.analysis.report_figures import span_durations

    spans = pd.DataFrame({"name": ["llm.call"] * 3 + ["agent.step"] * 2 + ["env.tool"] * 4,
                          "duration": [0.2, 1.5, 3.0, 2.0, 4.0, 0.0, 0.0, 0.0, 0.0]})  # fmt: skip
    title, fig = span_durations(spans)
    assert title.endswith("not drawn: env.tool (4))"), title
    assert set(fig.data[0].x) == {"llm.call", "agent.step"}
    y = fig.layout.yaxis
    # 0.2-4 s holds one decade: its 2x and 5x steps are ticked too ("1 s" alone read poorly)
    assert y.type == "log" and list(y.ticktext) == ["200 ms", "500 ms", "1 s", "2 s"]
    assert list(y.tickvals) == [0.2, 0.5, 1.0, 2.0]
    assert span_durations(spans[spans["duration"] > 0])[0] == "Span duration by name"


def test_report_on_a_folder_of_runs_and_runs_command(tmp_path: Path, capsys) -> None:
    for name in ("a", "b"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        _society_like(tmp_path / "runs" / name, ticks=2 if name == "a" else 4)
    df = runs_df(tmp_path / "runs")
    assert list(df["run"]) == ["a", "b"] and list(df["ticks"]) == [2, 4]
    assert main(["report", str(tmp_path / "runs")]) == 0
    table = capsys.readouterr().out
    assert "kind" in table.splitlines()[0] and "society" in table
    assert main(["runs", str(tmp_path / "runs")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and lines[2].startswith("a ") and lines[3].startswith("b ")


def test_the_runs_list_tells_nested_runs_apart(tmp_path: Path, capsys) -> None:
    """A sweep's points differ at the end of their names (the point's hash, then the
    experiment in it): cut at the end, every row of ``agentlab runs`` read
    ``p04/sweep_agent_count/agent…``. Long names are cut in the middle."""
    point = "sweep/agents=3_runs=1_scaling-agents=3_scaling-runs=1_seed={}-{}/topology_traffic"
    for seed, tag in ((0, "b9d1fdf0"), (1, "cb1284eb")):
        _society_like(tmp_path / "runs" / point.format(seed, tag), ticks=1)
    assert main(["runs", str(tmp_path / "runs")]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    names = [r.split("  ")[0] for r in rows]
    assert len(set(names)) == 2 and all("…" in n and len(n) == 60 for n in names), names
    assert "b9d1fdf0/topology_traffic" in names[0] and "cb1284eb/topology_traffic" in names[1]


def test_report_on_something_else_is_an_error(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "holds no run" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_report_on_a_sweep_compares_points(tmp_path: Path, capsys) -> None:
    sw = tmp_path / "sw"
    points = [{"agents": a, "seed": 0} for a in (3, 4)]
    pids = [f"agents={p['agents']}_seed=0-x" for p in points]
    sw.mkdir()
    (sw / "sweep.json").write_text(json.dumps({
        "notebook": "nb.ipynb", "points": [{"point_id": i, "params": p}
                                           for i, p in zip(pids, points, strict=True)]}))  # fmt: skip
    for i, pid in enumerate(pids):
        (sw / pid).mkdir()
        (sw / pid / "status.json").write_text(json.dumps({"status": "ok", "duration_s": 1.5}))
        (sw / pid / "results.jsonl").write_text(
            json.dumps({"kind": "value", "name": "burst_fraction", "value": 0.123456 * (i + 1)})
            + "\n"
        )
    out = tmp_path / "sweep.html"
    assert main(["report", str(sw), "--html", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2 points" in text and "burst_fraction" in text and "0.1235" in text
    assert "seed" not in text.splitlines()[1]  # a constant parameter is not a column
    assert "0.247" in out.read_text()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (12060, "12,060"),
        (0.123456789, "0.123"),
        (1.5e9, "1,500,000,000"),
        (None, "–"),
        (3931.25, "3,931"),
        (27308.5, "27,308"),
        (19.5, "19.5"),
    ],
)
def test_readable_numbers(value: object, text: str) -> None:
    assert fmt_num(value) == text


def _report_of_a_study(tmp_path: Path, capsys, model: str) -> tuple[str, str]:
    """``agentlab report --html`` of a 2-topology, 2-run study on ``model``: (text, page)."""
    import asyncio

    from agentlab.llm import LLMClient
    from agentlab.topology import Experiment

    out = tmp_path / "exp"
    exp = Experiment(topologies=["sequential", "star"], agents=3, runs=2, seed=0,
                     llm=LLMClient(model), clock="virtual", out=out, progress=False)  # fmt: skip
    asyncio.run(exp.run())
    page = tmp_path / "r.html"
    assert main(["report", str(out), "--html", str(page)]) == 0
    return capsys.readouterr().out, page.read_text()


def test_report_on_an_experiment_has_the_per_topology_table(tmp_path: Path, capsys) -> None:
    printed, html = _report_of_a_study(tmp_path, capsys, "sim/instant")
    assert "kind       topology_experiment" in printed
    # its runs, not "ticks" (its calls' tick column is a workflow round)
    assert "runs       4\n" in printed and "ticks" not in printed, printed
    # its callers are the experts and the orchestrator ("agents 4" read as four experts)
    assert "agents     4 (3 experts per run and the orchestrator)\n" in printed, printed
    assert '<div class="v">4</div><div class="l">runs</div>' in html
    assert "agents (3 experts per run and the orchestrator)</div>" in html
    table = html[html.index('id="by-topology"') : html.index("</table>", html.index("by-topology"))]
    assert "sequential" in table and "star" in table and "burst_fraction" in table
    assert "ttft_p50" in table  # as the printed table has it


def test_an_experiments_report_compares_its_topologies_and_names_its_slowest_runs(
    tmp_path: Path, capsys
) -> None:
    """A study's report drew only what any run's does (calls over time, latency pooled over
    topologies), and its slowest spans were ten rows of "experiment.run" naming no run.
    Now: the discussion's IATs by topology and the latency per stage by topology, and
    each slow span says where it ran."""
    printed, html = _report_of_a_study(tmp_path, capsys, "sim/vllm-3b")
    slow = printed[printed.index("slowest spans:") :].splitlines()[1:]
    runs = {f"{t}-{i:04d}" for t in ("sequential", "star") for i in range(2)}
    assert any(line.split()[-1] in runs for line in slow if "experiment.run" in line), slow
    heads = [h.split("</h2>")[0] for h in html.split("<h2>")[1:]]
    assert "Discussion inter-arrival times by topology" in heads, heads
    assert "LLM call latency by stage and topology" in heads, heads
    section = html[html.index("Discussion inter-arrival times by topology") :]
    assert '"name":"sequential"' in section and '"name":"star"' in section
    spans = html[html.index('id="slowest-spans"') :]
    assert "<th>where</th>" in spans and any(r in spans for r in runs)
    # calls over time on each run's own clock, per run of a topology: the log's clock laid
    # the runs end to end, one long "run"; the latency pooled over topologies is gone
    assert "LLM calls over a run, by topology" in heads, heads
    assert "LLM calls over time" not in heads and "LLM call latency" not in heads, heads


def test_calls_over_a_run_start_each_run_at_zero_and_count_per_run() -> None:
    import pandas as pd

    from agentlab.analysis.report_figures import calls_over_a_run

    calls = pd.DataFrame({  # star: two runs of 2 calls, a day apart; mesh: one run of 4
        "run_id": ["s0", "s0", "s1", "s1", "m0", "m0", "m0", "m0"],
        "topology": ["star"] * 4 + ["full_mesh"] * 4,
        "start": [100.0, 105.0, 86_500.0, 86_505.0, 50.0, 50.5, 51.0, 55.0],
    })  # fmt: skip
    fig = calls_over_a_run(calls)
    by = {t.name: t for t in fig.data}
    assert sorted(by["star"].x) == [0.0, 0.0, 5.0, 5.0]  # each run from its first call
    assert sum(by["star"].y) == 2 and sum(by["full_mesh"].y) == 4  # calls per run
    assert fig.layout.xaxis.title.text == "seconds since the run's first LLM call"


def test_long_durations_read_as_seconds_not_exponents() -> None:
    from agentlab.analysis.run_report import _seconds

    assert (_seconds(2934.2), _seconds(482.4), _seconds(0.25)) == ("2,934 s", "482 s", "250 ms")


def test_a_closed_pipe_ends_the_command_quietly(run_dir: Path) -> None:
    """``agentlab report RUN | head``: the reader closes its end; the command stops with
    128 + SIGPIPE and no traceback (it printed a BrokenPipeError traceback)."""
    import subprocess
    import sys

    _society_like(run_dir)
    proc = subprocess.Popen([sys.executable, "-m", "agentlab.cli", "report", str(run_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before it writes a byte
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and "Traceback" not in err and "Exception" not in err, err


def test_a_warning_on_the_command_line_is_one_line(run_dir: Path) -> None:
    """A warning reads ``agentlab report: warning: ...``, not Python's ``file.py:115:
    UserWarning: ...`` followed by the source line that raised it."""
    import os
    import subprocess
    import sys
    import time

    _society_like(run_dir)
    shard = next((run_dir / "replay" / "llm_calls").glob("*.jsonl"))
    with open(shard, "ab") as f:
        f.write(b'{"agent_id":"a9","tick":99,"sta')  # a crash mid-line: a torn last line
    old = time.time() - 60
    os.utime(shard, (old, old))
    proc = subprocess.run([sys.executable, "-m", "agentlab.cli", "report", str(run_dir)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("agentlab report: warning: ") for ln in lines), lines
    assert "torn last line" in lines[0] and "UserWarning" not in proc.stderr


def test_a_papers_report_counts_the_calls_of_its_runs(tmp_path: Path, capsys) -> None:
    """A paper (or sweep) makes no calls itself: its report said ``ticks 0``, ``agents
    0``, ``llm calls 0`` and ``model=None`` above the runs that made 1,063 calls."""
    paper = tmp_path / "paper"
    write_manifest(paper, kind="paper", config={"notebook": "nb.ipynb"}, seed=0)
    for name, ticks in (("one", 2), ("two", 3)):
        _society_like(paper / name, ticks=ticks)
    assert main(["report", str(paper)]) == 0
    out = capsys.readouterr().out
    assert "llm calls  20 in 2 runs (below)" in out, out
    assert "model=None" not in out and "ticks      0" not in out and "agents     0" not in out
    assert "  run      one  society" in out and "8 llm calls" in out and "12 llm calls" in out
    page = tmp_path / "html" / "report.html"
    assert main(["report", str(paper), "--html", str(page)]) == 0
    tiles = re.findall(
        r'<div class="v">([^<]*)</div><div class="l">([^<]*)</div>', page.read_text()
    )
    assert tiles[:2] == [("2", "runs"), ("20", "LLM calls")], tiles
    # its timings are its runs' (each call 123 ms): a table of them, not five "–" tiles
    # and an empty Datasets table (as before)
    assert not {label for _, label in tiles} & {"latency p50", "TTFT p50", "duration"}
    runs = re.search(r'<table id="runs">(.*?)</table>', page.read_text(), re.S)
    assert runs is not None and "Datasets" not in page.read_text()
    rows = re.findall(r"<tr><td>(\w+)</td>.*?</tr>", runs.group(1))
    assert rows == ["one", "two"] and runs.group(1).count("123 ms") == 4, runs.group(1)
    assert "12 llm calls  3 errors  latency p50 123 ms" in out, out


def test_an_unfinished_run_says_how_to_go_on(tmp_path: Path, capsys) -> None:
    """A stopped or killed experiment (or society) read "status interrupted" and nothing
    more; the report now names the call that continues it (``Experiment.open``)."""
    from agentlab.store.lifecycle import mark_status

    exp, par, soc = tmp_path / "exp", tmp_path / "par", tmp_path / "soc"
    write_manifest(exp, kind="topology_experiment", config={"parallel_runs": 1}, seed=0)
    write_manifest(par, kind="topology_experiment", config={"parallel_runs": 4}, seed=0)
    _society_like(soc)
    for d in (exp, par, soc):
        mark_status(d, "stopped")
    assert main(["report", str(exp)]) == 0
    assert f"status     stopped; Experiment.open({str(exp)!r}).run() runs the rest" in (
        capsys.readouterr().out)  # fmt: skip
    assert main(["report", str(par)]) == 0  # (runs in parallel continue too)
    assert f"Experiment.open({str(par)!r}).run() runs the rest" in capsys.readouterr().out
    assert main(["report", str(soc)]) == 0
    assert f"Society.open({str(soc)!r}) resumes it" in capsys.readouterr().out
    page = tmp_path / "r.html"
    assert main(["report", str(exp), "--html", str(page)]) == 0
    assert "Experiment.open(" in page.read_text()
