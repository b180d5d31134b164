"""Helpers for the viz tests: write replay rows the way a running society does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


class LogWriter:
    """Appends whole JSON lines to ``<run>/replay/<dataset>/<shard>.jsonl``."""

    def __init__(self, run_dir: Path, shard: str = "test-1") -> None:
        self.run_dir = run_dir
        self.shard = shard
        self.seq: dict[str, int] = {}

    def write(self, dataset: str, rows: list[dict[str, Any]], *, torn: str = "") -> None:
        folder = self.run_dir / "replay" / dataset
        folder.mkdir(parents=True, exist_ok=True)
        lines = []
        for r in rows:
            n = self.seq.get(dataset, 0)
            self.seq[dataset] = n + 1
            lines.append(json.dumps({**r, "_shard": self.shard, "_seq": n}) + "\n")
        with open(folder / f"{self.shard}.jsonl", "a") as f:
            f.write("".join(lines) + torn)


@pytest.fixture()
def log(run_dir: Path) -> LogWriter:
    return LogWriter(run_dir)


def timeline_row(tick: int, **over: Any) -> dict[str, Any]:
    row = {
        "tick": tick,
        "ts": 100.0 + tick,
        "agents": 10,
        "steps": 10,
        "llm_calls": 20 + tick,
        "tokens": 1000 + 10 * tick,
        "errors": tick % 2,
        "wall_s": 0.5,
        "aimd_limit": 16 + tick,
        "in_flight": 3,
    }
    row.update(over)
    return row
