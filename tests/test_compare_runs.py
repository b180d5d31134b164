"""scripts/compare_runs.py: what it forgives (pid-named shards, row order, wall-clock
fields) and what it does not (any other byte)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_runs.py"


@pytest.fixture(scope="module")
def cr() -> Any:
    spec = importlib.util.spec_from_file_location("compare_runs", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(root: Path, pid: int, rows: list[dict[str, Any]], created: str, note: str = "x") -> Path:
    shard = f"host-{pid}"
    d = root / "replay" / "llm_calls"
    d.mkdir(parents=True)
    lines = [json.dumps({"_shard": shard, **r, "_seq": i}) for i, r in enumerate(rows)]
    (d / f"{shard}.jsonl").write_text("\n".join(lines) + "\n")
    (root / "run.json").write_text(json.dumps({"created": created, "seed": 1, "note": note}))
    (root / "WRITER.lock").write_text(str(pid))
    return root


ROWS = [
    {"agent_id": "a", "wall_s": 0.1, "tokens": 3},
    {"agent_id": "b", "wall_s": 0.2, "tokens": 4},
]


def test_pid_shards_row_order_and_wall_clock_fields_are_forgiven(cr: Any, tmp_path: Path) -> None:
    a = _run(tmp_path / "a", 11, ROWS, "2026-01-01")
    moved = [{**ROWS[1], "wall_s": 9.0}, {**ROWS[0], "wall_s": 8.0}]
    b = _run(tmp_path / "b", 22222, moved, "2026-02-02")
    assert cr.compare(a, b) == 0


def test_any_other_difference_is_listed(cr: Any, tmp_path: Path, capsys: Any) -> None:
    a = _run(tmp_path / "a", 11, ROWS, "2026-01-01")
    b = _run(tmp_path / "b", 22, [ROWS[0], {**ROWS[1], "tokens": 5}], "2026-01-01", note="y")
    (b / "extra.txt").write_text("?")
    assert cr.compare(a, b) == 3
    out = capsys.readouterr().out
    assert "DIFFERS: replay/llm_calls/<shard>.jsonl" in out
    assert "DIFFERS: run.json" in out and "ONLY IN B: extra.txt" in out
