from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from agentlab.analysis import (
    backend_summary_df,
    latency_df,
    message_bytes_df,
    process_summary_df,
    tokens_per_run_df,
    traffic_summary_df,
)
from agentlab.errors import ConfigError


def test_latency_and_ttft_percentiles(timeline_calls):
    out = latency_df(timeline_calls).set_index("topology")
    star = timeline_calls[timeline_calls.topology == "star"]
    lat = star.end - star.start
    assert out.loc["star", "calls"] == 10
    assert out.loc["star", "latency_p50"] == pytest.approx(np.percentile(lat, 50))
    assert out.loc["star", "latency_p95"] == pytest.approx(np.percentile(lat, 95))
    # one star call has no first token: TTFT over the other 9, all exactly 0.1
    assert out.loc["star", "ttft_calls"] == 9
    assert out.loc["star", "ttft_p95"] == pytest.approx(0.1)
    assert out.loc["mesh", "queue_wait_mean"] == 0.0


def test_latency_by_stage_and_optional_columns(timeline_calls):
    out = latency_df(timeline_calls.drop(columns=["first_token", "queue_wait"]), by=["stage"])
    assert set(out.stage) == {"discussion", "execution"}
    assert out.ttft_p50.isna().all()
    assert out.set_index("stage").loc["execution", "latency_mean"] == pytest.approx(0.4)


def test_tokens_per_run(timeline_calls):
    calls = timeline_calls.copy()
    calls.loc[calls.request_id == "s1-1", "prompt_tokens"] = 100
    out = tokens_per_run_df(calls).set_index(["topology", "run_id"])
    assert out.loc[("star", 1), "calls"] == 7
    assert out.loc[("star", 1), "prompt_tokens"] == 6 * 10 + 100
    assert out.loc[("star", 1), "total_tokens"] == 6 * 10 + 100 + 7 * 5


def test_message_bytes_per_directed_pair():
    msgs = pd.DataFrame(
        {
            "topology": ["star"] * 4,
            "run_id": [1] * 4,
            "stage": ["discussion"] * 4,
            "sender": ["a", "a", "b", "a"],
            "receivers": [["b", "c"], json.dumps(["b"]), "a", np.array(["c"])],
            "content": ["héllo", "xy", None, "z"],
        }
    )
    out = message_bytes_df(msgs).set_index(["sender", "receiver"])
    assert out.loc[("a", "b"), "messages"] == 2
    assert out.loc[("a", "b"), "bytes"] == 6 + 2  # é is two bytes in UTF-8
    assert out.loc[("a", "c"), "bytes"] == 6 + 1
    assert out.loc[("b", "a"), "bytes"] == 0
    assert out["bytes"].iloc[0] == out["bytes"].max()  # sorted by bytes, largest first
    with pytest.raises(ConfigError, match="content"):
        message_bytes_df(msgs.drop(columns=["content"]))


def test_backend_and_process_layers():
    server = pd.DataFrame(
        {
            "ts": [0.0, 1.0, 2.0, 0.0, 1.0],
            "requests_running": [1, 3, 2, 4, 4],
            "requests_waiting": [0, 2, 0, 1, 3],
            "prompt_tokens_per_s": [100.0, 300.0, 200.0, 0.0, 50.0],
            "generation_tokens_per_s": [10.0, 30.0, 20.0, 5.0, 5.0],
            "topology": ["star"] * 3 + ["mesh"] * 2,
            "run_id": [1, 1, 1, 1, 1],
        }
    )
    out = backend_summary_df(server).set_index("topology")
    assert out.loc["star", "requests_running_mean"] == pytest.approx(2.0)
    assert out.loc["star", "requests_running_peak"] == 3
    assert out.loc["mesh", "requests_waiting_peak"] == 3
    assert out.loc["star", "duration_s"] == 2.0
    proc = pd.DataFrame(
        {"ts": [0.0, 1.0], "cpu_percent": [50.0, 150.0], "rss_bytes": [2**20, 3 * 2**20]}
    )
    p = process_summary_df(proc).iloc[0]
    assert p.cpu_percent_mean == 100.0
    assert p.rss_mb_peak == 3.0
    assert p.rss_mb_mean == 2.0
    with pytest.raises(ConfigError, match="rss_bytes"):
        process_summary_df(proc.drop(columns=["rss_bytes"]))


def test_traffic_summary_table(timeline_calls):
    table = traffic_summary_df(timeline_calls).set_index("topology")
    star = table.loc["star"]
    assert star.runs == 2
    assert star.calls_per_run == 10 / 2
    assert star.stage_calls_per_run == 9 / 2
    star_iats = np.array([0.01, 0.01, 0.98, 0.03, 1.97, 0.0, 2.0])
    assert star.iats == 7
    assert star.iat_mean == pytest.approx(star_iats.mean())
    assert star.iat_median == pytest.approx(np.median(star_iats))
    assert star.iat_p95 == pytest.approx(np.percentile(star_iats, 95))
    assert star.burst_fraction == pytest.approx(4 / 7)
    assert star.tokens_per_run == pytest.approx(10 * 15 / 2)
    # call rate: run 1 has 7 calls over 4 s, run 2 has 3 calls over 2.5 s
    assert star.call_rate == pytest.approx((7 / 4 + 3 / 2.5) / 2)
    assert star.ttft_p50 == pytest.approx(0.1)
    mesh = table.loc["mesh"]
    # mesh: three calls all ending at 1.0 -> busy call-seconds 1 + 0.75 + 0.5 over 1 s
    assert mesh.mean_in_flight == pytest.approx(2.25)
    assert mesh.peak_in_flight == 3
    assert mesh.burst_fraction == 0.0
    expected = {
        "iat_mean", "iat_median", "iat_p95", "burst_fraction", "calls_per_run", "latency_p50",
        "latency_p95", "ttft_p50", "ttft_p95", "tokens_per_run", "call_rate", "mean_in_flight",
    }  # fmt: skip
    assert expected <= set(table.columns)


def test_traffic_summary_names_missing_columns(timeline_calls):
    with pytest.raises(ConfigError, match="prompt_tokens"):
        traffic_summary_df(timeline_calls.drop(columns=["prompt_tokens"]))


def test_message_bytes_join_topology_from_runs_and_bytes_column():
    # the topology recorder's rows carry run_id and a precomputed size, not the topology
    msgs = pd.DataFrame(
        {
            "run_id": ["r1", "r1", "r2"],
            "sender": ["a", "b", "a"],
            "receivers": [["b"], ["a"], ["b", "c"]],
            "bytes": [10, 4, 7],
        }
    )
    runs = pd.DataFrame({"run_id": ["r1", "r1", "r2"], "topology": ["star", "star", "mesh"]})
    out = message_bytes_df(msgs, runs=runs).set_index(["topology", "sender", "receiver"])
    assert out.loc[("star", "a", "b"), "bytes"] == 10
    assert out.loc[("mesh", "a", "c"), "bytes"] == 7
    assert len(out) == 4
    with pytest.raises(ConfigError, match="topology"):
        message_bytes_df(msgs)


def test_backend_accepts_vllm_names_and_derives_rates_from_totals():
    server = pd.DataFrame(
        {
            "ts": [0.0, 1.0, 2.0, 4.0],
            "topology": "star",
            "num_requests_running": [0, 4, 2, 1],
            "num_requests_waiting": [0, 1, 0, 0],
            "prompt_tokens_total": [0, 100, 300, 400],
            "generation_tokens_per_s": [0.0, 20.0, 40.0, 30.0],
        }
    )
    row = backend_summary_df(server).iloc[0]
    assert row.requests_running_peak == 4
    assert row.requests_waiting_mean == pytest.approx(0.25)
    # rates from the counter: 100/1, 200/1, 100/2
    assert row.prompt_tokens_per_s_peak == pytest.approx(200.0)
    assert row.prompt_tokens_per_s_mean == pytest.approx((100 + 200 + 50) / 3)
    assert "in_flight_mean" not in row.index  # absent metrics are simply left out
    with pytest.raises(ConfigError, match="in_flight"):
        backend_summary_df(server, metrics=["in_flight"])
