"""Calibrate on the shipped real trace at one concurrency level, predict the others.

The trace (``datasets/real_smollm2_llamacpp_trace.csv``, recorded with
``scripts/record_real_trace.py`` against ``scripts/real_server.py``: SmolLM2-135M on
llama-cpp-cffi, one decoding slot, 1 thread, on the shared 2-core box) needs no server, so
this runs in the ordinary suite. The fit uses only the concurrency-1 calls; the other
levels are predicted by replaying their recorded arrivals through the fitted engine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agentlab.analysis.calibrate import fit_calibration, predict_calls

TRACE = Path(__file__).resolve().parents[2] / "datasets" / "real_smollm2_llamacpp_trace.csv"
TOLERANCE = 0.15


def prediction_table(calls: pd.DataFrame, reps: int = 20) -> tuple[pd.DataFrame, object]:
    """p50/p95 of TTFT and latency per concurrency level, observed vs predicted.

    Fitted on the concurrency-1 calls only. Each (round, level) block is a closed-loop
    episode (its clients wait for their answers), replayed on a fresh server with every
    client's calls chained on predicted ends; predicted percentiles pool ``reps`` replays
    with different decode-speed draws, so they are the model's, not one draw's.
    """
    train = (calls["concurrency"] == 1).to_numpy()
    by = ["round", "concurrency"]
    cal = fit_calibration(calls, slots=1, train=train, by=by, client="client", n_boot=50)
    reps_df = [
        predict_calls(cal.profile, calls, by=by, client="client", seed=s) for s in range(reps)
    ]
    pooled = pd.concat(reps_df)
    rows = []
    for c in sorted(calls["concurrency"].unique()):
        obs_c = calls[calls["concurrency"] == c]
        pred_c = pooled[pooled["concurrency"] == c]
        for metric, first in (("ttft", "first_token"), ("latency", "end")):
            o = (obs_c[first] - obs_c["start"]).to_numpy()
            pv_all = pred_c[f"{metric}_pred"].to_numpy()
            for q in (50, 95):
                ov, pv = float(np.percentile(o, q)), float(np.percentile(pv_all, q))
                rows.append({"concurrency": c, "metric": metric, "pct": q, "observed_s": ov,
                             "predicted_s": pv, "rel_err": (pv - ov) / ov})  # fmt: skip
    return pd.DataFrame(rows), cal


def test_trace_is_small_and_complete() -> None:
    assert TRACE.stat().st_size < 300_000
    calls = pd.read_csv(TRACE)
    assert set(calls["concurrency"]) >= {1, 2, 4}
    assert calls["first_token"].notna().all() and (calls["outcome"] == "ok").all()
    assert calls.groupby("concurrency").size().min() >= 12


def test_held_out_concurrency_levels_within_tolerance() -> None:
    calls = pd.read_csv(TRACE)
    table, cal = prediction_table(calls)
    print(cal.report())  # type: ignore[attr-defined]
    print(table.round(3).to_string(index=False))
    held = table[table["concurrency"] != 1]
    worst = held.loc[held["rel_err"].abs().idxmax()]
    assert (held["rel_err"].abs() <= TOLERANCE).all(), dict(worst)


def test_builtin_smollm2_cpu_profile_is_this_calibration() -> None:
    from agentlab.llm import get_profile

    calls = pd.read_csv(TRACE)
    _, cal = prediction_table(calls, reps=1)
    fitted, builtin = cal.profile, get_profile("smollm2-cpu")  # type: ignore[attr-defined]
    for k in ("slots", "prefill_tps", "decode_tps", "decode_jitter", "overhead_s"):
        assert getattr(builtin, k) == pytest.approx(getattr(fitted, k), rel=0.01, abs=1e-3), k
    assert "real_smollm2_llamacpp_trace" in builtin.source
