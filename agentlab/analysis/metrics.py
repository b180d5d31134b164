"""Per-call, per-run and per-layer traffic metrics: latency, TTFT, tokens, message bytes,
backend (LLM server) and process (CPU, RSS) samples.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from agentlab.analysis._frame import By, as_by, iter_groups, percentile, require_columns
from agentlab.analysis.iat import DEFAULT_BY

__all__ = [
    "backend_summary_df",
    "latency_df",
    "message_bytes_df",
    "process_summary_df",
    "tokens_per_run_df",
]


def latency_df(
    calls: pd.DataFrame,
    by: By = "topology",
    *,
    percentiles: Sequence[float] = (50, 95, 99),
    start: str = "start",
    end: str = "end",
    first_token: str = "first_token",
    queue_wait: str = "queue_wait",
) -> pd.DataFrame:
    """Latency, time to first token (TTFT) and queue-wait percentiles per group.

    Latency is ``end - start``; TTFT is ``first_token - start`` (calls without a first
    token — failures, non-streamed real calls — are skipped for TTFT only). Missing
    ``first_token``/``queue_wait`` columns give NaN columns rather than an error.

    Returns:
        One row per group: ``calls``, ``ttft_calls``, ``latency_mean``,
        ``latency_p<q>``, ``ttft_mean``, ``ttft_p<q>``, ``queue_wait_mean``,
        ``queue_wait_p<q>`` for each q in ``percentiles`` (linear interpolation).
    """
    keys = as_by(by)
    require_columns(calls, [*keys, start, end], "calls")
    rows = []
    for key, sub in iter_groups(calls, keys):
        s = sub[start].to_numpy(dtype=float)
        series = {"latency": sub[end].to_numpy(dtype=float) - s}
        ft = (
            sub[first_token].to_numpy(dtype=float)
            if first_token in sub
            else np.full(len(s), np.nan)
        )
        series["ttft"] = ft - s
        series["queue_wait"] = (
            sub[queue_wait].to_numpy(dtype=float) if queue_wait in sub else np.full(len(s), np.nan)
        )
        row: dict[str, Any] = {**key, "calls": len(sub), "ttft_calls": int(np.isfinite(ft).sum())}
        for name, x in series.items():
            fin = x[np.isfinite(x)]
            row[f"{name}_mean"] = float(fin.mean()) if len(fin) else math.nan
            for q in percentiles:
                row[f"{name}_p{q:g}"] = percentile(x, q)
        rows.append(row)
    return pd.DataFrame(rows)


def tokens_per_run_df(
    calls: pd.DataFrame,
    by: By = DEFAULT_BY,
    *,
    prompt: str = "prompt_tokens",
    completion: str = "completion_tokens",
) -> pd.DataFrame:
    """Calls and prompt/completion/total tokens per run.

    Returns:
        One row per run: the ``by`` columns, ``calls``, ``prompt_tokens``,
        ``completion_tokens``, ``total_tokens``.
    """
    keys = as_by(by)
    require_columns(calls, [*keys, prompt, completion], "calls")
    rows = []
    for key, sub in iter_groups(calls, keys):
        p = int(sub[prompt].fillna(0).sum())
        c = int(sub[completion].fillna(0).sum())
        rows.append(
            {
                **key,
                "calls": len(sub),
                "prompt_tokens": p,
                "completion_tokens": c,
                "total_tokens": p + c,
            }
        )
    return pd.DataFrame(
        rows, columns=[*keys, "calls", "prompt_tokens", "completion_tokens", "total_tokens"]
    )


def _receivers(value: Any) -> list[str]:
    """Receivers as a list, whatever the reader produced (list, ndarray, JSON text, name)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                return [str(v) for v in json.loads(text)]
            except json.JSONDecodeError:
                pass
        return [text] if text else []
    return [str(v) for v in value]


def _nbytes(content: Any) -> int:
    if content is None or (isinstance(content, float) and math.isnan(content)):
        return 0
    return len(str(content).encode("utf-8"))


def message_bytes_df(
    messages: pd.DataFrame,
    by: By = "topology",
    *,
    sender: str = "sender",
    receivers: str = "receivers",
    content: str = "content",
) -> pd.DataFrame:
    """Messages and UTF-8 content bytes per directed (sender → receiver) pair.

    A message to k receivers counts once for each of the k pairs (each receiver is sent a
    copy on the wire, which is what the traffic question cares about).

    Returns:
        One row per (group, sender, receiver): ``messages`` and ``bytes``, sorted by bytes
        descending within the group.
    """
    keys = as_by(by)
    require_columns(messages, [*keys, sender, receivers, content], "messages")
    df = messages[[*keys, sender]].copy()
    df["receiver"] = [_receivers(v) for v in messages[receivers]]
    df["bytes"] = [_nbytes(v) for v in messages[content]]
    df = df.explode("receiver").dropna(subset=["receiver"])
    df = df.rename(columns={sender: "sender"})
    gk = [*keys, "sender", "receiver"]
    if df.empty:
        return pd.DataFrame(columns=[*gk, "messages", "bytes"])
    out = df.groupby(gk, dropna=False, sort=True).agg(
        messages=("bytes", "size"), bytes=("bytes", "sum")
    )
    out = out.reset_index()
    return out.sort_values(
        [*keys, "bytes"], ascending=[True] * len(keys) + [False], kind="mergesort"
    ).reset_index(drop=True)


def _describe(sub: pd.DataFrame, col: str, out: dict[str, Any], name: str) -> None:
    x = sub[col].to_numpy(dtype=float) if col in sub else np.array([])
    x = x[np.isfinite(x)]
    out[f"{name}_mean"] = float(x.mean()) if len(x) else math.nan
    out[f"{name}_peak"] = float(x.max()) if len(x) else math.nan


def backend_summary_df(
    server: pd.DataFrame,
    by: By = "topology",
    *,
    ts: str = "ts",
    columns: Sequence[str] = (
        "requests_running",
        "requests_waiting",
        "prompt_tokens_per_s",
        "generation_tokens_per_s",
    ),
) -> pd.DataFrame:
    """Backend layer: mean and peak of sampled LLM-server metrics per group.

    Samples are averaged with equal weight (the sampler's interval is regular).

    Returns:
        One row per group: ``samples``, ``duration_s`` and ``<metric>_mean`` /
        ``<metric>_peak`` for each of ``columns``.
    """
    keys = as_by(by)
    require_columns(server, [*keys, ts, *columns], "server metrics")
    rows = []
    for key, sub in iter_groups(server, keys):
        row: dict[str, Any] = {
            **key,
            "samples": len(sub),
            "duration_s": float(sub[ts].max() - sub[ts].min()) if len(sub) else 0.0,
        }
        for col in columns:
            _describe(sub, col, row, col)
        rows.append(row)
    return pd.DataFrame(rows)


def process_summary_df(
    process: pd.DataFrame,
    by: By = None,
    *,
    ts: str = "ts",
    cpu: str = "cpu_percent",
    rss: str = "rss_bytes",
) -> pd.DataFrame:
    """Process layer: CPU percent and resident memory of the experiment process.

    Returns:
        One row per group (one row overall by default): ``samples``, ``duration_s``,
        ``cpu_percent_mean``/``_peak`` and ``rss_mb_mean``/``_peak`` (MiB).
    """
    keys = as_by(by)
    require_columns(process, [*keys, ts, cpu, rss], "process metrics")
    rows = []
    for key, sub in iter_groups(process, keys):
        row: dict[str, Any] = {
            **key,
            "samples": len(sub),
            "duration_s": float(sub[ts].max() - sub[ts].min()) if len(sub) else 0.0,
        }
        _describe(sub, cpu, row, "cpu_percent")
        mb = sub[[rss]].astype(float) / 2**20
        _describe(mb, rss, row, "rss_mb")
        rows.append(row)
    return pd.DataFrame(rows)
