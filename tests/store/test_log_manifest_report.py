"""Run manifest contents (the report moved to ``tests/analysis/test_run_report.py``)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from agentlab.store import finish_manifest, read_manifest, write_manifest


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


def test_the_model_of_a_config_naming_its_llm_by_string(tmp_path: Path) -> None:
    """``config={"llm": "sim/instant"}`` (notebook 03's werewolf run): the manifest's model
    is that string (the report said ``model=None``); a client's config keeps its key."""
    doc = write_manifest(tmp_path / "a", kind="werewolf", config={"llm": "sim/instant"}, seed=0)
    assert doc["model"] == "sim/instant"
    doc = write_manifest(tmp_path / "b", kind="society", config={"llm": {"model": "sim/x"}},
                         seed=0)  # fmt: skip
    assert doc["model"] == "sim/x"
