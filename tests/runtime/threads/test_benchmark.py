"""``benchmarks/suspended_agents.py`` runs with both models (tiny sizes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_sa", ROOT / "benchmarks/suspended_agents.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("model", "store"), [("scripted", "memory"), ("sim", "memory"), ("scripted", "sqlite")]
)
async def test_benchmark_config_runs_and_reports(model: str, store: str, tmp_path: Path) -> None:
    rows = await _bench().run_config(model, store, 2, 6, 2, tmp_path)
    assert [r["agents"] for r in rows] == [6, 12]
    for r in rows:
        assert r["model"] == model and r["turns"] == 2
        assert r["completions"] == 6 * 2 * 2  # two completions per turn
        assert r["raw_history_kib"] > 1 and r["completions_per_cpu_s"] > 0
        assert r["swap_total_kib"] >= 0 and r["vm_rss_kib"] > 0
        # the collector's CPU is a part of the turns' CPU, in the same (process) clock
        assert 0 <= r["gc_cpu_s"] <= r["cpu_s"]


def test_gc_time_sums_the_collections_it_sees() -> None:
    import gc

    timer = _bench()._GCTime()
    gc.callbacks.append(timer)
    try:
        gc.collect()
        gc.collect()
    finally:
        gc.callbacks.remove(timer)
    assert timer.collections == 2 and timer.cpu_s > 0


def test_unknown_model_is_rejected() -> None:
    with pytest.raises(SystemExit, match="valid: scripted, sim"):
        _bench().make_model("gpt")
