"""Widget models: society series, exact streaming IAT histograms, message normalisation."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from agentlab.errors import ConfigError
from agentlab.viz.conversation import ConversationModel
from agentlab.viz.iat import IATModel, otsu_threshold
from agentlab.viz.society_view import SERIES_COLUMNS, SocietyModel, decode_series
from tests.viz.conftest import timeline_row


def test_society_model_rates_totals_and_binary_series() -> None:
    m = SocietyModel()
    assert m.ingest([timeline_row(t) for t in range(5)])
    s = m.summary()
    assert s["tick"] == 4 and s["ticks"] == 5
    assert s["total_llm_calls"] == sum(20 + t for t in range(5))
    # real clock: per second of the tick's own wall time (0.5 s a tick), every tick
    assert s["calls_per_s"] == pytest.approx((20 + 4) / 0.5)
    assert s["clock_s"] == pytest.approx(2.5)
    assert s["mean_steps_per_s"] == pytest.approx(50 / 2.5)
    assert m.journal.items[0][SERIES_COLUMNS.index("calls_per_s")] == pytest.approx(20 / 0.5)
    frame = m.frame()
    arr = decode_series(frame["series_base"])
    assert arr.shape == (5, len(SERIES_COLUMNS))
    assert list(arr[:, SERIES_COLUMNS.index("tick")]) == [0, 1, 2, 3, 4]
    assert list(arr[:, 0]) == [0, 1, 2, 3, 4]  # merge key k
    # the next frame within the snapshot interval carries only the delta
    m.ingest([timeline_row(5)])
    frame = m.frame()
    assert "series_base" not in frame
    assert list(decode_series(frame["series_delta"])[:, 1]) == [5]


def test_rates_leave_out_the_time_between_runs() -> None:
    """A real-clock society ran 3 ticks, sat 30 s (paused, stopped, before *start* was
    pressed again, or reopened the next day), then ran 2 more. The rates took each tick's
    duration from the gap between commits, idle time included: tick 4 read 0.12
    agent-steps/s for 2 steps/s of work, the headline mean 0.42 for 1.87. A tick's rate
    is its work's: ``wall_s``."""
    ts, rows = 1000.0, []
    for tick, (wall, idle) in enumerate([(2.0, 0), (2.0, 0), (2.1, 0), (2.0, 30), (1.9, 0)], 1):
        ts += idle + wall + 0.01
        rows.append(timeline_row(tick, ts=ts, wall_s=wall, steps=4, llm_calls=8))
    m = SocietyModel()
    m.ingest(rows)
    arr = decode_series(m.frame(force_snapshot=True)["series_base"])
    steps_s = arr[:, SERIES_COLUMNS.index("steps_per_s")]
    assert list(steps_s) == pytest.approx([4 / 2.0, 4 / 2.0, 4 / 2.1, 4 / 2.0, 4 / 1.9])
    s = m.summary()
    assert s["clock_s"] == pytest.approx(10.0)
    assert s["mean_steps_per_s"] == pytest.approx(20 / 10.0)
    assert s["mean_calls_per_s"] == pytest.approx(40 / 10.0)


def test_virtual_clock_rates_are_per_simulated_second_from_tick_one() -> None:
    """Under the virtual clock ``wall_s`` is the host's time to compute a tick; its rate is
    per simulated second: the gap to the previous commit (the clock passes only while a
    tick runs), tick 1's from the clock's start, 0."""
    m = SocietyModel(virtual=True)
    m.ingest([timeline_row(t, ts=2.0 * t, wall_s=0.01, steps=4) for t in (1, 2, 3)])
    arr = decode_series(m.frame(force_snapshot=True)["series_base"])
    assert list(arr[:, SERIES_COLUMNS.index("steps_per_s")]) == pytest.approx([2.0] * 3)
    assert m.summary()["clock_s"] == pytest.approx(6.0)
    # ticks that took no clock time have no rate (and the chart says why)
    flat = SocietyModel(virtual=True)
    flat.ingest([timeline_row(t, ts=0.0) for t in (1, 2)])
    assert all(math.isnan(v) for v in decode_series(flat.frame()["series_base"])[:, -1])
    assert flat.summary()["mean_calls_per_s"] is None


def test_society_model_carries_each_ticks_mean_latency() -> None:
    """The live view's latency chart: the timeline's ``latency_mean_s``, tick by tick, in the
    binary series and the last tick's in the summary; a tick without it is NaN (an older
    run's rows)."""
    m = SocietyModel()
    rows = [{**timeline_row(t), "latency_mean_s": 1.5 + t} for t in range(3)]
    m.ingest([*rows, timeline_row(3)])
    arr = decode_series(m.frame(force_snapshot=True)["series_base"])
    lat = arr[:, SERIES_COLUMNS.index("latency_mean_s")]
    assert list(lat[:3]) == [1.5, 2.5, 3.5] and math.isnan(lat[3])
    m.ingest([{**timeline_row(4), "latency_mean_s": 0.25}])
    assert m.summary()["latency_mean_s"] == 0.25


def test_society_model_tolerates_missing_columns() -> None:
    m = SocietyModel()
    m.ingest([{"tick": 1}])
    s = m.summary()
    assert s["tick"] == 1 and s["steps_per_s"] is None
    json.dumps(s)  # JSON-safe (NaN became None)


def _reference_counts(model: IATModel, starts: list[float]) -> np.ndarray:
    gaps = np.diff(np.sort(starts))
    out = np.zeros(model.n_bins)
    for g in gaps:
        out[model._bin(float(g))] += 1
    return out


def test_iat_histogram_is_exact_for_out_of_order_arrivals() -> None:
    rng = random.Random(3)
    starts = list(np.cumsum([rng.expovariate(2.0) for _ in range(400)]))
    shuffled = starts[:]
    rng.shuffle(shuffled)  # calls finish (and land in the log) out of start order
    m = IATModel(group_by="stage")
    m.ingest([{"start": s, "stage": "a"} for s in shuffled])
    np.testing.assert_array_equal(m.counts()[0], _reference_counts(m, starts))
    assert m.counts().sum() == len(starts) - 1


def test_iat_groups_zero_gaps_and_bad_rows() -> None:
    m = IATModel(group_by="topology")
    m.ingest(
        [
            {"start": 1.0, "topology": "star"},
            {"start": 1.0, "topology": "star"},  # virtual clock: identical starts
            {"start": 2.0, "topology": "chain"},
            {"start": "x", "topology": "chain"},
            {"topology": "chain"},
        ]
    )
    assert list(m.groups) == ["star", "chain"]
    assert m.counts()[0, 0] == 1 and m.counts()[1].sum() == 0
    with pytest.raises(ConfigError, match="group_by"):
        IATModel(group_by="colour")


def test_otsu_threshold_splits_bimodal_bursts() -> None:
    rng = np.random.default_rng(0)
    m = IATModel(group_by=None)
    t, starts = 0.0, []
    for _ in range(60):  # bursts of 10 calls ~1 ms apart, bursts ~10 s apart
        t += rng.exponential(10.0)
        for _ in range(10):
            t += rng.exponential(0.001)
            starts.append(t)
    m.ingest([{"start": s} for s in starts])
    thr = m.thresholds()[0]
    assert thr is not None and 0.005 < thr < 2.0
    assert otsu_threshold(np.zeros(10), m.edges) is None


def test_iat_fits_expected_counts_match_totals() -> None:
    rng = np.random.default_rng(1)
    m = IATModel(group_by=None)
    m.ingest([{"start": s} for s in np.cumsum(rng.lognormal(-2, 0.5, 2000))])
    fits = m.fits()
    n = m.counts().sum()
    assert fits["lognormal"][0].sum() == pytest.approx(n, rel=0.01)
    # the lognormal fit puts its mass where the data is
    peak_fit = int(np.argmax(fits["lognormal"][0]))
    peak_data = int(np.argmax(m.counts()[0]))
    assert abs(peak_fit - peak_data) <= 2
    assert math.isfinite(fits["exponential"][0].sum())


def test_conversation_model_normalises_blocks_and_tool_calls() -> None:
    m = ConversationModel()
    payload = '<img src=x onerror="window.__pwned=1">'
    m.ingest(
        [
            {
                "msg_id": "m1",
                "sender": "alice",
                "receivers": json.dumps(["bob"]),
                "hub": "town",
                "role": "assistant",
                "content": payload,
                "blocks": json.dumps(
                    [
                        {"type": "text", "text": payload},
                        {"type": "tool_use", "name": "vote", "input": {"yes": True}},
                    ]
                ),
                "tool_calls": [{"function": {"name": "post", "arguments": '{"x": 1}'}}],
                "tick": 3,
            },
            {"sender": "bob", "content": "x" * 10_000},
        ]
    )
    frame = m.frame()
    a, b = frame["msgs_base"]
    assert a["content"] == payload  # kept as text; the browser renders it as text
    assert a["receivers"] == ["bob"] and a["hub"] == "town"
    assert [(x["kind"], x["name"]) for x in a["blocks"]] == [
        ("tool_use", "vote"),
        ("tool_call", "post"),
    ]
    assert a["blocks"][0]["text"] == '{"yes": true}'
    assert len(b["content"]) == 4000 and b["hub"] == "(direct)"
    assert frame["facets"]["hubs"] == {"town": 1, "(direct)": 1}
    assert frame["total"] == 2 and [x["k"] for x in (a, b)] == [0, 1]
