"""The re-run check of a fitted profile: medians per kind of reply, and the CDF figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agentlab.analysis import rerun_comparison_df, rerun_figure


def _calls(n_text: int, n_tool: int, text_len: float, scale: float) -> pd.DataFrame:
    rng = np.random.default_rng(n_text)
    reason = ["stop"] * n_text + ["tool_calls"] * n_tool
    reply = [text_len] * n_text + [17.0] * n_tool
    lat = rng.lognormal(0.0, 0.3, n_text + n_tool) * scale
    return pd.DataFrame({"finish_reason": reason, "completion_tokens": reply,
                         "prompt_tokens": 1000, "latency": lat, "ttft": lat / 4,
                         "outcome": "ok"})  # fmt: skip


def test_medians_are_compared_per_kind_of_reply_not_pooled() -> None:
    # the same server (each kind's length equal) but another mix of tool calls and text:
    # pooled, the reply median moves from text-sized to tool-sized
    recorded, rerun = _calls(60, 40, 120.0, 1.0), _calls(40, 60, 120.0, 1.0)
    check = rerun_comparison_df(recorded, rerun).set_index(["group", "metric"])
    assert check.loc[("stop", "completion_tokens"), "diff"] == 0.0
    assert check.loc[("tool_calls", "completion_tokens"), "diff"] == 0.0
    assert check.loc[("stop", "completion_tokens"), "calls_rerun"] == 40
    pooled = rerun_comparison_df(recorded, rerun, by=None).set_index("metric")
    assert pooled.loc["completion_tokens", "recorded"] == 120.0
    assert pooled.loc["completion_tokens", "rerun"] == 17.0
    # a slower fitted server shows in the latency rows; failed calls are left out
    slow = pd.concat(
        [_calls(60, 40, 120.0, 1.5), _calls(5, 0, 1.0, 99.0).assign(outcome="timeout")]
    )
    lat = rerun_comparison_df(recorded, slow).set_index(["group", "metric"])
    assert lat.loc[("stop", "latency"), "diff"] == pytest.approx(0.5, abs=0.15)
    assert lat.loc[("stop", "latency"), "calls_rerun"] == 60
    # frames without finish_reason (runs recorded before it was kept): all calls together
    old = rerun_comparison_df(recorded.drop(columns="finish_reason"), rerun)
    assert set(old.group) == {"all calls"} and "cached_tokens" not in set(old.metric)


def test_the_figure_sets_the_two_cdfs_side_by_side_on_log_time() -> None:
    fig = rerun_figure(_calls(30, 20, 120.0, 1.0), _calls(30, 20, 120.0, 2.0))
    names = [(t.name, t.line.dash) for t in fig.data]
    assert names == [("recorded", "solid"), ("re-run", "dash")] * 2
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis2.type == "log"
    assert fig.layout.xaxis.tickvals  # decade ticks in seconds, not plotly's 10^x
    ys = fig.data[0].y
    assert ys[0] == pytest.approx(1 / 50) and ys[-1] == 1.0
