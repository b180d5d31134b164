"""Fit a simulator profile (:class:`~agentlab.llm.SimProfile`) from recorded ``llm_calls``.

The model fitted is the step model of :mod:`agentlab.llm.sim_engine`:

- **TTFT** of a call that found the server idle (no other call in flight when it started)
  is ``overhead_s + 1 / decode_tps + prompt / prefill_tps``: a line in the prompt tokens
  (``step_roofline=True``: ``overhead_s + max(1 / decode_tps, prompt / prefill_tps)``, the
  line through ``overhead_s`` of the prompts above the knee, as ``sim/vllm-3b`` runs).
- **Decode time** ``D = end - first_token`` of a call with ``C`` tokens is
  ``(C - 1) * b0 * (1 + d * (n - 1)) + Q / prefill_tps`` where ``n`` is the mean number of
  calls decoding alongside it per step (from the overlap of the recorded decode
  intervals, weighted per step) and ``Q`` the prompt tokens of calls whose prefill
  finished inside its window (they shared its steps). A least-squares fit gives
  ``decode_tps = 1 / b0`` and ``decode_degrade = d``; the spread of ``log(D / fit)`` is
  ``decode_jitter`` (and the mean-1 log-normal's ``E[1/s]`` bias is removed from ``b0``).
  ``attention=True`` adds ``(C - 1) * a * K``, ``K`` the per-step mean of the summed
  context of the calls decoding alongside (itself included): ``attention_decode_s = a``.
- **Lengths**: a log-normal per ``stage`` label (median and sigma of log tokens), with
  the pooled fit as the default; with ``lengths_by=["call", "round"]`` (CLI
  ``--by-label call,round``) a law per call label and round that keeps the quartiles, p95
  and mean (:class:`~agentlab.llm.sim_lengths.LengthDist`), so a workflow re-run on the
  fitted profile keeps each call's lengths (the stage fit pools what differs by topology);
  ``"task_category"`` added qualifies them by the task's category too (``call#2/math``).
  With ``length_corr_by="run_id"`` (CLI ``--length-corr-by``) each call label also gets
  ``length_corr``: the intraclass correlation, within the groups that column names, of the
  normal scores of its calls' lengths under their fitted laws (a reply at the output cap
  scores the middle of the law's mass there), as the simulator draws them.
- **Tool calls**: calls whose ``finish_reason`` is ``tool_calls`` are left out of the
  length fits (their length is their arguments', which the simulator writes itself; a
  pooled fit gave a persona society's text replies a median of 43 tokens instead of 121).
- **Prefix caching**: with a ``cached_tokens`` column (vLLM's
  ``prompt_tokens_details.cached_tokens``) a call's prompt tokens here are the uncached
  ones, the prefill work, in the fit and in the replay; the fitted profile caches prefixes
  (``prefix_caching``, unlimited KV) when any call had cached tokens, so a workflow re-run
  on it prefills what the recorded server did.
- **Tokenizer and step**: the fitted profile counts a re-run's prompts as the recorded
  calls were counted, and fits the step they ran on: the run's own ``sim/`` profile's
  tokenizer and ``step_roofline`` (with its client's overrides from ``run.json`` when a run
  is given), or the ones passed (``tokenizer=``, ``step_roofline=``, CLI ``--tokenizer``,
  ``--[no-]step-roofline``); a real provider's counts need the tokenizer named (a note
  says so) and get the additive step unless told.
- **Concurrency** at a call's start counts calls started at the same instant (a fan-out
  sent with no client CPU between the requests) as in flight: none of them found the
  server idle.

Confidence intervals are bootstrap percentiles over calls, widened for the decode
parameters by a parametric bootstrap (refits on replays with fresh speed draws). Goodness of fit replays the
recorded arrivals (start times, prompt and completion sizes) through the fitted engine and
compares predicted with observed TTFT and latency (KS statistic, p50/p95); with ``train``
the fit uses only those calls and the comparison is reported for the rest (held out).
``slots`` and ``max_num_batched_tokens`` are server configuration, not identifiable from
a light trace: pass them (the default ``slots`` is the most calls seen decoding at once).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from agentlab.analysis.calibrate_lengths import (
    QUALIFIERS,
    fit_length_corr,
    fit_length_laws,
    fit_stage_lengths,
    stage_length_ci,
)
from agentlab.analysis.calibrate_step import fit_lines, load_features
from agentlab.analysis.replay_engine import predict_calls
from agentlab.errors import ConfigError
from agentlab.llm.sim_lengths import LengthDist
from agentlab.llm.sim_profiles import SimProfile

__all__ = ["Calibration", "calibrate", "fit_calibration", "predict_calls"]

#: what a profile counts tokens with unless told (a real provider's counts need naming)
_DEFAULT_TOKENIZER = SimProfile.__dataclass_fields__["tokenizer"].default


@dataclass
class Calibration:
    """A fitted profile with its evidence.

    Attributes:
        profile: the fitted :class:`SimProfile`.
        params: one row per fitted parameter: ``value``, ``ci_low``, ``ci_high`` (95%
            bootstrap percentiles), ``n`` (calls it was fitted on).
        fit: goodness of fit: one row per (``subset``, ``metric``) with ``ks``,
            ``p50_obs``, ``p50_pred``, ``p95_obs``, ``p95_pred`` and relative errors.
        predicted: the input calls with ``ttft_pred`` / ``latency_pred`` columns.
    """

    profile: SimProfile
    params: pd.DataFrame
    fit: pd.DataFrame
    predicted: pd.DataFrame = field(repr=False)
    notes: list[str] = field(default_factory=list)

    def report(self) -> str:
        """A plain-text report (parameters with CIs, the fit table, then what the run
        could not identify)."""
        with pd.option_context("display.width", 120, "display.max_columns", 20,
                               "display.float_format", _number):  # fmt: skip
            text = (
                f"profile {self.profile.name}\n{self.params.to_string(index=False)}\n\n"
                f"{self.fit.to_string(index=False)}"
            )
        return text + "".join(f"\n\nnote: {n}" for n in self.notes)


def _number(v: float) -> str:
    """A report's number: 4 significant digits, large ones whole with separators
    (``9,110``, not ``9.110000e+03``)."""
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def _calls_and_overrides(run_or_calls: Any) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The recorded calls, and the profile overrides the run's client was made with
    (``run.json``'s ``config.llm.defaults``, e.g. ``LLMClient("sim/vllm-3b", slots=128)``)
    with the model they apply to under ``"model"``; no overrides for a calls DataFrame (its
    rows name the model only) or a run that recorded no client. A run directory is opened
    once, for both."""
    if isinstance(run_or_calls, pd.DataFrame):
        return run_or_calls, {}
    run = run_or_calls
    if not hasattr(run, "llm_calls_df"):
        from agentlab.store.run import open_run

        run = open_run(run)
    manifest = getattr(run, "manifest", None)  # (a Run's property: run.json)
    llm = (manifest.get("config") or {}).get("llm") if isinstance(manifest, dict) else None
    if not isinstance(llm, dict) or not isinstance(llm.get("defaults"), dict):
        return run.llm_calls_df(), {}
    fields = SimProfile.__dataclass_fields__
    over = {k: v for k, v in llm["defaults"].items() if k in fields and k != "name"}
    return run.llm_calls_df(), ({"model": llm.get("model"), **over} if over else {})


def _label_dict(x: Any) -> dict[str, Any]:
    """A call's ``labels``: a dict, or the JSON text ``llm_calls`` stores."""
    if isinstance(x, dict):
        return x
    if isinstance(x, str) and x.startswith("{"):
        try:
            out = json.loads(x)
        except ValueError:
            return {}
        return out if isinstance(out, dict) else {}
    return {}


def _prepare(df: pd.DataFrame, stage_col: str, label_cols: tuple[str, ...] = ()) -> pd.DataFrame:
    need = ["start", "end", "prompt_tokens", "completion_tokens"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ConfigError(f"calibrate: llm_calls lack columns {missing}; have {list(df.columns)}")
    d = df.copy()
    if "outcome" in d.columns:
        d = d[d["outcome"].fillna("ok") == "ok"]
    for col in (stage_col, *label_cols):
        if col not in d.columns and "labels" in d.columns:
            d[col] = [_label_dict(x).get(col) for x in d["labels"]]
        if col not in d.columns:
            d[col] = None
    if "first_token" not in d.columns:
        d["first_token"] = np.nan
    for c in ("start", "end", "first_token", "prompt_tokens", "completion_tokens"):
        d[c] = pd.to_numeric(d[c], errors="coerce").astype(float)
    # attention reads every token of the context, cached or not
    d["context_tokens"] = d["prompt_tokens"]
    d["cached_tokens_in"] = 0.0
    if "cached_tokens" in d.columns:  # vLLM prefills only the prompt tokens it has not cached
        cached = pd.to_numeric(d["cached_tokens"], errors="coerce").fillna(0.0)
        d["cached_tokens_in"] = cached
        d["prompt_tokens"] = np.maximum(1.0, d["prompt_tokens"] - cached)
    d = d[np.isfinite(d["start"]) & np.isfinite(d["end"]) & (d["completion_tokens"] >= 1)]
    if len(d) < 3:
        raise ConfigError(f"calibrate: need at least 3 successful calls, got {len(d)}")
    return d.reset_index(drop=True)


def _text_replies(d: pd.DataFrame) -> pd.DataFrame:
    """The calls whose length the profile's laws draw: all but tool calls (a recorded
    ``finish_reason`` of ``tool_calls``), unless fewer than 3 are left."""
    if "finish_reason" not in d.columns:
        return d
    texts = d[d["finish_reason"].fillna("stop") != "tool_calls"]
    return texts.reset_index(drop=True) if len(texts) >= 3 else d


def _recorded_profiles(d: pd.DataFrame, overrides: dict[str, Any]) -> list[SimProfile]:
    """The ``sim/`` profiles the recorded calls ran on, with the client's ``overrides``
    (:func:`_calls_and_overrides`) on the model they name; none unless every call ran on a
    ``sim/`` profile (not a real provider) and every one still loads."""
    from agentlab.llm.sim_profiles import get_profile

    models = sorted(set(d["model"].dropna())) if "model" in d.columns else []
    if not models or not all(isinstance(m, str) and m.startswith("sim/") for m in models):
        return []
    over = {k: v for k, v in overrides.items() if k != "model"}
    try:
        return [get_profile(m[4:], **(over if m == overrides.get("model") else {}))
                for m in models]  # fmt: skip
    except (ConfigError, OSError):  # (a profile file gone since the run)
        return []


def _tokenizer_of(
    d: pd.DataFrame, tokenizer: str | None, profs: list[SimProfile]
) -> tuple[dict[str, Any], str]:
    """The fitted profile's tokenizer fields (``tokenizer`` and, from a recorded ``sim/``
    profile, its text's characters per token) and a note when the counts' tokenizer is
    unknown."""
    from agentlab.llm.tokens import check_tokenizer_name

    if tokenizer is not None:
        return {"tokenizer": check_tokenizer_name(tokenizer)}, ""
    toks = {(p.tokenizer, p.text_cpt_median, p.text_cpt_sigma) for p in profs}
    if len(toks) == 1:
        tok, cpt, sig = toks.pop()
        return {"tokenizer": tok, "text_cpt_median": cpt, "text_cpt_sigma": sig}, ""
    models = sorted(set(d["model"].dropna())) if "model" in d.columns else []
    said = ", ".join(map(str, models)) or "an unnamed model"
    return {}, (
        f"the prompt tokens were counted by {said}'s server; the profile counts a re-run's "
        f"prompts with {_DEFAULT_TOKENIZER}: name the server's tokenizer (tokenizer="
        "'llama3' or 'chars:<characters per token>', CLI --tokenizer) so a workflow re-run "
        "on the profile prefills as much as the recorded one"
    )


def _step_roofline(step_roofline: bool | None, profs: list[SimProfile]) -> bool:
    """The step fitted: as given, else the recorded ``sim/`` profiles', else additive.
    The additive line fitted to a roofline server's idle TTFTs falls below one step, so
    the fit went through the floor: ``sim/vllm-3b``'s persona society came back with
    ``prefill_tps`` +17-20 % and ``overhead_s`` 0 (now the profile's, as recorded)."""
    if step_roofline is not None:
        return step_roofline
    return bool(profs) and all(p.step_roofline for p in profs)


def _gof(pred: pd.DataFrame, subset: str) -> list[dict[str, Any]]:
    from scipy.stats import ks_2samp

    rows = []
    obs_all = {"ttft": pred["first_token"] - pred["start"], "latency": pred["end"] - pred["start"]}
    for metric, obs in obs_all.items():
        p = pred[f"{metric}_pred"]
        ok = np.isfinite(obs) & np.isfinite(p)
        if ok.sum() < 3:
            continue
        o, q = obs[ok].to_numpy(), p[ok].to_numpy()
        row: dict[str, Any] = {"subset": subset, "metric": metric, "n": int(ok.sum())}
        row["ks"] = float(ks_2samp(o, q).statistic)
        for pct in (50, 95):
            po, pp = float(np.percentile(o, pct)), float(np.percentile(q, pct))
            row[f"p{pct}_obs"], row[f"p{pct}_pred"] = po, pp
            row[f"p{pct}_err"] = (pp - po) / po if po else math.nan
        rows.append(row)
    return rows


def fit_calibration(
    run_or_calls: Any,
    *,
    name: str = "calibrated",
    slots: int | None = None,
    max_num_batched_tokens: int = 0,
    train: Any = None,
    by: str | list[str] | None = None,
    client: str | None = None,
    stage_col: str = "stage",
    lengths_by: str | list[str] | None = None,
    n_boot: int = 200,
    n_sim: int = 20,
    seed: int = 0,
    source: str = "",
    step_roofline: bool | None = None,
    attention: bool = False,
    length_corr_by: str | None = None,
    tokenizer: str | None = None,
) -> Calibration:
    """Fit a profile and report how well it fits; see the module docstring.

    Args:
        run_or_calls: an ``llm_calls`` DataFrame, a ``Run`` or a run directory.
        name: the profile's name.
        slots: the server's ``max_num_seqs`` (default: most calls seen decoding at once).
        max_num_batched_tokens: the server's step token budget (0 = unlimited).
        train: boolean mask (Series/array aligned with the calls) or a callable taking the
            calls frame: the calls to fit on; the rest are the held-out check.
        by: column(s) separating independent runs / servers (replayed separately).
        client: column naming each call's closed-loop client: the replay then chains each
            client's calls on predicted ends (see :mod:`agentlab.analysis.replay_engine`).
        stage_col: the stage label column (or taken from a ``labels`` dict column).
        lengths_by: label column(s) the output lengths are fitted by, e.g.
            ``["call", "round"]``: the first names the call, ``round`` / ``topology`` /
            ``task_category`` qualify it (keys ``call#2``, ``call@star``, ``call#2/math``,
            as :func:`~agentlab.llm.sim_lengths.length_keys` looks them up); each key gets
            its quartiles, p95 and mean (:class:`~agentlab.llm.sim_lengths.LengthDist`).
            Default: one log-normal per ``stage_col`` value.
        n_boot: bootstrap resamples (over calls) for the confidence intervals.
        n_sim: replays of the fitted engine with fresh decode-speed draws, refitted to
            widen the decode parameters' intervals (0 = off).
        seed: seed of the bootstrap and the replay.
        source: text for the profile's ``source`` (default says what it was fitted on).
        step_roofline: fit (and replay) the roofline step time the profile will run with
            (:attr:`SimProfile.step_roofline`, as ``sim/vllm-3b``); off: the additive step.
            Default: the recorded ``sim/`` profile's, else off.
        attention: also fit ``attention_decode_s`` (decode steps that slow with the context
            of the calls decoding, as ``sim/vllm-3b``'s); off: ``decode_tps`` and
            ``decode_degrade`` absorb that cost at the contexts of the fitted calls (the
            default even for ``sim/vllm-3b``'s runs: on two persona societies the term
            came back +13 % and +52 %, collinear with the batch's growth, and the replay's
            TTFT p50 +14 %; off, the same runs replay within 3 %).
        length_corr_by: a label column grouping calls (``"run_id"``): with ``lengths_by``,
            each call label's ``length_corr`` is fitted, the intraclass correlation of its
            length scores within those groups (:attr:`SimProfile.length_corr`; bootstrap
            interval over groups), and kept where that interval excludes 0 (``params``
            reports 0 otherwise). Default: none fitted (independent draws).
        tokenizer: how the profile counts prompt tokens (``"llama3"``, ``"chars:4.8"``):
            the tokenizer that counted the recorded ``prompt_tokens``. Default: the
            recorded ``sim/`` profile's; for other models ``chars:4``, with a note.

    Raises:
        ConfigError: too few usable calls, or no call that reveals prefill/decode speed.
    """
    by_label = [lengths_by] if isinstance(lengths_by, str) else list(lengths_by or [])
    bad = [c for c in by_label[1:] if c not in QUALIFIERS]
    if bad:
        raise ConfigError(
            f"calibrate: lengths_by {by_label}: after the call label only"
            f" {sorted(QUALIFIERS)} qualify a length key, not {bad}"
        )
    if length_corr_by and not by_label:
        raise ConfigError("calibrate: length_corr_by needs lengths_by (the laws it scores on)")
    corr_cols = (length_corr_by,) if length_corr_by else ()
    calls, overrides = _calls_and_overrides(run_or_calls)
    d = _prepare(calls, stage_col, (*by_label, *corr_cols))
    recorded = _recorded_profiles(d, overrides)  # (the step's and the tokenizer's default)
    step_roofline = _step_roofline(step_roofline, recorded)
    group = [by] if isinstance(by, str) else list(by or [])
    mask = np.ones(len(d), dtype=bool)
    if train is not None:
        m = train(d) if callable(train) else train
        mask = np.asarray(m, dtype=bool)
        if len(mask) != len(d):
            raise ConfigError(
                f"calibrate: train mask has {len(mask)} entries for {len(d)} usable calls"
            )
    feats = load_features(d, group, 0.0)
    first = fit_lines(feats[mask], step_roofline, attention)
    feats = load_features(d, group, first.get("decode_degrade", 0.0))  # step-weighted n
    tr = feats[mask].reset_index(drop=True)
    point = fit_lines(tr, step_roofline, attention)
    if "decode_tps" not in point or "prefill_tps" not in point:
        raise ConfigError(
            "calibrate: need streamed calls (first_token) with at least 2 tokens, and calls "
            "that found the server idle with different prompt sizes, to separate prefill "
            f"from decode; fitted only {sorted(point)}"
        )
    rng = np.random.default_rng(seed)
    boots: dict[str, list[float]] = {k: [] for k in point}
    for _ in range(n_boot):
        sample = tr.iloc[rng.integers(0, len(tr), len(tr))]
        for k, v in fit_lines(sample, step_roofline, attention).items():
            boots[k].append(v)
    texts = _text_replies(tr)  # (the length fits: tool calls are sized by their arguments)
    lengths = fit_stage_lengths(texts, stage_col)
    slots_seen = slots is None
    if slots is None:
        dec = feats[np.isfinite(feats["first_token"])]
        slots = max(1, _max_overlap(dec["first_token"].to_numpy(), dec["end"].to_numpy()))
    spread = _sim_spread(
        point,
        d,
        mask,
        group,
        slots,
        max_num_batched_tokens,
        seed,
        n_sim,
        client,
        step_roofline,
        attention,
    )
    rows = []
    for k, v in point.items():
        lo = float(np.percentile(boots[k], 2.5)) if boots[k] else math.nan
        hi = float(np.percentile(boots[k], 97.5)) if boots[k] else math.nan
        if len(spread.get(k, [])) >= 2:  # widen by the replay spread (basic bootstrap)
            q_lo, q_hi = np.percentile(spread[k], [2.5, 97.5])
            lo, hi = min(lo, 2 * v - float(q_hi)), max(hi, 2 * v - float(q_lo))
        rows.append({"parameter": k, "value": v, "ci_low": lo, "ci_high": hi, "n": len(tr)})
    stage_lengths: list[tuple[str, LengthDist]] = []
    cap = max(1024, int(d["completion_tokens"].max()))  # the profile's max_completion
    corr: list[tuple[str, float]] = []
    if by_label:
        laws = fit_length_laws(texts, by_label)
        if length_corr_by:
            for base, (rho, lo, hi, n) in fit_length_corr(texts, by_label, laws,
                                                           length_corr_by, rng, n_boot).items():  # fmt: skip
                # kept where the interval excludes independence: with ~100 calls in groups
                # of 1-3 an independent label's estimate alone reaches 0.1-0.3
                rho = rho if lo > 0 else 0.0
                if rho:
                    corr.append((base, rho))
                rows.append({"parameter": f"length_corr[{base}]", "value": rho, "n": n,
                             "ci_low": lo, "ci_high": hi})  # fmt: skip
        for key, (law, n) in laws.items():
            stage_lengths.append((key, law))
            for q, name in ((0.5, "median"), (0.95, "p95")):
                rows.append({"parameter": f"{name}[{key}]", "value": law.quantile(q), "n": n,
                             "ci_low": math.nan, "ci_high": math.nan})  # fmt: skip
            rows.append({"parameter": f"mean[{key}]", "value": law.mean(cap), "n": n,
                         "ci_low": math.nan, "ci_high": math.nan})  # fmt: skip
    for stage, (med, sig, n) in lengths.items():
        label = stage or "(all)"
        rows.append(
            {"parameter": f"median[{label}]", "value": med, "n": n, "ci_low": math.nan}
            | stage_length_ci(texts, stage_col, stage, rng, n_boot, 0)
        )
        rows.append(
            {"parameter": f"sigma[{label}]", "value": sig, "n": n, "ci_low": math.nan}
            | stage_length_ci(texts, stage_col, stage, rng, n_boot, 1)
        )
        if stage:
            stage_lengths.append((stage, LengthDist.lognormal(med, sig)))
    src = source or (
        f"calibrated by agentlab.calibrate from {len(tr)} calls "
        f"(slots={slots}, max_num_batched_tokens={max_num_batched_tokens})"
    )
    notes = []
    if slots_seen:
        # a lower bound: a replay on it queues calls the server ran at once as soon as one
        # ends a little late (4 experts on sim/vllm-3b's 8 slots: 5 seen, TTFT p50 +51 %)
        notes.append(
            f"slots = {slots} is the most calls seen decoding at once, a lower bound of the "
            "server's max_num_seqs: pass it (slots=, CLI --slots; vLLM's --max-num-seqs) "
            "unless the run kept the server full"
        )
    tok, tok_note = _tokenizer_of(d, tokenizer, recorded)
    if tok_note:
        notes.append(tok_note)
    prof = SimProfile(
        name=name,
        slots=slots,
        max_num_batched_tokens=max_num_batched_tokens,
        prefill_tps=point["prefill_tps"],
        decode_tps=point["decode_tps"],
        decode_degrade=point.get("decode_degrade", 0.0),
        decode_jitter=point.get("decode_jitter", 0.0),
        overhead_s=point.get("overhead_s", 0.0),
        completion_median=lengths[""][0],
        completion_sigma=lengths[""][1],
        lengths=tuple(stage_lengths),
        max_completion=cap,
        source=src,
        step_roofline=step_roofline,
        attention_decode_s=point.get("attention_decode_s", 0.0),
        length_corr=tuple(corr),
        length_corr_by=length_corr_by or "run_id",
        prefix_caching=bool((d["cached_tokens_in"] > 0).any()),
        **tok,
    )
    pred = predict_calls(prof, d, by=by, client=client, seed=seed)
    fit = _gof(pred[mask], "train")
    if not mask.all():
        fit += _gof(pred[~mask], "held-out")
    resampled = boots.get("prefill_tps", [])
    zeros = sum(1 for v in resampled if v <= 0)
    if point["prefill_tps"] <= 0 or zeros > 0.025 * max(1, len(resampled)):
        notes.append(
            "prefill_tps was not identified: the TTFT of the calls that found the server "
            "idle does not grow clearly with their prompt size ("
            + ("the profile has no prefill cost: TTFT = overhead + one step"
               if point["prefill_tps"] <= 0 else
               f"{zeros} of {len(resampled)} resamples found none; the "
               f"{point['prefill_tps']:,.0f} tokens/s fitted is not a measurement")
            + "; see the TTFT rows above). A run with more idle calls of varied prompt "
            "lengths (a lighter load) identifies it, or set prefill_tps in the TOML."
        )  # fmt: skip
    return Calibration(prof, pd.DataFrame(rows), pd.DataFrame(fit), pred, notes)


def _sim_spread(
    point: dict[str, float],
    d: pd.DataFrame,
    mask: np.ndarray,
    group: list[str],
    slots: int,
    budget: int,
    seed: int,
    reps: int,
    client: str | None,
    roofline: bool = False,
    attention: bool = False,
) -> dict[str, list[float]]:
    """Parametric bootstrap of the decode fit: refits on replays with fresh speed draws.

    Resampling calls keeps each call's batch features fixed, but those features depend on
    how the speed factors of calls decoding together happened to fall; replaying the
    recorded arrivals through the fitted engine with new draws and fitting again shows
    that variation (it dominates ``decode_degrade``'s uncertainty under jitter).
    """
    if reps <= 0 or point.get("decode_jitter", 0.0) < 1e-3:
        return {}
    prof = SimProfile(
        name="spread-check",
        slots=slots,
        max_num_batched_tokens=budget,
        prefill_tps=point["prefill_tps"],
        decode_tps=point["decode_tps"],
        decode_degrade=point.get("decode_degrade", 0.0),
        decode_jitter=point["decode_jitter"],
        overhead_s=point.get("overhead_s", 0.0),
        step_roofline=roofline,
        attention_decode_s=point.get("attention_decode_s", 0.0),
    )
    keys = ("decode_tps", "decode_degrade", "decode_jitter", "attention_decode_s")
    est: dict[str, list[float]] = {k: [] for k in keys[: 4 if attention else 3]}
    for r in range(reps):
        pred = predict_calls(prof, d, by=group or None, client=client, seed=seed + 1 + r)
        sim = d.copy()
        sim["start"] = pred["start_pred"]
        sim["first_token"] = np.where(
            np.isfinite(d["first_token"]), sim["start"] + pred["ttft_pred"], np.nan
        )
        sim["end"] = sim["start"] + pred["latency_pred"]
        feats = load_features(sim, group, point.get("decode_degrade", 0.0))[mask]
        f = fit_lines(feats, roofline, attention)
        for k in est:
            if k in f:
                est[k].append(f[k])
    return est


def _max_overlap(starts: np.ndarray, ends: np.ndarray) -> int:
    ev = sorted([(s, 1) for s in starts] + [(e, -1) for e in ends], key=lambda x: (x[0], x[1]))
    cur = best = 0
    for _, dlt in ev:
        cur += dlt
        best = max(best, cur)
    return best


def calibrate(run_or_calls: Any, **kwargs: Any) -> SimProfile:
    """Fit a :class:`SimProfile` from recorded ``llm_calls`` (see :func:`fit_calibration`).

    ``agentlab.calibrate(run.llm_calls_df(), slots=8).save("profile.toml")``, then
    ``LLMClient("sim/profile.toml")``. Use :func:`fit_calibration` for the confidence
    intervals and the goodness-of-fit report.
    """
    return fit_calibration(run_or_calls, **kwargs).profile


def main(args: Any) -> int:
    """``agentlab calibrate RUN --out profile.toml``: fit, write the TOML, print the report."""
    from pathlib import Path

    out = Path(args.out)
    cal = fit_calibration(
        args.run,
        name=args.name or out.stem,
        slots=args.slots,
        max_num_batched_tokens=args.max_num_batched_tokens,
        by=args.by,
        client=args.client,
        lengths_by=args.by_label.split(",") if getattr(args, "by_label", None) else None,
        step_roofline=getattr(args, "step_roofline", None),
        attention=bool(getattr(args, "attention", False)),
        length_corr_by=getattr(args, "length_corr_by", None),
        tokenizer=getattr(args, "tokenizer", None),
    )
    cal.profile.save(out)
    print(cal.report())
    print(f"\nwrote {out} (use it as LLMClient('sim/{out}'))")
    return 0
