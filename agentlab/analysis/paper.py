"""The agentraffic paper's definitions of its Tables 2 and 3 (an option of the analysis).

Where they differ from agentlab's own (:func:`~agentlab.analysis.summary.traffic_summary_df`
with ``definitions="agentlab"``):

| quantity              | agentlab (default)                          | paper                                          |
|-----------------------|---------------------------------------------|------------------------------------------------|
| call window           | IATs: ``discussion`` calls; the rest: every | the **discussion window**: ``discussion`` and  |
|                       | call of every stage                         | ``synthesis`` calls, for every metric          |
| calls / tokens per run| all stages                                  | window calls                                   |
| latency, TTFT         | percentiles pooled over all calls           | per run over its window calls, then the mean   |
|                       |                                             | over runs (p50, p95; ``latency_mean``: means)  |
| call rate             | calls / (last end - first start), all calls | window calls / (last start - first start)      |
| duration              | —                                           | last start - first start of the window         |
| in-flight             | all calls                                   | window calls                                   |
| peak in flight        | most calls at once (exact times; an end     | the same, but each call's duration rounded to  |
|                       | before a start at the same instant)         | 10 ms and a start before an end at one instant |
| fits (Table 3)        | every IAT (zeros floored)                   | :func:`~agentlab.analysis.fits.fit_sample`:    |
|                       |                                             | > 0, fence (Sequential, Star), > 50 ms, p99    |

Sources: agentraffic ``ui/data/public/summary.json`` (``table2.notes``, ``iat.definition``,
``iat.fit_scope``) and ``scripts/demo/export_results.py`` (``response_metrics``: the per-run
columns ``llm_latency_p50/p95_mean_s``, ``llm_ttft_p50/p95_mean_s``, ``disc_duration_s`` =
last minus first discussion-call start, from which Table 2 is recomputed; e.g. the
fractional "peak concurrency" 1.99 is a mean over runs). Per-run values are averaged over
runs, pooled values (IATs) pool the runs of a group. Not reproduced: the network-layer rows
and "IAT jitter".

The peak: agentraffic's ``scripts/demo/analysis_load.py`` (``raw_peak``) says Table 2's
peaks (1.99 / 3.80 / 6.03) count back-to-back calls as overlapping: ``duration_seconds``
was recorded rounded to 10 ms, and a start sorts before an end at the same time. Its
``true_peak`` (``load.json`` ``concurrency.<topology>.true_peak``: 1 / 3 / 5) is the most
calls really in flight. ``peak_in_flight`` here follows Table 2 (:func:`paper_peaks`);
``true_peak_in_flight`` is the most in any run of the group, with exact times.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from agentlab.analysis._frame import By, as_by, iter_groups, percentile, require_columns
from agentlab.analysis.fits import fit_iat, fit_sample
from agentlab.analysis.iat import DEFAULT_THRESHOLD, _check_threshold, iat_df
from agentlab.analysis.inflight import inflight_summary_df

__all__ = [
    "PAPER_ANCHORS",
    "PAPER_FENCE",
    "PAPER_FIT_DISTS",
    "PAPER_GOAL_METRICS",
    "PAPER_ROLES",
    "PAPER_TOTALS",
    "PAPER_WINDOW",
    "paper_comparison_df",
    "paper_fit_comparison_df",
    "paper_fit_samples",
    "paper_fits_df",
    "paper_peaks",
    "paper_summary_df",
    "published_paper_df",
]

#: stages of the paper's discussion window
PAPER_WINDOW = ("discussion", "synthesis")
#: whether the Table-3 sample is fenced (Q3 + 3 IQR), per topology
PAPER_FENCE: dict[str, bool] = {"sequential": True, "star": True, "full_mesh": False}
#: the families of Table 3
PAPER_FIT_DISTS = ("lognorm", "expon", "weibull_min")


def _window(calls: pd.DataFrame, stage_col: str) -> pd.DataFrame:
    require_columns(calls, [stage_col], "calls")
    return calls[calls[stage_col].isin(PAPER_WINDOW)]


#: the resolution of agentraffic's recorded call durations (``duration_seconds``), s
PAPER_DURATION_STEP_S = 0.01


def paper_peaks(
    calls: pd.DataFrame, by: By, *, start: str = "start", end: str = "end"
) -> pd.DataFrame:
    """Per group of ``by`` (a run), the peak number of calls in flight as Table 2 counts it.

    Each call lasts its duration rounded to :data:`PAPER_DURATION_STEP_S` (how agentraffic
    recorded it) from its start, and at equal times a start is counted before an end, so
    a call that starts as another ends (or within the rounding) overlaps it. Calls that
    last no time are left out (agentraffic ``scripts/demo/analysis_load.py``,
    ``raw_peak``). Returns the ``by`` columns and ``peak``.
    """
    keys = as_by(by)
    require_columns(calls, [*keys, start, end], "calls")
    step, s = PAPER_DURATION_STEP_S, calls[start].to_numpy(dtype=float)
    e = s + np.round((calls[end].to_numpy(dtype=float) - s) / step) * step
    # the paper's closed [s, e] as the half-open [s, e+) of the shared sweep: a call that
    # starts as another ends overlaps it; one that lasts no time has no end (left out)
    paper_end = np.where(e > s, np.nextafter(e, np.inf), np.nan)
    framed = calls[keys].assign(_start=s, _end=paper_end)
    out = inflight_summary_df(framed, by=keys, start="_start", end="_end")
    return out[[*keys, "peak_in_flight"]].rename(columns={"peak_in_flight": "peak"})


def paper_summary_df(
    calls: pd.DataFrame,
    by: By = "topology",
    *,
    run: By = "run_id",
    threshold: float = DEFAULT_THRESHOLD,
    start: str = "start",
    end: str = "end",
    first_token: str = "first_token",
    prompt: str = "prompt_tokens",
    completion: str = "completion_tokens",
    stage_col: str = "stage",
) -> pd.DataFrame:
    """Table 2 (application, IAT and backend rows) with the paper's definitions.

    Columns: ``runs``, ``disc_calls_per_run``, ``disc_calls``, ``call_rate``,
    ``duration_s``, ``tokens_per_run``, ``tokens_per_call``, ``latency_mean``, ``iats``,
    ``iat_mean``, ``iat_median``, ``iat_p95``, ``burst_fraction``, ``latency_p50``,
    ``latency_p95``, ``ttft_p50``, ``ttft_p95``, ``mean_in_flight``, ``peak_in_flight``
    (Table 2's count, :func:`paper_peaks`), ``true_peak_in_flight`` (the most calls really
    in flight in any run of the group).
    """
    _check_threshold(threshold)
    keys, runs = as_by(by), as_by(run)
    run_key = [*keys, *runs]
    require_columns(calls, [*run_key, start, end, prompt, completion], "calls")
    win = _window(calls, stage_col)
    iats = iat_df(win, stage=None, by=run_key, start=start)
    infl = inflight_summary_df(win, by=run_key, start=start, end=end)
    peaks = paper_peaks(win, run_key, start=start, end=end)
    rows = []
    for key, sub in iter_groups(win, keys):
        lat = (sub[end] - sub[start]).astype(float)
        ft = (
            sub[first_token].to_numpy(dtype=float)
            if first_token in sub
            else np.full(len(sub), np.nan)
        )
        ttft = ft - sub[start].to_numpy(dtype=float)
        per_run = sub.assign(_lat=lat, _s=sub[start].astype(float),
                             _tok=sub[prompt].fillna(0) + sub[completion].fillna(0),
                             _ttft=ttft)  # fmt: skip
        g = per_run.groupby(runs, sort=False).agg(
            n=("_s", "size"), s0=("_s", "min"), s1=("_s", "max"),
            lat=("_lat", "mean"), tok=("_tok", "sum"),
        )  # fmt: skip
        span = (g.s1 - g.s0).to_numpy(dtype=float)
        rate = np.divide(g.n.to_numpy(dtype=float), span, out=np.full(len(g), np.nan),
                         where=span > 0)  # fmt: skip
        x = iats
        for k, v in key.items():
            x = x[x[k] == v]
        xi = x["iat"].to_numpy(dtype=float)
        by_run = per_run.groupby(runs, sort=False)
        fl, pk = infl, peaks
        for k, v in key.items():
            fl, pk = fl[fl[k] == v], pk[pk[k] == v]
        n_runs = len(g)
        rows.append({
            **key,
            "runs": n_runs,
            "disc_calls_per_run": len(sub) / n_runs,
            "disc_calls": len(sub),
            "call_rate": float(np.nanmean(rate)) if np.isfinite(rate).any() else math.nan,
            "duration_s": float((g.s1 - g.s0).mean()),
            "tokens_per_run": float(g.tok.mean()),
            "tokens_per_call": float(g.tok.sum() / len(sub)),
            "latency_mean": float(g.lat.mean()),
            "iats": len(xi),
            "iat_mean": float(xi.mean()) if len(xi) else math.nan,
            "iat_median": percentile(xi, 50),
            "iat_p95": percentile(xi, 95),
            "burst_fraction": float(np.mean(xi < threshold)) if len(xi) else math.nan,
            "latency_p50": _run_mean(by_run["_lat"], 0.5),
            "latency_p95": _run_mean(by_run["_lat"], 0.95),
            "ttft_p50": _run_mean(by_run["_ttft"], 0.5),
            "ttft_p95": _run_mean(by_run["_ttft"], 0.95),
            "mean_in_flight": float(fl["mean_in_flight"].mean()),
            "peak_in_flight": float(pk["peak"].mean()),
            "true_peak_in_flight": int(fl["peak_in_flight"].max()),
        })  # fmt: skip
    return pd.DataFrame(rows)


def _run_mean(col: Any, q: float) -> float:
    """Mean over runs of each run's ``q`` quantile (linear interpolation; NaN-only runs
    skipped), as the paper's per-run ``*_p50_mean_s`` / ``*_p95_mean_s`` columns."""
    per = col.quantile(q)
    return float(per.mean()) if per.notna().any() else math.nan


def _fit_samples(
    calls: pd.DataFrame,
    by: By,
    run: By,
    fence: bool | Mapping[str, bool] | None,
    start: str,
    stage_col: str,
) -> list[tuple[dict[str, object], np.ndarray, dict[str, object]]]:
    keys, runs = as_by(by), as_by(run)
    iats = iat_df(_window(calls, stage_col), stage=None, by=[*keys, *runs], start=start)
    out = []
    for key, sub in iter_groups(iats, keys):
        first = next(iter(key.values()), None)
        if isinstance(fence, bool):
            fenced = fence
        else:
            fenced = (PAPER_FENCE if fence is None else fence).get(str(first), True)
        x, info = fit_sample(sub["iat"], fence=fenced)
        out.append((dict(key), np.asarray(x), dict(info)))
    return out


def paper_fit_samples(
    calls: pd.DataFrame,
    by: By = "topology",
    *,
    run: By = "run_id",
    fence: bool | Mapping[str, bool] | None = None,
    start: str = "start",
    stage_col: str = "stage",
) -> dict[str, np.ndarray]:
    """Each group's Table-3 sample of window IATs (what :func:`paper_fits_df` fits), keyed
    by the first ``by`` value: e.g. for :func:`~agentlab.analysis.gof.subsample_ks_df`."""
    return {
        str(next(iter(key.values()), "")): x
        for key, x, _ in _fit_samples(calls, by, run, fence, start, stage_col)
    }


def paper_fits_df(
    calls: pd.DataFrame,
    by: By = "topology",
    *,
    run: By = "run_id",
    dists: Sequence[str] = PAPER_FIT_DISTS,
    fence: bool | Mapping[str, bool] | None = None,
    start: str = "start",
    stage_col: str = "stage",
) -> pd.DataFrame:
    """Table 3: fits of each group's Table-3 sample (:func:`fit_sample`) of window IATs.

    Args:
        fence: apply the IQR fence; a mapping by the first ``by`` value, or ``None`` for
            :data:`PAPER_FENCE` (topologies it does not name are fenced).

    Returns:
        :func:`~agentlab.analysis.fits.fit_iat` rows with the ``by`` columns first and the
        sample's ``n_positive``, ``fence_s``, ``n_after_fence``, ``n_reasoning``,
        ``clip_s``, ``fraction_of_iats`` and ``range_lo`` / ``range_hi``.
    """
    frames = []
    for key, x, info in _fit_samples(calls, by, run, fence, start, stage_col):
        f = fit_iat(x, list(dists), zeros="drop")
        for i, (col, val) in enumerate(key.items()):
            f.insert(i, col, val)
        info.pop("n")
        for k, v in info.items():
            f[k] = v
        f["range_lo"], f["range_hi"] = float(x.min()), float(x.max())
        frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


#: Which Table-2 figures a simulation of the paper's workflow on ``sim/vllm-3b`` is *given*
#: and which it *predicts*. ``input``: set by what the simulation takes from the paper's
#: outcome data — the call counts follow the consensus / pass rates
#: (``topology.WorkflowConfig``). ``derived``: a product of inputs and predictions (tokens:
#: the published output lengths per call label plus the prompts the workflow's text and the
#: tokenizer give; duration and call rate: the protocol over predicted latencies).
#: ``prediction``: what the server model (``datasets/make_vllm_3b_profile.py``: server-side
#: facts, per-call-label lengths) and the call graph produce — latency, TTFT, IATs, bursts,
#: concurrency. :data:`PAPER_ANCHORS` names the exceptions per topology.
PAPER_ROLES: dict[str, str] = {
    "disc_calls_per_run": "input", "disc_calls": "input", "tokens_per_run": "derived",
    "tokens_per_call": "derived", "latency_mean": "prediction", "latency_p50": "prediction",
    "latency_p95": "prediction", "ttft_p50": "prediction", "ttft_p95": "prediction",
    "duration_s": "derived", "call_rate": "derived",
    "iat_mean": "prediction", "iat_median": "prediction", "iat_p95": "prediction",
    "burst_fraction": "prediction", "mean_in_flight": "prediction",
    "peak_in_flight": "prediction",
}  # fmt: skip
#: (metric, topology) rows whose published value (or one the same as it) went into the
#: simulation, with the reason: their agreement is by construction.
PAPER_ANCHORS: dict[tuple[str, str], str] = {
    ("ttft_p50", "sequential"): (
        "anchor: prefill_tps / overhead_s are fitted through the sequential discussion TTFT"
        " median (load.discussion.horizontal.queue_wait_p50_s 0.1218 s)"
    ),
    **{
        ("latency_p50", topo): (
            "anchor: length_corr (how much a run's discussion replies run long or short"
            " together) is fitted to this row over the pooled discussion latency median"
            f" (load.discussion.{key}.latency_p50_s)"
        )
        for topo, key in (
            ("sequential", "horizontal"),
            ("star", "vertical"),
            ("full_mesh", "full_mesh"),
        )
    },
    ("iat_median", "star"): (
        "anchor: client_overhead_s / client_overhead_sigma are fitted to Star's published"
        " burst gaps (summary.json iat.per_topology.vertical), whose 94th percentile this is"
    ),
}
#: study totals: they grow with the number of runs, so a study of other size than the
#: paper's (~500 runs per topology) is not compared on them (``ratio`` NaN, ``note`` says so);
#: their per-run form is the row compared
PAPER_TOTALS: dict[str, str] = {"disc_calls": "disc_calls_per_run"}
#: the metrics whose 15 % goal the server model is held to (issue 22)
PAPER_GOAL_METRICS = (
    "latency_mean", "latency_p95", "ttft_p50", "ttft_p95", "iat_median", "iat_p95",
    "mean_in_flight",
)  # fmt: skip


def published_paper_df() -> pd.DataFrame:
    """The paper's published aggregates (``datasets/agentraffic_paper.csv``, long form)."""
    from agentlab.datasets import data_dir

    df = pd.read_csv(data_dir() / "agentraffic_paper.csv")
    df["dist"] = df["dist"].fillna("")  # "" = a row about the sample, not a family
    return df


def paper_comparison_df(table: pd.DataFrame, published: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table 2 side by side: one row per (metric, topology) with ``simulated``, ``paper``,
    ``ratio`` (simulated / paper), ``diff`` (ratio - 1), ``within_15`` (``|diff| <= 15 %``),
    ``role`` (:data:`PAPER_ROLES`, ``input`` for the :data:`PAPER_ANCHORS` rows), ``goal``
    (a metric of :data:`PAPER_GOAL_METRICS` that is not an anchor) and ``note``.

    Args:
        table: :func:`paper_summary_df` output (a ``topology`` column).
        published: :func:`published_paper_df` (default: the shipped file).
    """
    pub = published_paper_df() if published is None else published
    pub = pub[pub["table"] == "table2"]
    rows = []
    for metric, role in PAPER_ROLES.items():
        if metric not in table.columns:
            continue
        for _, r in table.iterrows():
            hit = pub[(pub.metric == metric) & (pub.topology == r["topology"])]
            paper = float(hit["value"].iloc[0]) if len(hit) else math.nan
            sim = float(r[metric])
            ratio = sim / paper if paper else math.nan
            note = PAPER_ANCHORS.get((metric, str(r["topology"])), "")
            if metric in PAPER_TOTALS:
                ratio, note = math.nan, _total_note(metric, r, paper, pub)
            rows.append({"metric": metric, "topology": r["topology"], "simulated": sim,
                         "paper": paper, "ratio": ratio, "diff": ratio - 1.0,
                         "within_15": bool(abs(ratio - 1.0) <= 0.15) if ratio == ratio else None,
                         "role": "input" if note else role,
                         "goal": metric in PAPER_GOAL_METRICS and not note,
                         "note": note})  # fmt: skip
    return pd.DataFrame(rows)


def _total_note(metric: str, row: pd.Series, paper: float, pub: pd.DataFrame) -> str:
    """Why a study total is not compared: the runs behind each side (``pub``: Table 2)."""
    per_run = PAPER_TOTALS[metric]
    hit = pub[(pub.metric == per_run) & (pub.topology == row["topology"])]
    paper_runs = paper / float(hit["value"].iloc[0]) if len(hit) else math.nan
    runs = row.get("runs", math.nan)
    return (
        f"a study total: the paper's ~{paper_runs:.0f} runs, this study's {runs:.0f};"
        f" compared per run ({per_run})"
    )


def _sim_params(row: pd.Series) -> dict[str, float]:
    if row["dist"] == "lognorm":
        return {"mu": math.log(row["scale"]), "sigma": row["s"], "median_s": row["scale"]}
    if row["dist"] == "expon":
        return {"lambda": 1.0 / row["scale"], "mean_s": row["scale"]}
    return {"shape": row["c"], "scale_s": row["scale"]}


def paper_fit_comparison_df(
    fits: pd.DataFrame, published: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Table 3 side by side: per (topology, dist, parameter) ``simulated`` and ``paper``.

    ``fits`` is :func:`paper_fits_df` output; the parameters are the paper's (lognormal
    ``mu``, ``sigma``, ``median_s``; exponential ``lambda``, ``mean_s``; Weibull
    ``shape``, ``scale_s``) plus ``ks``, ``aic`` and, per topology, ``best_aic`` (1 for
    the family with the lowest AIC) and the sample's ``n``.
    """
    pub = published_paper_df() if published is None else published
    pub = pub[pub["table"] == "table3"]
    rows = []

    def paper_value(topo: str, dist: str, metric: str) -> float:
        hit = pub[(pub.topology == topo) & (pub.dist == dist) & (pub.metric == metric)]
        return float(hit["value"].iloc[0]) if len(hit) else math.nan

    for topo, sub in fits.groupby("topology", sort=False):
        best_sim = sub.loc[sub["aic"].idxmin(), "dist"]
        aics = {d: paper_value(str(topo), d, "aic") for d in PAPER_FIT_DISTS}
        best_paper = min(aics, key=lambda d: aics[d] if not math.isnan(aics[d]) else math.inf)
        rows.append({"topology": topo, "dist": "", "parameter": "n",
                     "simulated": float(sub["n"].iloc[0]),
                     "paper": paper_value(str(topo), "", "n")})  # fmt: skip
        for _, r in sub.iterrows():
            d = str(r["dist"])
            vals = {**_sim_params(r), "ks": r["ks_stat"], "aic": r["aic"]}
            for k, v in vals.items():
                rows.append({"topology": topo, "dist": d, "parameter": k, "simulated": float(v),
                             "paper": paper_value(str(topo), d, k)})  # fmt: skip
            rows.append({"topology": topo, "dist": d, "parameter": "best_aic",
                         "simulated": float(d == best_sim), "paper": float(d == best_paper)})  # fmt: skip
    return pd.DataFrame(rows)
