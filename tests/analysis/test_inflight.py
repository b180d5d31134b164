from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agentlab.analysis import inflight_summary_df, inflight_timeline_df, sweep_inflight


def _calls(intervals, run_id=1):
    return pd.DataFrame(
        {
            "topology": "t",
            "run_id": run_id,
            "start": [s for s, _ in intervals],
            "end": [e for _, e in intervals],
        }
    )


INTERVALS = [(0, 2), (1, 3), (2, 4), (5, 5), (5, 6)]


def test_sweep_half_open_intervals():
    t, level = sweep_inflight(np.array([0, 1, 2, 5, 5.0]), np.array([2, 3, 4, 5, 6.0]))
    # at t=2 one call ends and one starts: level stays 2, never 3;
    # the zero-length call at 5 is never in flight
    np.testing.assert_array_equal(t, [0, 1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(level, [1, 2, 2, 1, 0, 1, 0])


def test_back_to_back_calls_do_not_overlap():
    _, level = sweep_inflight(np.array([0.0, 1.0]), np.array([1.0, 2.0]))
    assert level.max() == 1


def test_unfinished_calls_are_ignored():
    t, level = sweep_inflight(np.array([0.0, 1.0]), np.array([2.0, np.nan]))
    np.testing.assert_array_equal(t, [0.0, 2.0])
    np.testing.assert_array_equal(level, [1, 0])


def test_timeline_df_per_run():
    df = pd.concat([_calls(INTERVALS, 1), _calls([(10, 12), (11, 12)], 2)])
    tl = inflight_timeline_df(df)
    run2 = tl[tl.run_id == 2]
    np.testing.assert_array_equal(run2.t_rel, [0, 1, 2])
    np.testing.assert_array_equal(run2.in_flight, [1, 2, 0])


def test_summary_mean_peak_busy():
    s = inflight_summary_df(_calls(INTERVALS)).iloc[0]
    assert s.calls == 5
    assert s.span_s == 6
    assert s.peak_in_flight == 2
    # time-weighted mean = total busy call-seconds / span = (2+2+2+0+1) / 6
    assert s.mean_in_flight == pytest.approx(7 / 6)
    # idle only on [4, 5)
    assert s.busy_fraction == pytest.approx(5 / 6)


def test_mean_equals_latency_sum_over_span_on_random_intervals():
    rng = np.random.default_rng(0)
    start = np.sort(rng.uniform(0, 100, 400))
    end = start + rng.exponential(3, 400)
    s = inflight_summary_df(_calls(list(zip(start, end, strict=True)))).iloc[0]
    assert s.mean_in_flight == pytest.approx((end - start).sum() / (end.max() - start.min()))
    # brute-force peak: max over starts of the number of intervals covering that instant
    peak = max(((start <= t) & (end > t)).sum() for t in start)
    assert s.peak_in_flight == peak
