"""The per-topology traffic table of the paper: one row per topology, one column per metric."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from agentlab.analysis._frame import (
    By,
    as_by,
    iter_groups,
    percentile,
    require_columns,
    select_key,
)
from agentlab.analysis.iat import (
    DEFAULT_STAGE,
    DEFAULT_THRESHOLD,
    _check_threshold,
    _select_stage,
    call_rate_df,
    iat_df,
)
from agentlab.analysis.inflight import inflight_summary_df
from agentlab.errors import ConfigError

__all__ = ["STUDY_TRAFFIC", "STUDY_TRAFFIC_SECONDS", "traffic_summary_df"]


#: the columns of :func:`traffic_summary_df` a study's summary shows per topology: the
#: table ``agentlab experiment`` prints at its end, ``agentlab report`` and the run
#: browser's experiment page (those in seconds: :data:`STUDY_TRAFFIC_SECONDS`)
STUDY_TRAFFIC = ("calls_per_run", "tokens_per_run", "burst_fraction", "iat_median",
                 "latency_p50", "ttft_p50", "mean_in_flight")  # fmt: skip
STUDY_TRAFFIC_SECONDS = frozenset({"iat_median", "latency_p50", "ttft_p50"})


def traffic_summary_df(
    calls: pd.DataFrame,
    by: By = "topology",
    *,
    run: By = "run_id",
    stage: str | Sequence[str] | None = DEFAULT_STAGE,
    threshold: float = DEFAULT_THRESHOLD,
    start: str = "start",
    end: str = "end",
    first_token: str = "first_token",
    prompt: str = "prompt_tokens",
    completion: str = "completion_tokens",
    stage_col: str = "stage",
    definitions: str = "agentlab",
) -> pd.DataFrame:
    """One row per topology with the traffic metrics the paper tabulates.

    ``definitions="paper"`` returns the paper's Table 2 instead
    (:func:`~agentlab.analysis.paper.paper_summary_df`: every metric over the discussion
    window, discussion + synthesis calls; per-run means; call rate over the span of
    starts; ``stage`` is then ignored). With ``"agentlab"`` (default), what each column is
    computed over:

    - ``iat_*`` and ``burst_fraction``: IATs of the ``stage`` calls (default discussion),
      computed per run and pooled over the runs of the group.
    - ``runs``, ``calls_per_run``, ``stage_calls_per_run``, ``tokens_per_run``: means
      over runs; calls and tokens count every stage.
    - ``latency_*``, ``ttft_*``: percentiles over every call of every stage (TTFT skips
      calls without a first token).
    - ``call_rate``: mean over runs of calls / (last end - first start), all stages.
    - ``mean_in_flight`` / ``peak_in_flight``: mean over runs of the time-weighted mean /
      the peak of concurrent calls (see :mod:`agentlab.analysis.inflight`).

    Args:
        calls: the ``llm_calls`` DataFrame.
        by: grouping columns (default ``"topology"``).
        run: column(s) identifying a run within a group.
        stage: stage(s) whose arrivals give the IATs; ``None`` for all calls.
        threshold: burst threshold in seconds (strict ``<``).
        start, end, first_token, prompt, completion, stage_col: column names.
        definitions: ``"agentlab"`` or ``"paper"``.

    Returns:
        The table, one row per group.
    """
    if definitions == "paper":
        from agentlab.analysis.paper import paper_summary_df

        return paper_summary_df(calls, by, run=run, threshold=threshold, start=start, end=end,
                                first_token=first_token, prompt=prompt, completion=completion,
                                stage_col=stage_col)  # fmt: skip
    if definitions != "agentlab":
        raise ConfigError(f"definitions={definitions!r}: valid are 'agentlab', 'paper'")
    _check_threshold(threshold)
    keys, runs = as_by(by), as_by(run)
    run_key = [*keys, *runs]
    require_columns(calls, [*run_key, start, end, prompt, completion], "calls")
    if stage is not None:
        require_columns(calls, [stage_col], "calls")
    iats = iat_df(calls, stage=stage, by=run_key, start=start, stage_col=stage_col)
    rates = call_rate_df(calls, by=run_key, start=start, end=end)
    inflight = inflight_summary_df(calls, by=run_key, start=start, end=end)
    staged = _select_stage(calls, stage, stage_col)
    rows = []
    for key, sub in iter_groups(calls, keys):
        n_runs = int(sub[runs].drop_duplicates().shape[0]) if runs else 1
        x = select_key(iats, key)["iat"].to_numpy(dtype=float)
        lat = (sub[end] - sub[start]).to_numpy(dtype=float)
        ft = (
            sub[first_token].to_numpy(dtype=float)
            if first_token in sub
            else np.full(len(sub), np.nan)
        )
        ttft = ft - sub[start].to_numpy(dtype=float)
        tokens = sub[prompt].fillna(0).sum() + sub[completion].fillna(0).sum()
        infl = select_key(inflight, key)
        row: dict[str, Any] = {
            **key,
            "runs": n_runs,
            "calls_per_run": len(sub) / n_runs,
            "stage_calls_per_run": len(select_key(staged, key)) / n_runs,
            "iats": len(x),
            "iat_mean": float(x.mean()) if len(x) else math.nan,
            "iat_median": percentile(x, 50),
            "iat_p95": percentile(x, 95),
            "burst_fraction": float(np.mean(x < threshold)) if len(x) else math.nan,
            "latency_p50": percentile(lat, 50),
            "latency_p95": percentile(lat, 95),
            "ttft_p50": percentile(ttft, 50),
            "ttft_p95": percentile(ttft, 95),
            "tokens_per_run": float(tokens) / n_runs,
            "call_rate": float(select_key(rates, key)["call_rate"].mean()),
            "mean_in_flight": float(infl["mean_in_flight"].mean()),
            "peak_in_flight": float(infl["peak_in_flight"].mean()),
        }
        rows.append(row)
    return pd.DataFrame(rows)
