"""The agentraffic paper's Tables 2 and 3 from a simulated run, next to the published values.

3 topologies x ``--runs`` (default 200) runs x N = 4 experts on ``sim/vllm-3b`` under the
virtual clock, with the free-text workflow's paper defaults
(``agentlab.topology.WorkflowConfig``), analysed with the paper's definitions
(``agentlab.analysis.paper_summary_df`` / ``paper_fits_df``). Then the full-mesh burst
fraction for N = 3, 4, 5 (the scaling prediction). Prints both tables and the timing;
``--json`` writes everything. Every Table 2 row is labelled with its role (input / derived
/ prediction, :data:`agentlab.analysis.PAPER_ROLES`, anchors in ``PAPER_ANCHORS``), the
difference from the published value and whether it is within 15 %; Table 3's lognormal
sigma (goal: within 0.1), the share of n = 200 subsamples that reject the exponential
(goal: within 10 points) and the full-mesh burst fraction by N (goal: 5 points) follow.
Then the full-mesh IAT median decomposed (:func:`mesh_median_pieces`: how much of its miss
the burst fraction carries); the discussion latency pooled as the server timed it next to
Table 2's per-run aggregation, timed by the calling agent (:func:`latency_pieces`: the
server model matches the first within 3 % at p50 for all three topologies at seeds 0-2,
and at p95 but for Star, whose pooled p95 sits at the edge of its ~4.7 % of replies run to
the cap: ~60 s in a sample where they pass 5 %, seed 1; the per-run / pooled p50 ratios are
the inputs of the profile's ``length_corr``, Star's 1.19 in the paper); Star's IAT p95
decomposed (:func:`star_gap_pieces`). Last, the pieces the TTFT rows are made of (:func:`pieces`):
discussion prompt tokens by call label and round next to the published quartiles, the mean
reply tokens per task category and round, and discussion TTFT by place in a burst (first /
joined) next to the same prompt on an idle server.

    python benchmarks/topology_paper.py [--quick] [--runs N] [--json PATH] [--out DIR]
        [--cross-fit]

``--cross-fit``: the calibration goal — the server fitted (``agentlab.calibrate``, roofline
step and attention term as the truth has them) on one topology's calls predicts the other
two topologies' discussion latency and TTFT; the fitted parameters are printed next to the
truth's (the round trip).

``--quick``: 40 runs per topology and per N. The must-show bound: the 3 x 200 x 4 run in
at most 2 minutes of wall time (``wall_s`` in the output).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _scratch import scratch_path

TOPOLOGIES = ["sequential", "star", "full_mesh"]
SCALING_N = (3, 4, 5)
#: Share of n = 200 subsamples of the full-mesh Table-3 sample whose KS test rejects the
#: exponential (alpha 0.05), as the paper reports it: quoted by the fidelity review of issue
#: 22, not a row of datasets/agentraffic_paper.csv. The paper's code for it is not public.
PAPER_EXPON_REJECTION = {"full_mesh": 0.98}
#: How the rejection is tested (input: an inferred definition). The published full-mesh fit
#: sample, rebuilt from agentraffic summary.json @ 893a8bf (iat.per_topology.full_mesh
#: fit_counts x linear_fit_counts; n 8,870, mean 1.278 s vs 1.2769, expon KS 0.114 vs 0.116,
#: lognorm 0.087 vs 0.089), rejects the re-fitted exponential at n = 200 in 83-92 % of
#: subsamples with the KS table's p-value (5 seeds, mean 0.86) and in 97.5-99 % (mean 0.985)
#: with Lilliefors' p-value for an estimated rate: only the latter reproduces the published
#: 98 % on the paper's own data, so it is the one compared.
EXPON_PVALUE: Literal["exact", "lilliefors"] = "lilliefors"
#: Full-mesh burst fraction by N: only N = 4 is published (Table 2).
PAPER_BURST = {4: 0.381771}


def _pct(x: float) -> str:
    return "" if x != x else f"{100 * x:+.0f} %"


def format_table2(cmp2: Any) -> str:
    """Table 2 long form: role, metric, topology, published, simulated, difference, 15 %."""
    lines = [
        "\nTable 2 (paper definitions), simulated vs published. role: input = taken from the",
        "paper's outcome data (or anchored on the row itself: see note), derived = inputs and",
        "predictions combined, prediction = the server model and call graph; goal = a metric",
        "the server model is held to 15 % on (issue 22).",
        f"{'role':10s} {'metric':19s} {'topology':10s} {'published':>10s} {'simulated':>10s} "
        f"{'diff':>7s} {'<=15%':>5s} goal  note",
    ]
    for _, r in cmp2.iterrows():
        ok = "" if r["within_15"] is None else ("yes" if r["within_15"] else "NO")
        lines.append(
            f"{r['role']:10s} {r['metric']:19s} {r['topology']:10s} {r['paper']:10.4g} "
            f"{r['simulated']:10.4g} {_pct(r['diff']):>7s} {ok:>5s} "
            f"{'*' if r['goal'] else ' ':4s}  {r['note']}"
        )
    goal = cmp2[cmp2["goal"]]
    n_ok = int(goal["within_15"].fillna(False).astype(bool).sum())
    lines.append(f"goal rows within 15 %: {n_ok} of {len(goal)}")
    return "\n".join(lines)


def _published_server() -> dict[str, Any]:
    """datasets/agentraffic_server.json: the server-side extract of agentraffic's data."""
    from agentlab.datasets import data_dir

    return dict(json.loads((data_dir() / "agentraffic_server.json").read_text()))


def true_peaks(table: Any) -> list[dict[str, Any]]:
    """The most discussion calls really in flight in any run (exact times), simulated, next
    to agentraffic's ``load.json`` ``concurrency.<topology>.true_peak``: Table 2's
    ``peak_in_flight`` counts back-to-back calls as overlapping (``paper_peaks``)."""
    pub = _published_server()["load"]["concurrency_true_peak"]
    return [{"topology": r["topology"], "simulated": int(r["true_peak_in_flight"]),
             "published": pub[_LOAD_KEY[r["topology"]]]}
            for _, r in table.iterrows()]  # fmt: skip


def format_true_peaks(rows: list[dict[str, Any]]) -> str:
    cells = ", ".join(f"{r['topology']} {r['simulated']} ({r['published']})" for r in rows)
    return (
        "\npeak_in_flight is Table 2's count: each call's duration rounded to 10 ms, a start\n"
        "before an end at one instant (agentraffic scripts/demo/analysis_load.py raw_peak), so\n"
        "back-to-back calls count as two. The most calls really in flight in any run, exact\n"
        f"times, simulated (published, load.json concurrency true_peak): {cells}"
    )


def format_table3(cmp3: Any, rej: dict[str, float], rej_exact: dict[str, float]) -> str:
    """Table 3: lognormal sigma (goal: within 0.1) and mu, best family; exponential
    rejection share at n = 200 (goal: within 10 points)."""
    lines = ["\nTable 3 (fit sample: IAT > 50 ms, fenced Sequential/Star, p99 clip): prediction",
             f"{'topology':10s} {'parameter':16s} {'published':>10s} {'simulated':>10s} "
             f"{'diff':>8s} goal"]  # fmt: skip
    for topo in TOPOLOGIES:
        sub = cmp3[cmp3["topology"] == topo]
        for dist, par, tol in (("lognorm", "sigma", 0.1), ("lognorm", "mu", None),
                               ("lognorm", "median_s", None)):  # fmt: skip
            hit = sub[(sub["dist"] == dist) & (sub["parameter"] == par)]
            if hit.empty:
                continue
            pub, sim = float(hit["paper"].iloc[0]), float(hit["simulated"].iloc[0])
            mark = "" if tol is None else ("yes" if abs(sim - pub) <= tol else "NO")
            lines.append(f"{topo:10s} {'lognorm ' + par:16s} {pub:10.4f} {sim:10.4f} "
                         f"{sim - pub:+8.4f} {mark}")  # fmt: skip
        best = sub[(sub["parameter"] == "best_aic") & (sub["simulated"] == 1.0)]["dist"]
        best_pub = sub[(sub["parameter"] == "best_aic") & (sub["paper"] == 1.0)]["dist"]
        lines.append(f"{topo:10s} {'best AIC':16s} {best_pub.iloc[0] if len(best_pub) else '':>10s} "
                     f"{best.iloc[0] if len(best) else '':>10s}")  # fmt: skip
        if topo in rej:
            pub = PAPER_EXPON_REJECTION.get(topo, math.nan)
            mark = "" if pub != pub else ("yes" if abs(rej[topo] - pub) <= 0.10 else "NO")
            lines.append(f"{topo:10s} {'expon rej. n=200':16s} {pub:10.2f} {rej[topo]:10.2f} "
                         f"{rej[topo] - pub:+8.2f} {mark}")  # fmt: skip
            lines.append(f"{topo:10s} {'  (KS table p)':16s} {'':>10s} "
                         f"{rej_exact.get(topo, math.nan):10.2f}")  # fmt: skip
    lines.append("(expon rejection: share of 200 subsamples of n = 200 whose KS test rejects the"
                 " refitted exponential at 5 %, Lilliefors' p-value (see EXPON_PVALUE: the"
                 " published sample gives 0.985 with it, 0.86 with the KS table's); published"
                 " 98 % for full mesh as quoted in issue 22)")  # fmt: skip
    return "\n".join(lines)


def format_burst(burst: dict[int, float]) -> str:
    lines = [
        "\nFull-mesh burst fraction (IAT < 50 ms) by N: prediction",
        f"{'N':>3s} {'published':>10s} {'simulated':>10s} {'diff':>8s} goal (5 points)",
    ]
    for n, b in burst.items():
        pub = PAPER_BURST.get(n, math.nan)
        mark = "" if pub != pub else ("yes" if abs(b - pub) <= 0.05 else "NO")
        lines.append(f"{n:3d} {pub:10.3f} {b:10.3f} {b - pub:+8.3f} {mark}")
    lines.append("(N = 3 and 5: no published value in the paper's data; the fall with N is "
                 "the prediction)")  # fmt: skip
    return "\n".join(lines)


def pieces(calls: Any) -> dict[str, Any]:
    """What Table 2's TTFT rows are made of, measured on the run: prompt tokens per call
    label and round next to the published quartiles and means, with the reply means and the
    share at the output cap (``agentlab.analysis.paper_lengths_df``), and each topology's
    discussion TTFT split by where the call stood in a burst: sent alone or first of a burst
    (nothing else prefilling), or joining one (sent within 50 ms of the call before it in
    its run: a fan-out), with the TTFT the same call would have on an idle server (overhead
    + the one step of its uncached prompt: :func:`agentlab.llm.sim_step.idle_ttft`)."""
    from agentlab.analysis import paper_lengths_df
    from agentlab.llm import get_profile
    from agentlab.llm.sim_step import idle_ttft

    extract = _published_server()
    prof = get_profile("vllm-3b")
    c = calls[calls["outcome"] == "ok"]
    by_cat = paper_lengths_df(c, by_category=True)  # "all" rows first, then per category
    lengths = by_cat[by_cat["category"] == "all"].set_index(["call", "round", "kind"])
    prompts = []
    for (call, rnd, kind), r in lengths.iterrows():
        if kind != "prompt":
            continue
        done = lengths.loc[(call, rnd, "completion")]
        prompts.append({"call": call, "round": rnd, "n": int(r["n"]),
                        "simulated": [round(float(r[k])) for k in ("p25", "median", "p75")],
                        "published": [r[f"published_{k}"] for k in ("p25", "median", "p75")],
                        "prompt_mean": float(r["mean"]), "prompt_mean_pub": r["published_mean"],
                        "completion_mean": float(done["mean"]),
                        "completion_mean_pub": done["published_mean"],
                        "at_cap": float(done["at_cap"])})  # fmt: skip
    d = c[c["stage"] == "discussion"].sort_values("start")
    gap = d.groupby("run_id")["start"].diff()
    d = d.assign(
        joined=gap < 0.05,
        idle=(d["prompt_tokens"] - d["cached_tokens"]).map(lambda n: idle_ttft(prof, int(n))),
    )  # fmt: skip
    ttft = []
    for topo in TOPOLOGIES:
        for joined in (False, True):
            x = d[(d["topology"] == topo) & (d["joined"] == joined)]
            if len(x):
                ttft.append({"topology": topo, "joined": joined, "n": len(x),
                             "ttft_p50": float(x["ttft"].median()),
                             "ttft_p95": float(x["ttft"].quantile(0.95)),
                             "idle_p50": float(x["idle"].median())})  # fmt: skip
    per_cat = by_cat[(by_cat["kind"] == "completion") & (by_cat["category"] != "all")]
    categories = [{"call": call, "category": cat, "n": int(g["n"].sum()),
                   "rounds": [int(v) for v in g["round"]],
                   "mean": [float(v) for v in g["mean"]],
                   "mean_pub": [float(v) for v in g["published_mean"]],
                   "at_cap": float((g["at_cap"] * g["n"]).sum() / g["n"].sum())}
                  for (call, cat), g in per_cat.groupby(["call", "category"], sort=False)]  # fmt: skip
    return {"prompts": prompts, "ttft": ttft, "inflight": inflight_bins(c, extract["load"]),
            "categories": categories}  # fmt: skip


#: the published in-flight bins (load.<topology>_inflight_<k> of the extract)
_BINS = {"sequential": ("horizontal", (1, 2, 3, 4)), "star": ("vertical", (1, 2, 3, 4)),
         "full_mesh": ("full_mesh", (1, 2, 3, 4, 5))}  # fmt: skip


def inflight_bins(c: Any, load: dict[str, Any]) -> list[dict[str, Any]]:
    """Every call (all stages) binned by the calls of its run in flight when it started,
    itself included (the published ``load.contention`` definition); per published bin the
    simulated TTFT, latency and ms per completion token (latency / completion tokens, TTFT
    included) quartiles next to the published ones: the held-out check of the step model on
    lone calls (bin 1) and on calls that start into a busy server. Star's bins 2 and 3 are
    the 2nd and 3rd reviewer of a fan-out; a bin-1 call may decode beside calls sent after
    it (the first of a fan-out), so bin 1 is not "decoded alone"."""
    import numpy as np
    import pandas as pd

    rows = []
    for topo, (key, bins) in _BINS.items():
        parts = []
        for _, r in c[c["topology"] == topo].groupby("run_id"):
            s, e = r["start"].to_numpy(), r["end"].to_numpy()
            busy = (s[None, :] <= s[:, None]) & (e[None, :] > s[:, None])
            parts.append(r.assign(_k=busy.sum(1)))
        if not parts:
            continue
        a = pd.concat(parts)
        for k in bins:
            x, pub = a[a["_k"] == k], load[f"{key}_inflight_{k}"]
            lat = x["end"] - x["start"]
            if len(x):
                rows.append({"topology": topo, "inflight": k, "n": len(x),
                             "ttft": np.percentile(x["ttft"], [25, 50, 75]).tolist(),
                             "ttft_pub": pub["queue_wait_s"],
                             "latency": np.percentile(lat, [25, 50, 75]).tolist(),
                             "latency_pub": pub["latency_s"],
                             "ms_per_token": np.percentile(1000 * lat / x["completion_tokens"],
                                                           [25, 50, 75]).tolist(),
                             "ms_per_token_pub": pub["ms_per_token"]})  # fmt: skip
    return rows


def format_pieces(pc: dict[str, Any]) -> str:
    lines = ["\nPieces: discussion prompt tokens [p25, p50, p75] by call label and round; mean"
             " prompt and mean completion tokens, simulated / published (workflow context"
             " means: held out); the share of replies at the 6,144-token output cap",
             f"{'call':22s} {'round':>5s} {'n':>5s}  {'simulated':22s} {'published':22s} "
             f"{'prompt mean':>13s} {'completion mean':>15s} {'at cap':>7s}"]  # fmt: skip
    for r in pc["prompts"]:
        sim = "[" + ", ".join(f"{v:.0f}" for v in r["simulated"]) + "]"
        pub = "[" + ", ".join(f"{v:g}" for v in r["published"]) + "]"
        means = (f"{r['prompt_mean']:5.0f} / {r['prompt_mean_pub']:<5g} "
                 f"{r['completion_mean']:6.0f} / {r['completion_mean_pub']:<6g}")  # fmt: skip
        lines.append(f"{r['call']:22s} {r['round']:5d} {r['n']:5d}  {sim:22s} {pub:22s} "
                     f"{means} {100 * r['at_cap']:6.1f}%")  # fmt: skip
    lines += ["Mean completion tokens by task category and round, simulated / published"
              " (workflow groups.<category>: the laws' inputs); the share at the cap",
              f"{'call':22s} {'category':10s} {'n':>5s}  {'round 1':>13s} {'round 2':>13s} "
              f"{'round 3':>13s} {'at cap':>7s}"]  # fmt: skip
    for r in pc.get("categories", []):
        by_round = dict(zip(r["rounds"], zip(r["mean"], r["mean_pub"], strict=True), strict=True))
        rounds = " ".join(f"{by_round[k][0]:5.0f} / {by_round[k][1]:<5.0f}" if k in by_round
                          else f"{'-':>13s}" for k in (1, 2, 3))  # fmt: skip
        lines.append(f"{r['call']:22s} {r['category']:10s} {r['n']:5d}  {rounds} "
                     f"{100 * r['at_cap']:6.1f}%")  # fmt: skip
    lines += ["Discussion TTFT by place in a burst (joined = sent < 50 ms after the run's call"
              " before it); idle = the same prompt on an idle server",
              f"{'topology':10s} {'calls':8s} {'n':>5s} {'ttft p50':>9s} {'ttft p95':>9s} "
              f"{'idle p50':>9s}"]  # fmt: skip
    for r in pc["ttft"]:
        kind = "joined" if r["joined"] else "first"
        lines.append(f"{r['topology']:10s} {kind:8s} {r['n']:5d} {r['ttft_p50']:9.4f} "
                     f"{r['ttft_p95']:9.4f} {r['idle_p50']:9.4f}")  # fmt: skip
    lines += ["All calls by calls in flight at their start (load.contention bins, held out):"
              " [p25, p50, p75] simulated / published",
              f"{'topology':10s} {'in flight':>9s} {'n':>5s}  {'ttft s':34s} {'latency s':36s}"
              " ms/token"]  # fmt: skip
    for r in pc.get("inflight", []):

        def q(v: list[float], f: str = ".3f") -> str:
            return "[" + " ".join(format(x, f) for x in v) + "]"

        lines.append(f"{r['topology']:10s} {r['inflight']:9d} {r['n']:5d}  "
                     f"{q(r['ttft'])} / {q(r['ttft_pub'])}  "
                     f"{q(r['latency'], '.2f')} / {q(r['latency_pub'], '.2f')}  "
                     f"{q(r['ms_per_token'], '.2f')} / {q(r['ms_per_token_pub'], '.2f')}")  # fmt: skip
    return "\n".join(lines)


#: the server parameters calibration fits (the rest of a fitted profile stays the truth's)
FITTED_SERVER = ("prefill_tps", "overhead_s", "decode_tps", "decode_degrade", "decode_jitter",
                 "attention_decode_s")  # fmt: skip


def cross_fit(calls: Any, runs: int, seed: int, base: Path) -> list[dict[str, Any]]:
    """Calibration across topologies: fit the server on one topology's calls (``sim/vllm-3b``
    as the real server), keep the per-call-label lengths (inputs), re-run the other two
    topologies on the fitted server and compare their discussion latency and TTFT with the
    ``sim/vllm-3b`` runs (truth). Each row: fitted on, predicted, metric, truth, predicted."""
    import numpy as np

    from agentlab.analysis.calibrate import fit_calibration
    from agentlab.llm import get_profile

    truth = get_profile("vllm-3b")

    def disc(c: Any) -> Any:
        return c[(c["stage"] == "discussion") & (c["outcome"] == "ok")]

    def metrics(c: Any) -> dict[str, float]:
        d = disc(c)
        lat, ttft = (d["end"] - d["start"]).to_numpy(), (d["first_token"] - d["start"]).to_numpy()
        return {"latency_p50": float(np.median(lat)), "latency_p95": float(np.percentile(lat, 95)),
                "ttft_p50": float(np.median(ttft)), "ttft_p95": float(np.percentile(ttft, 95))}  # fmt: skip

    rows = []
    for fit_on in TOPOLOGIES:
        cal = fit_calibration(calls[calls["topology"] == fit_on], slots=truth.slots,
                              max_num_batched_tokens=truth.max_num_batched_tokens,
                              by="run_id", n_boot=5, n_sim=0, seed=seed,
                              step_roofline=truth.step_roofline,
                              attention=truth.attention_decode_s > 0)  # fmt: skip
        # The fitted server runs with its own decode model, attention_decode_s included
        # (fitted, not the truth's: without that fit, decode_tps / decode_degrade held the
        # attention cost and the truth's term on top counted it twice, every cross-fit
        # latency +1 to +14 %). The server facts (slots, step budget, prefix caching, KV
        # capacity, roofline step) stay the truth's.
        fitted = {k: getattr(cal.profile, k) for k in FITTED_SERVER}
        path = truth.replace(**fitted).save(base / f"fitted_on_{fit_on}.toml")
        for topo in TOPOLOGIES:
            if topo == fit_on:
                continue
            pred = _run([topo], 4, runs, seed, base / f"cross_{fit_on}_{topo}", llm=f"sim/{path}")
            want = metrics(calls[calls["topology"] == topo])
            got = metrics(pred.calls_df())
            for m in want:
                rows.append({"fitted_on": fit_on, "predicted": topo, "metric": m,
                             "truth": want[m], "pred": got[m],
                             "diff": got[m] / want[m] - 1.0, **fitted})  # fmt: skip
    return rows


def format_cross_fit(rows: list[dict[str, Any]]) -> str:
    lines = ["\nCalibration across topologies (server fitted on one topology's calls, lengths",
             "per call label as inputs, the other two re-run; truth = the sim/vllm-3b runs):",
             f"{'fitted on':10s} {'predicted':10s} {'metric':12s} {'truth':>8s} {'pred':>8s} "
             f"{'diff':>7s} <=15%"]  # fmt: skip
    for r in rows:
        ok = "yes" if abs(r["diff"]) <= 0.15 else "NO"
        lines.append(f"{r['fitted_on']:10s} {r['predicted']:10s} {r['metric']:12s} "
                     f"{r['truth']:8.3f} {r['pred']:8.3f} {_pct(r['diff']):>7s} {ok}")  # fmt: skip
    n_ok = sum(abs(r["diff"]) <= 0.15 for r in rows)
    lines.append(f"within 15 %: {n_ok} of {len(rows)}")
    from agentlab.llm import get_profile

    truth = get_profile("vllm-3b")
    lines.append("Fitted server (the round trip; truth = sim/vllm-3b):")
    keys = FITTED_SERVER
    lines.append(f"{'fitted on':10s} " + " ".join(f"{k:>18s}" for k in keys))
    lines.append(f"{'truth':10s} " + " ".join(f"{getattr(truth, k):18.4g}" for k in keys))
    for fit_on in dict.fromkeys(r["fitted_on"] for r in rows):
        r = next(x for x in rows if x["fitted_on"] == fit_on)
        lines.append(f"{fit_on:10s} " + " ".join(f"{r[k]:18.4g}" for k in keys))
    return "\n".join(lines)


def mesh_median_pieces(calls: Any, burst_pub: float = PAPER_BURST[4]) -> dict[str, float]:
    """Why the full-mesh IAT median misses: the median sits at the ``(0.5 - b) / (1 - b)``
    quantile of the gaps >= 50 ms, so a burst fraction ``b`` a few points low moves it up a
    steep part of that distribution. Returns the simulated median, the median the simulated
    gaps >= 50 ms would give at the published burst fraction, and the share of all IATs in
    0.5-50 ms and under 0.5 ms, simulated and published
    (:func:`~agentlab.analysis.published_iat_histogram_df`: gaps between calls of one
    fan-out longer than the client's send-side CPU, which Star's published gaps almost
    never show). In the sim the
    gaps under 0.5 ms are the round's first five sends through the 5-thread pool (4 of a
    round's 12 gaps); the published mass under 0.5 ms is ~8 points smaller and its
    0.5-9 ms bins ~7 points larger (a quarter of those gaps longer in the paper's client)."""
    import numpy as np

    from agentlab.analysis import PAPER_WINDOW, iat_df

    mesh = calls[(calls.topology == "full_mesh") & calls.stage.isin(PAPER_WINDOW)]
    x = iat_df(mesh, stage=None, by=["run_id"])["iat"].to_numpy(dtype=float)
    slow = x[x >= 0.05]
    sub_pub, mid_pub = published_iat_shares("full_mesh", (0.0, 0.0005, 0.05))
    return {
        "median": float(np.median(x)),
        "burst_fraction": float(np.mean(x < 0.05)),
        "median_at_published_burst": float(np.quantile(slow, (0.5 - burst_pub) / (1 - burst_pub))),
        "mid_gaps_sim": float(np.mean((x >= 0.0005) & (x < 0.05))),
        "mid_gaps_published": mid_pub,
        "sub_gaps_sim": float(np.mean(x < 0.0005)),
        "sub_gaps_published": sub_pub,
    }


def format_mesh_median(m: dict[str, float], pub: float) -> str:
    return "\n".join([
        "\nFull-mesh IAT median, decomposed (see mesh_median_pieces)",
        f"  simulated median {m['median']:.4f} s ({_pct(m['median'] / pub - 1)}) at burst fraction "
        f"{m['burst_fraction']:.3f} (published {PAPER_BURST[4]:.3f})",
        f"  the simulated gaps >= 50 ms at the published burst fraction: "
        f"{m['median_at_published_burst']:.4f} s ({_pct(m['median_at_published_burst'] / pub - 1)})",
        f"  IATs in 0.5-50 ms: simulated {m['mid_gaps_sim']:.3f}, published "
        f"{m['mid_gaps_published']:.3f} of all (the missing burst share)",
        f"  IATs under 0.5 ms: simulated {m['sub_gaps_sim']:.3f}, published "
        f"{m['sub_gaps_published']:.3f} (a round's first sends through the 5-thread pool)",
    ])  # fmt: skip


#: agentraffic's name of each topology: its keys in datasets/agentraffic_server.json
_LOAD_KEY = {"sequential": "horizontal", "star": "vertical", "full_mesh": "full_mesh"}


def latency_pieces(calls: Any, table: Any) -> list[dict[str, Any]]:
    """Discussion latency two ways, simulated next to published: pooled over all calls as
    the server timed them (``load.discussion.<topology>.latency_p50_s / _p95_s``, server
    latency) and Table 2's per-run p50 / p95 averaged over runs (``duration_seconds``,
    timed by the calling agent: it includes the hop through Agent B). The server model is
    held to the first; the ratio of the two shows what the per-run aggregation adds in each
    (between-run spread of the replies, the agent-side hop), which the sim lacks where its
    ratio is the smaller."""
    import numpy as np

    load = _published_server()["load"]
    d = calls[calls["stage"] == "discussion"]
    rows = []
    for topo in TOPOLOGIES:
        lat = (d.loc[d.topology == topo, "end"] - d.loc[d.topology == topo, "start"]).to_numpy()
        pub = load["discussion"][_LOAD_KEY[topo]]
        t2 = table.set_index("topology").loc[topo]
        for q, key in ((50, "p50"), (95, "p95")):
            rows.append({"topology": topo, "q": key,
                         "pooled_sim": float(np.percentile(lat, q)),
                         "pooled_pub": float(pub[f"latency_{key}_s"]),
                         "per_run_sim": float(t2[f"latency_{key}"])})  # fmt: skip
    return rows


def format_latency_pieces(rows: list[dict[str, Any]], cmp2: Any) -> str:
    pub2 = cmp2.set_index(["metric", "topology"])["paper"]
    lines = ["\nDiscussion latency: pooled (server-timed, load.discussion) and per run averaged"
             " (Table 2, agent-timed); ratio = per run / pooled",
             f"{'topology':10s} {'q':3s} {'pooled sim':>10s} {'pub':>7s} {'diff':>6s}  "
             f"{'per-run sim':>11s} {'pub':>7s} {'diff':>6s}  {'ratio sim':>9s} {'pub':>6s}"]  # fmt: skip
    for r in rows:
        p2 = float(pub2[(f"latency_{r['q']}", r["topology"])])
        lines.append(
            f"{r['topology']:10s} {r['q']:3s} {r['pooled_sim']:10.3f} {r['pooled_pub']:7.3f} "
            f"{_pct(r['pooled_sim'] / r['pooled_pub'] - 1):>6s}  {r['per_run_sim']:11.3f} "
            f"{p2:7.3f} {_pct(r['per_run_sim'] / p2 - 1):>6s}  "
            f"{r['per_run_sim'] / r['pooled_sim']:9.3f} {p2 / r['pooled_pub']:6.3f}"
        )
    return "\n".join(lines)


#: the IAT ranges of the by-range comparison (s; edges of the published histogram)
IAT_RANGES = (0.0, 0.0005, 0.05, 0.5, 5.0, 15.8114, 50.0, math.inf)


def iat_ranges(calls: Any) -> list[dict[str, Any]]:
    """Each topology's discussion IATs by range (:data:`IAT_RANGES`), simulated against the
    published histogram (:func:`~agentlab.analysis.paper_iat_histogram_df`): the shape of
    what Table 2 summarises in a median and a p95."""
    from agentlab.analysis import paper_iat_histogram_df

    h = paper_iat_histogram_df(calls)
    rows = []
    for topology, g in h.groupby("topology", sort=False):
        sim, pub = (range_sums(g, col, IAT_RANGES) for col in ("simulated", "published"))
        rows += [{"topology": topology, "lo": a, "hi": b, "simulated": x, "published": y}
                 for (a, b), x, y in zip(itertools.pairwise(IAT_RANGES), sim, pub, strict=True)]  # fmt: skip
    return rows


def _range_label(a: float, b: float) -> str:
    def s(x: float) -> str:
        if x == 0 or math.isinf(x):
            return "0" if x == 0 else "inf"
        return f"{x * 1000:g}ms" if x < 1 else f"{x:.3g}s"

    return f"{s(a)}-{s(b)}"


def format_iat_ranges(rows: list[dict[str, Any]]) -> str:
    ranges = list(dict.fromkeys((r["lo"], r["hi"]) for r in rows))
    head = "".join(f"{_range_label(a, b):>15s}" for a, b in ranges)
    lines = ["\nDiscussion IATs by range, % of all (simulated / published; the published"
             " histogram: paper_iat_figure)", f"{'topology':11s}{head}"]  # fmt: skip
    for topology in dict.fromkeys(r["topology"] for r in rows):
        cells = [r for r in rows if r["topology"] == topology]
        lines.append(f"{topology:11s}" + "".join(
            f"{100 * r['simulated']:7.1f} /{100 * r['published']:5.1f}" for r in cells))  # fmt: skip
    return "\n".join(lines)


#: the IAT ranges of Star's slow-gap comparison (s; edges of summary.json's log bins)
STAR_GAP_RANGES = (0.05, 5.0, 15.8114, 21.0848, 50.0, math.inf)


def range_sums(h: Any, col: str, edges: tuple[float, ...]) -> list[float]:
    """``h[col]`` summed over the bins (``left``, ``right`` of a histogram on the published
    edges) whose left edge lies in each ``[a, b)`` of ``edges``; every edge a bin edge, 0
    or infinity."""
    import numpy as np

    lo = h["left"].to_numpy()
    bins = np.concatenate([lo, h["right"].to_numpy()[-1:], [0.0, math.inf]])
    for e in edges:
        if not np.any(np.isclose(bins, e, rtol=1e-5)):
            raise ValueError(f"{e} s is not an edge of the published IAT histogram")
    v = h[col].to_numpy()
    return [float(v[(lo >= x * (1 - 1e-5)) & (lo < y * (1 - 1e-5))].sum())
            for x, y in itertools.pairwise(edges)]  # fmt: skip


def published_iat_shares(topology: str, edges: tuple[float, ...]) -> list[float]:
    """Shares of a topology's published pooled IATs between consecutive ``edges``
    (:func:`range_sums` over :func:`~agentlab.analysis.published_iat_histogram_df`)."""
    from agentlab.analysis import published_iat_histogram_df

    h = published_iat_histogram_df()
    return range_sums(h[h["topology"] == topology], "fraction", edges)


def star_gap_pieces(calls: Any) -> dict[str, Any]:
    """Why Star's IAT p95 misses. Its slow gaps are of three kinds: a solver's latency (the
    reviewers are sent when the proposal is back), the slowest of a fan-out's 3 reviewers
    (the next proposal waits for every critique: ``ThreadPoolExecutor`` ...
    ``future.result()`` in the original's ``_vertical_decision``), and, where a run iterates,
    the gap from an iteration's last reviewer to the next iteration's solver (its execution,
    evaluation and recruitment lie in between: Table 2 pools a run's discussion IATs over
    its iterations, 7,836 calls - 481 runs = 7,355 IATs). Per kind: count, median, p90 and
    the share above the published IAT p95; the shares of all IATs by range
    (:data:`STAR_GAP_RANGES`) per kind, against the published histogram; and, as a
    counterfactual on the same draws, the p95 and the slow gaps' median had the next
    proposal waited for the first-sent reviewer only (what fully correlated reviewer
    lengths within a fan-out would give). Diagnostic only: no model parameter is set from
    it."""
    import numpy as np

    from agentlab.analysis import PAPER_WINDOW
    from agentlab.analysis.paper import published_paper_df

    pub = published_paper_df().set_index(["table", "topology", "metric", "dist"])["value"]
    iat_p95 = float(pub[("table2", "star", "iat_p95", "")])
    slow_median = float(pub[("table3", "star", "median_s", "lognorm")])
    c = calls[(calls.topology == "star") & calls.stage.isin(PAPER_WINDOW)].copy()
    for col in ("call", "iteration"):
        c[col] = c["labels"].map(lambda d, k=col: d.get(k) if isinstance(d, dict) else None)
    c = c.sort_values(["run_id", "start"])
    run = c.groupby("run_id")
    c["gap"] = run["start"].diff()
    c["after"] = run["call"].shift()
    c["prev_iteration"] = run["iteration"].shift()
    # fan-out k = the reviewers sent after the run's k-th solver call
    c["fan"] = (c["call"] == "vertical_solver").astype(int).groupby(c["run_id"]).cumsum()
    rev = c[c["call"] == "vertical_reviewer"]
    by_fan = rev.groupby(["run_id", "fan"])
    lat = rev["end"] - rev["start"]
    spread = (by_fan["end"].max() - by_fan["end"].first()).rename("spread")
    x = c.dropna(subset=["gap"]).copy()
    x["prev_fan"] = x["fan"] - (x["call"] == "vertical_solver").astype(int)
    x = x.join(spread, on=["run_id", "prev_fan"])
    cross = x["iteration"] != x["prev_iteration"]
    after_rev = (x["after"] == "vertical_reviewer") & (x["call"] == "vertical_solver")
    # (a next iteration also starts once every critique is back: its gap shrinks alike)
    cf = np.where(after_rev, x["gap"] - x["spread"].fillna(0.0), x["gap"])
    gaps = x["gap"].to_numpy(dtype=float)
    out: dict[str, Any] = {"p95": float(np.quantile(gaps, 0.95)),
                           "published_p95": iat_p95, "published_slow_median": slow_median,
                           "p95_first_reviewer": float(np.quantile(cf, 0.95)),
                           "slow_median": float(np.median(gaps[gaps >= 0.05])),
                           "slow_median_first_reviewer": float(np.median(cf[cf >= 0.05])),
                           "reviewer_latency_median": float(lat.median()),
                           "slowest_reviewer_latency_median": float(
                               (by_fan["end"].max() - by_fan["start"].min()).median())}  # fmt: skip
    kinds = {"solver reply": (x["after"] == "vertical_solver") & ~cross,
             "slowest reviewer": after_rev & ~cross, "next iteration": cross}  # fmt: skip
    out["kinds"] = {
        k: {"n": int(m.sum()), "median": float(x.loc[m, "gap"].median()),
            "p90": float(x.loc[m, "gap"].quantile(0.9)),
            "above_published_p95": float((x.loc[m, "gap"] > iat_p95).sum() / len(x))}
        for k, m in kinds.items()
    }  # fmt: skip
    edges = STAR_GAP_RANGES
    out["ranges"] = [
        {"lo": a, "hi": b, "published": p,
         "simulated": float(((gaps >= a) & (gaps < b)).mean()),
         **{k: float(((x["gap"] >= a) & (x["gap"] < b) & m).sum() / len(x))
            for k, m in kinds.items()}}
        for (a, b), p in zip(itertools.pairwise(edges), published_iat_shares("star", edges),
                             strict=True)
    ]  # fmt: skip
    return out


def format_star_gaps(g: dict[str, Any]) -> str:
    lines = [
        "\nStar IAT p95, decomposed (see star_gap_pieces; all IATs of the window, pooled)",
        f"  simulated p95 {g['p95']:.2f} s (published {g['published_p95']:.2f} s); slow-gap "
        f"median {g['slow_median']:.2f} s (Table 3 lognormal median "
        f"{g['published_slow_median']:.2f} s)",
        f"{'  gap after':20s} {'n':>5s} {'median':>7s} {'p90':>7s}  share of all IATs above "
        f"{g['published_p95']:.2f} s",
    ]  # fmt: skip
    for k, v in g["kinds"].items():
        lines.append(f"  {k:18s} {v['n']:5d} {v['median']:7.2f} {v['p90']:7.2f}  "
                     f"{100 * v['above_published_p95']:.1f} %")  # fmt: skip
    kinds = list(g["kinds"])
    lines.append(f"  {'IATs in [s)':18s} {'published':>9s} {'simulated':>9s}  of which: "
                 + " / ".join(kinds))  # fmt: skip
    for r in g["ranges"]:
        rng = f"[{r['lo']:.3g}, {r['hi']:.3g})"
        lines.append(f"  {rng:18s} {100 * r['published']:8.2f}% {100 * r['simulated']:8.2f}%  "
                     + " / ".join(f"{100 * r[k]:.2f}" for k in kinds))  # fmt: skip
    lines += [
        f"  a reviewer's latency median {g['reviewer_latency_median']:.2f} s, a fan-out's "
        f"slowest {g['slowest_reviewer_latency_median']:.2f} s",
        f"  counterfactual (next proposal after the first-sent reviewer): p95 "
        f"{g['p95_first_reviewer']:.2f} s, slow-gap median {g['slow_median_first_reviewer']:.2f} s",
    ]  # fmt: skip
    return "\n".join(lines)


def _exponential_rejection(
    calls: Any, seed: int, pvalue: Literal["exact", "lilliefors"] = EXPON_PVALUE
) -> dict[str, float]:
    from agentlab.analysis import paper_fit_samples, subsample_ks_df

    out = {}
    for topo, x in paper_fit_samples(calls).items():
        if len(x) < 200:
            continue
        df = subsample_ks_df(x, "expon", sizes=(200,), repeats=200, seed=seed, pvalue=pvalue)
        out[topo] = float(df["rejection_rate"].iloc[0])
    return out


def _run(
    topologies: list[str], agents: int, runs: int, seed: int, out: Path, llm: str = "sim/vllm-3b"
) -> Any:
    from agentlab.topology import Experiment

    exp = Experiment(topologies=topologies, agents=agents, runs=runs, llm=llm,
                     seed=seed, clock="virtual", out=out, progress=False)  # fmt: skip
    return exp.run_sync()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="40 runs per topology and per N")
    ap.add_argument("--runs", type=int, default=None, help="runs per topology (default 200)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="parent of the run directories (default: temp)")
    ap.add_argument("--json", default=None, help="write the results to this JSON file")
    ap.add_argument("--cross-fit", action="store_true",
                    help="also fit the server on each topology and predict the other two")  # fmt: skip
    args = ap.parse_args(argv)
    runs = args.runs or (40 if args.quick else 200)

    from agentlab.analysis import (
        paper_comparison_df,
        paper_fit_comparison_df,
        paper_fits_df,
        paper_summary_df,
    )

    base = scratch_path(args.out, "agentlab-bench-topology-paper-")
    t0 = time.perf_counter()
    res = _run(TOPOLOGIES, 4, runs, args.seed, base / "n4")
    wall = time.perf_counter() - t0
    calls = res.calls_df()
    t1 = time.perf_counter()
    table = paper_summary_df(calls)
    fits = paper_fits_df(calls)
    analysis_s = time.perf_counter() - t1
    cmp2 = paper_comparison_df(table)
    cmp3 = paper_fit_comparison_df(fits)

    burst: dict[int, float] = {}
    for n in SCALING_N:
        if n == 4:
            sub = calls[calls.topology == "full_mesh"]
        else:
            sub = _run(["full_mesh"], n, runs, args.seed, base / f"mesh_n{n}").calls_df()
        burst[n] = float(paper_summary_df(sub)["burst_fraction"].iloc[0])

    rej = _exponential_rejection(calls, args.seed)
    rej_exact = _exponential_rejection(calls, args.seed, "exact")
    print(f"\n3 topologies x {runs} runs x N=4 on sim/vllm-3b (virtual clock): {len(calls)} "
          f"calls in {wall:.1f} s wall (+{analysis_s:.2f} s analysis)")  # fmt: skip
    print(format_table2(cmp2))
    peaks = true_peaks(table)
    print(format_true_peaks(peaks))
    print(format_table3(cmp3, rej, rej_exact))
    print(format_burst(burst))
    ranges = iat_ranges(calls)
    print(format_iat_ranges(ranges))
    mm = mesh_median_pieces(calls)
    pub_median = cmp2[(cmp2.metric == "iat_median") & (cmp2.topology == "full_mesh")]["paper"]
    print(format_mesh_median(mm, float(pub_median.iloc[0])))
    lp = latency_pieces(calls, table)
    print(format_latency_pieces(lp, cmp2))
    sg = star_gap_pieces(calls)
    print(format_star_gaps(sg))
    pc = pieces(calls)
    print(format_pieces(pc))
    cross = cross_fit(calls, runs, args.seed, base) if args.cross_fit else []
    if cross:
        print(format_cross_fit(cross))
    result = {
        "runs": runs, "agents": 4, "calls": len(calls), "wall_s": wall,
        "analysis_s": analysis_s, "table2": table.to_dict("records"),
        "table2_vs_paper": cmp2.to_dict("records"), "table3": fits.drop(columns="params")
        .to_dict("records"), "table3_vs_paper": cmp3.to_dict("records"),
        "full_mesh_burst_fraction_by_n": {str(k): v for k, v in burst.items()},
        "exponential_rejection_n200": rej,
        "exponential_rejection_n200_ks_table": rej_exact, "cross_fit": cross, "pieces": pc,
        "mesh_median_pieces": mm, "star_gap_pieces": sg, "latency_pieces": lp,
        "true_peaks": peaks, "iat_ranges": ranges,
    }  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
