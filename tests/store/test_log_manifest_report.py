"""Run manifest contents and the ``agentlab report`` command."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from agentlab.store import ReplaySink, Tracer, finish_manifest, read_manifest, write_manifest
from agentlab.store.report import main, summarize_run


@dataclasses.dataclass
class _Cfg:
    model: str = "sim/vllm-3b"
    agents: int = 3


def test_manifest_contents_and_resume(run_dir: Path) -> None:
    doc = write_manifest(run_dir, kind="society", config=_Cfg(), seed=7, params={"ticks": 2})
    on_disk = json.loads((run_dir / "run.json").read_text())
    assert on_disk == doc
    assert doc["schema_version"] == 1 and doc["kind"] == "society" and doc["seed"] == 7
    assert doc["config"] == {"model": "sim/vllm-3b", "agents": 3} and doc["params"] == {"ticks": 2}
    assert doc["model"] == "sim/vllm-3b"
    assert doc["python"] == ".".join(map(str, sys.version_info[:3]))
    assert doc["agentlab_version"] and doc["dependencies"]["duckdb"]
    assert doc["git"] is None or len(doc["git"]["revision"]) == 40
    assert doc["status"] == "running" and doc["ended"] is None
    again = write_manifest(run_dir, kind="society", config=_Cfg(), seed=7)
    assert again["created"] == doc["created"] and len(again["starts"]) == 2
    done = finish_manifest(run_dir, "ok")
    assert done["status"] == "ok" and done["ended"] and read_manifest(run_dir) == done


def test_report_summary_and_html(run_dir: Path, tmp_path: Path, capsys) -> None:
    write_manifest(run_dir, kind="society", config={"model": "sim/x"}, seed=1)
    sink, tracer = ReplaySink(run_dir, shard="s"), Tracer(run_dir, shard="s")
    for tick in range(3):
        with tracer.trace_span("tick", tick=tick):
            sink.extend("llm_calls", [
                {"agent_id": f"a{i}", "tick": tick, "start": 1.0 * i, "end": 2.0 * i + 1,
                 "prompt_tokens": 10, "completion_tokens": 5, "outcome": "ok" if i else "timeout"}
                for i in range(4)
            ])  # fmt: skip
        sink.append("timeline", {"tick": tick, "ts": float(tick), "llm_calls": 4})
    sink.flush()
    s = summarize_run(run_dir)
    assert (s["ticks"], s["agents"], s["llm_calls"]) == (3, 4, 12)
    assert s["tokens"] == {"prompt_tokens": 120, "completion_tokens": 60, "total": 180}
    assert s["errors"]["llm_calls"] == 3 and len(s["slowest_spans"]) == 3
    out = tmp_path / "report.html"
    assert main(argparse.Namespace(run=str(run_dir), html=str(out))) == 0
    printed = capsys.readouterr().out
    assert "llm calls  12" in printed and "tick" in printed
    page = out.read_text()
    # plotly.js is inlined (works offline): no external script, and the library is there
    assert "<script src=" not in page and len(page) > 1_000_000
    assert page.count("Plotly.newPlot") >= 3
