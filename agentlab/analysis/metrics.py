"""Per-call and per-run traffic metrics: latency, TTFT, queue wait, tokens, message bytes."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from agentlab.analysis._frame import By, as_by, iter_groups, percentile, require_columns
from agentlab.analysis.iat import DEFAULT_BY

__all__ = ["latency_df", "message_bytes_df", "tokens_per_run_df"]


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
    runs: pd.DataFrame | None = None,
    run: str = "run_id",
    sender: str = "sender",
    receivers: str = "receivers",
    content: str = "content",
    nbytes: str = "bytes",
) -> pd.DataFrame:
    """Messages and UTF-8 content bytes per directed (sender → receiver) pair.

    A message to k receivers counts once for each of the k pairs (each receiver is sent a
    copy on the wire, which is what the traffic question cares about).

    Args:
        messages: the ``messages`` dataset.
        by: grouping columns.
        runs: optional table mapping ``run`` to the ``by`` columns (e.g. the calls or runs
            DataFrame) for message rows that carry only a run id.
        run: run id column used to join ``runs``.
        sender, receivers: column names; receivers may be lists, arrays or JSON text.
        content: message text; its UTF-8 length is the size. When the column is absent a
            precomputed ``nbytes`` column is used instead.
        nbytes: precomputed size column.

    Returns:
        One row per (group, sender, receiver): ``messages`` and ``bytes``, sorted by bytes
        descending within the group.
    """
    keys = as_by(by)
    if runs is not None and any(k not in messages.columns for k in keys):
        require_columns(runs, [run, *keys], "runs")
        require_columns(messages, [run], "messages")
        lookup = runs[[run, *keys]].drop_duplicates(subset=[run])
        messages = messages.merge(lookup, on=run, how="left")
    size_col = content if content in messages.columns or nbytes not in messages.columns else nbytes
    require_columns(messages, [*keys, sender, receivers, size_col], "messages")
    df = messages[[*keys, sender]].copy()
    df["receiver"] = [_receivers(v) for v in messages[receivers]]
    if size_col == content:
        df["bytes"] = [_nbytes(v) for v in messages[content]]
    else:
        df["bytes"] = messages[nbytes].fillna(0).astype(int).to_numpy()
    df = df.explode("receiver").dropna(subset=["receiver"])
    df = df.rename(columns={sender: "sender"})
    gk = [*keys, "sender", "receiver"]
    if df.empty:
        return pd.DataFrame(columns=[*gk, "messages", "bytes"])
    out = df.groupby(gk, dropna=False, sort=True).agg(
        messages=("bytes", "size"), bytes=("bytes", "sum")
    )
    out = out.reset_index()
    order = [True] * len(keys) + [False]
    return out.sort_values([*keys, "bytes"], ascending=order, kind="mergesort").reset_index(
        drop=True
    )
