"""``benchmarks/sandbox.py`` runs and reports both paths side by side (tiny size)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def test_sandbox_benchmark_reports_both_paths() -> None:
    spec = importlib.util.spec_from_file_location("bench_sandbox", ROOT / "benchmarks/sandbox.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = await mod.main(True, n=20)
    assert [r["concurrency"] for r in rows] == [1, 8]
    for r in rows:
        assert r["requests"] == 20 and r["inline_rps"] > 0 and r["isolated_rps"] > 0
        assert abs(r["isolated_over_inline"] - r["isolated_rps"] / r["inline_rps"]) < 0.01
