"""Calibration round trip: a simulated run with known parameters is fitted back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd
import pytest

import agentlab
from agentlab.analysis.calibrate import fit_calibration, predict_calls
from agentlab.core.clock import VirtualClock
from agentlab.errors import ConfigError
from agentlab.llm import LLMClient, get_profile

TRUE = {
    # the additive step, base + prompt / prefill_tps (not sim/vllm-3b's roofline): a calls
    # DataFrame does not carry the client's overrides, so the fits below that check the
    # parameters name it (a run directory's run.json does: see test_the_step_model_...)
    "step_roofline": False,
    "slots": 8,
    "max_num_batched_tokens": 4096,
    "prefill_tps": 4000.0,
    "decode_tps": 60.0,
    "decode_degrade": 0.04,
    "decode_jitter": 0.15,
    "overhead_s": 0.01,
    "lengths": {"discussion": [300.0, 0.5], "evaluation": [80.0, 0.4]},
    # the fit's engine model has no attention term (sim/vllm-3b's is on)
    "attention_decode_s": 0.0,
    # nor the paper's front end, which cuts prompts over 4,928 tokens (the idle calls here
    # reach 6,921: their TTFT is the fit's evidence for prefill_tps and overhead_s)
    "truncate_to_len": 0,
}


async def _workload(seed: int = 0) -> pd.DataFrame:
    """Idle calls of many prompt sizes, then bursts of 2..8 concurrent discussion turns."""
    clock = VirtualClock()
    c = LLMClient("sim/vllm-3b", seed=seed, **TRUE).with_clock(clock)
    recs = []
    for i in range(60):  # one at a time: TTFT vs prompt size
        msgs = [{"role": "user", "content": f"q{i} " + "w" * (200 + 230 * i)}]
        r = await c.complete(msgs, labels={"stage": "evaluation"})
        recs.append(r.record)
    for rnd in range(40):  # waves of experts: decode speed vs batch size
        k = 2 + rnd % 7
        msgs = [[{"role": "user", "content": f"r{rnd} e{j} " + "d" * 800}] for j in range(k)]
        rs = await asyncio.gather(*(c.complete(m, labels={"stage": "discussion"}) for m in msgs))
        recs.extend(r.record for r in rs)
        await clock.sleep(1.0)
    rows = []
    for rec in recs:
        d = rec.to_dict()
        d["stage"] = rec.labels.get("stage")
        rows.append(d)
    return pd.DataFrame(rows)


def test_round_trip_recovers_known_parameters(tmp_path: Path) -> None:
    calls = asyncio.run(_workload())
    cal = fit_calibration(calls, slots=8, max_num_batched_tokens=4096, n_boot=100,
                          step_roofline=False)  # fmt: skip
    truth = {
        "prefill_tps": 4000.0,
        "decode_tps": 60.0,
        "decode_degrade": 0.04,
        "decode_jitter": 0.15,
        "overhead_s": 0.01,
        "median[discussion]": 300.0,
        "sigma[discussion]": 0.5,
        "median[evaluation]": 80.0,
        "sigma[evaluation]": 0.4,
    }
    params = cal.params.set_index("parameter")
    print(cal.report())
    assert cal.notes == []  # every parameter identified
    for name, want in truth.items():
        row = params.loc[name]
        within5 = abs(row["value"] - want) <= 0.05 * want
        in_ci = row["ci_low"] <= want <= row["ci_high"]
        assert within5 or in_ci, (name, want, dict(row))
    # the fitted engine reproduces the run it was fitted on
    fit = cal.fit.set_index("metric")
    assert fit.loc["latency", "ks"] < 0.1 and fit.loc["ttft", "ks"] < 0.15
    # saved, loaded by path, same numbers
    path = cal.profile.save(tmp_path / "fitted.toml")
    loaded = LLMClient(f"sim/{path}").profile
    assert loaded == cal.profile
    assert agentlab.calibrate(
        calls, slots=8, n_boot=10, step_roofline=False
    ).decode_tps == pytest.approx(cal.profile.decode_tps, rel=0.02)


def test_a_prefill_the_run_cannot_identify_is_said_not_silently_zero() -> None:
    """Idle calls whose TTFT does not grow with the prompt: prefill_tps comes out 0 (no
    prefill cost in the profile), and the report says why instead of only printing 0."""
    calls = asyncio.run(_workload(seed=2))
    ttft = 0.5 - 1e-5 * calls["prompt_tokens"]  # shorter for longer prompts: no prefill law
    calls["first_token"] = (calls["start"] + ttft).clip(upper=calls["end"] - 0.01)
    cal = fit_calibration(calls, slots=8, n_boot=5)
    assert cal.profile.prefill_tps == 0.0
    assert cal.notes and "prefill_tps was not identified" in cal.notes[0]
    assert "note: prefill_tps was not identified" in cal.report()


def test_held_out_calls_are_reported_separately() -> None:
    calls = asyncio.run(_workload(seed=1))
    train = calls["start"] < calls["start"].median()
    cal = fit_calibration(calls, slots=8, train=train, n_boot=20)
    assert set(cal.fit["subset"]) == {"train", "held-out"}
    pred = predict_calls(get_profile("vllm-3b", **TRUE), calls)
    assert pred["latency_pred"].notna().all()


def test_errors_name_what_is_missing() -> None:
    with pytest.raises(ConfigError, match="lack columns"):
        fit_calibration(pd.DataFrame({"start": [0.0]}))
    idle_only = pd.DataFrame(
        {"start": [0.0, 5.0, 9.0], "end": [1.0, 6.0, 10.0], "prompt_tokens": [5, 6, 7],
         "completion_tokens": [10, 10, 10]}
    )  # fmt: skip
    with pytest.raises(ConfigError, match="streamed calls"):
        fit_calibration(idle_only)


def test_closed_loop_replay_chains_each_clients_calls() -> None:
    # one slot, 0.1 s per decode step, prefill 100 tok/s: a 10-token prompt and 5 tokens
    # take 0.1 + 0.1 (prefill step) + 4 * 0.1 = 0.6 s alone
    prof = get_profile(
        "vllm-3b", slots=1, prefill_tps=100.0, decode_tps=10.0, decode_degrade=0.0,
        decode_jitter=0.0, overhead_s=0.0, max_num_batched_tokens=0, step_roofline=False,
        attention_decode_s=0.0,
    )  # fmt: skip
    calls = pd.DataFrame(
        {
            "client": ["a", "b", "a"],
            "start": [0.0, 0.0, 5.0],  # a thought for 1.0 s after its first call (end 4.0)
            "end": [4.0, 4.5, 6.0],
            "prompt_tokens": [10, 10, 10],
            "completion_tokens": [5, 5, 5],
        }
    )
    closed = predict_calls(prof, calls, client="client").set_index(calls.index)
    # a: 0-0.6; b queued behind it: 0.6-1.2; a's second call at 0.6 + 1.0 think = 1.6
    assert closed["start_pred"].tolist() == pytest.approx([0.0, 0.0, 1.6])
    assert closed["latency_pred"].tolist() == pytest.approx([0.6, 1.2, 0.6])
    opened = predict_calls(prof, calls)  # open loop keeps the recorded start 5.0
    assert opened["start_pred"].tolist() == pytest.approx([0.0, 0.0, 5.0])


def test_cli_calibrate_writes_a_loadable_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentlab.cli import main
    from agentlab.topology import Experiment

    # sim/vllm-3b with the step model calibrate fits (base + prompt / prefill_tps)
    truth = get_profile("vllm-3b", step_roofline=False)
    llm = f"sim/{truth.save(tmp_path / 'truth.toml')}"
    exp = Experiment(runs=3, agents=3, out=tmp_path / "run", progress=False, seed=4, llm=llm)
    exp.run_sync()
    out = tmp_path / "fitted.toml"
    rc = main(["calibrate", str(exp.run_dir), "--out", str(out), "--slots", "8", "--by", "run_id"])
    assert rc == 0 and "decode_tps" in capsys.readouterr().out
    prof = LLMClient(f"sim/{out}").profile
    assert prof is not None and prof.slots == 8
    assert prof.decode_tps == pytest.approx(truth.decode_tps, rel=0.1)
    assert prof.prefill_tps == pytest.approx(truth.prefill_tps, rel=0.1)
    # the stage's length fit: the discussion calls' median (the profile draws them per
    # call label, Sequential turns, Star solver / reviewers, full-mesh messages)
    calls = exp.results.calls_df()
    disc = calls[(calls["stage"] == "discussion") & (calls["outcome"] == "ok")]
    observed = float(disc["completion_tokens"].median())
    assert prof.length_of("discussion")[0] == pytest.approx(observed, rel=0.25)
    # lengths per call label, and how a run's lengths move together (3 runs: too few
    # groups to tell, so the profile keeps independent draws)
    rc = main(["calibrate", str(exp.run_dir), "--out", str(out), "--slots", "8", "--by",
               "run_id", "--by-label", "call,round", "--length-corr-by", "run_id"])  # fmt: skip
    assert rc == 0 and "length_corr[" in capsys.readouterr().out
    assert LLMClient(f"sim/{out}", seed=1).profile.length_corr_by == "run_id"


def test_calls_sent_together_did_not_find_the_server_idle() -> None:
    # a fan-out of 3 calls at one instant (client_overhead_s = 0): each had 2 others in
    # flight; the lone call after them found the server idle
    from agentlab.analysis.calibrate_step import load_features

    calls = pd.DataFrame(
        {"start": [0.0, 0.0, 0.0, 10.0], "end": [4.0, 5.0, 6.0, 11.0],
         "first_token": [0.2, 0.3, 0.4, 10.1], "prompt_tokens": [100, 100, 100, 50],
         "completion_tokens": [40, 50, 60, 10]}
    )  # fmt: skip
    feats = load_features(calls, [], 0.0)
    assert feats["others_at_start"].tolist() == [2, 2, 2, 0]
    # a call starting the instant another ends found it gone
    calls = pd.DataFrame(
        {"start": [0.0, 4.0], "end": [4.0, 5.0], "first_token": [0.1, 4.1],
         "prompt_tokens": [10, 10], "completion_tokens": [5, 5]}
    )  # fmt: skip
    assert load_features(calls, [], 0.0)["others_at_start"].tolist() == [0, 0]


def test_round_trip_without_client_overhead_within_5_percent() -> None:
    # client_overhead_s = 0: every wave of the workload starts at one instant; counted as
    # "idle", those calls gave prefill_tps +39% and overhead_s 33x (seen before the fix)
    saved = TRUE.get("client_overhead_s")
    TRUE["client_overhead_s"] = 0.0
    try:
        calls = asyncio.run(_workload(seed=2))
    finally:
        TRUE.pop("client_overhead_s")
        if saved is not None:
            TRUE["client_overhead_s"] = saved
    assert (calls.groupby("start").size() > 1).any()  # the ties are there
    cal = fit_calibration(calls, slots=8, max_num_batched_tokens=4096, n_boot=20, n_sim=0,
                          step_roofline=False)  # fmt: skip
    params = cal.params.set_index("parameter")["value"]
    for name in ("prefill_tps", "decode_tps"):
        assert params[name] == pytest.approx(TRUE[name], rel=0.05), name
    assert params["overhead_s"] == pytest.approx(TRUE["overhead_s"], abs=0.002)


def test_lengths_by_call_label_and_round_survive_a_workflow_rerun(tmp_path: Path) -> None:
    # Fitted per stage, the star solver (838 -> 1,471 tokens over rounds) and its reviewers
    # (~620) are pooled into one "discussion" length; per call label and round they are not.
    from agentlab.topology import Experiment

    def star(llm: str, out: Path) -> pd.DataFrame:
        exp = Experiment(topologies=["star"], agents=4, runs=12, llm=llm, seed=3,
                         clock="virtual", out=out, progress=False)  # fmt: skip
        return exp.run_sync().calls_df()

    calls = star("sim/vllm-3b", tmp_path / "a")
    cal = fit_calibration(
        calls, slots=8, max_num_batched_tokens=11200, by="run_id", lengths_by=["call", "round"],
        n_boot=5, n_sim=0,
    )  # fmt: skip
    keys = {k for k, _ in cal.profile.lengths}
    assert {"vertical_solver#1", "vertical_solver#3", "vertical_reviewer#2"} <= keys
    ok = calls[calls["outcome"] == "ok"]
    call = ok["labels"].map(lambda x: x["call"])  # JSON columns read as dicts
    solver3 = ok[(call == "vertical_solver") & (ok["round"] == 3)]["completion_tokens"]
    law = cal.profile.length_dist({"call": "vertical_solver", "round": 3})
    assert law.median == pytest.approx(float(solver3.median()))
    # 14 calls, two of them far out (4,706 and 6,144 tokens at seed 3): a law through the
    # quartiles and p95 carries their mean only up to its far slope's bound
    assert law.mean(cal.profile.max_completion) == pytest.approx(float(solver3.mean()), rel=0.1)
    path = cal.profile.save(tmp_path / "fitted.toml")
    again = star(f"sim/{path}", tmp_path / "b")

    def disc_p50(c: pd.DataFrame) -> float:
        d = c[(c["stage"] == "discussion") & (c["outcome"] == "ok")]
        return float((d["end"] - d["start"]).median())

    assert disc_p50(again) == pytest.approx(disc_p50(calls), rel=0.15)


def test_lengths_by_task_category_give_the_keys_the_server_looks_up() -> None:
    """``task_category`` qualifies a length key as ``length_keys`` reads it
    (``call#round/category``): each category's calls get their own law, and a call of a
    category the fit never saw falls back to the call label's pooled law."""
    rows = []
    for i in range(40):  # one call at a time (an idle server), prompts of 7 sizes
        for j, (cat, base) in enumerate((("math", 300), ("research", 900))):
            start, prompt, done = 20.0 * (2 * i + j), 100 + 50 * (i % 7), base + 3 * i
            first = start + 0.01 + prompt / 10_000
            rows.append({"start": start, "first_token": first, "end": first + done / 100,
                         "prompt_tokens": prompt, "completion_tokens": done,
                         "labels": {"call": "x", "round": 1, "task_category": cat,
                                    "stage": "discussion"}})  # fmt: skip
    cal = fit_calibration(pd.DataFrame(rows), lengths_by=["call", "round", "task_category"],
                          n_boot=2, n_sim=0)  # fmt: skip
    keys = {k for k, _ in cal.profile.lengths}
    assert {"x#1/math", "x#1/research", "x"} <= keys
    prof = cal.profile
    math_law = prof.length_dist({"call": "x", "round": 1, "task_category": "math"})
    assert math_law.median == pytest.approx(300 + 3 * 19.5, rel=0.02)
    research = prof.length_dist({"call": "x", "round": 1, "task_category": "research"})
    assert research.median == pytest.approx(900 + 3 * 19.5, rel=0.02)
    pooled = prof.length_dist({"call": "x", "round": 1, "task_category": "coding"})
    assert math_law.median < pooled.median < research.median


def test_cli_by_label_and_bad_qualifiers(tmp_path: Path) -> None:
    calls = asyncio.run(_workload(seed=3))
    with pytest.raises(ConfigError, match="qualify"):
        fit_calibration(calls, lengths_by=["stage", "sender"], n_boot=2, n_sim=0)
    cal = fit_calibration(calls, slots=8, lengths_by="stage", n_boot=2, n_sim=0)
    law = cal.profile.length_dist({"stage": "discussion"})
    disc = calls[calls["stage"] == "discussion"]["completion_tokens"]
    assert law.quantile(0.75) == pytest.approx(float(disc.quantile(0.75)), rel=0.02)


def test_context_in_flight_is_the_step_average_of_the_decoding_contexts() -> None:
    import numpy as np

    from agentlab.analysis.calibrate_step import _context_in_flight

    # A decodes 10 tokens over [0, 10] s from a 100-token prompt, B 5 tokens over [5, 10]
    # from 50: contexts 100 + t and 50 + (t - 5). A's window: int_0^10 (100 + t) dt = 1050
    # plus B's int_5^10 (50 + t - 5) dt = 262.5, over 10 s; B's: int_5^10 (100 + t) dt =
    # 537.5 plus its own 262.5, over 5 s.
    f, e = np.array([0.0, 5.0]), np.array([10.0, 10.0])
    prompt, completion = np.array([100.0, 50.0]), np.array([10.0, 5.0])
    assert _context_in_flight(f, e, prompt, completion, 0.0).tolist() == pytest.approx(
        [131.25, 160.0]
    )
    # decode_degrade 1: with both decoding a second takes half the steps, so A's first 5 s
    # (512.5 token-seconds, 5 steps' worth) weigh twice its last 5 s (800 over 2.5)
    assert _context_in_flight(f, e, prompt, completion, 1.0).tolist() == pytest.approx(
        [(512.5 + 400.0) / 7.5, 160.0]
    )


def test_round_trip_fits_the_attention_term_of_the_vllm_3b_decode(tmp_path: Path) -> None:
    # sim/vllm-3b's decode steps pay attention_decode_s per context token; without that
    # term the fit put it into decode_tps (-3 to -6 % on 200 runs per topology)
    from agentlab.topology import Experiment

    truth = get_profile("vllm-3b")
    exp = Experiment(topologies=["star"], agents=4, runs=12, llm="sim/vllm-3b", seed=3,
                     clock="virtual", out=tmp_path, progress=False)  # fmt: skip
    calls = exp.run_sync().calls_df()

    def fit(attention: bool) -> pd.Series:
        cal = fit_calibration(calls, slots=8, max_num_batched_tokens=11200, by="run_id",
                              n_boot=20, n_sim=0, step_roofline=True, attention=attention)  # fmt: skip
        return cal.params.set_index("parameter")

    with_att, plain = fit(True), fit(False)
    assert with_att.loc["decode_tps", "value"] == pytest.approx(truth.decode_tps, rel=0.05)
    att = with_att.loc["attention_decode_s"]
    assert att["ci_low"] <= truth.attention_decode_s <= att["ci_high"]
    assert att["value"] == pytest.approx(truth.attention_decode_s, rel=0.15)
    assert with_att.loc["decode_degrade", "value"] <= 0.01  # the truth has none
    assert "attention_decode_s" not in plain.index
    err = abs(with_att.loc["decode_tps", "value"] - truth.decode_tps)
    assert err < abs(plain.loc["decode_tps", "value"] - truth.decode_tps)


def test_attention_fit_on_calls_without_it_leaves_the_plain_fit() -> None:
    calls = asyncio.run(_workload(seed=3))
    plain = fit_calibration(calls, slots=8, max_num_batched_tokens=4096, n_boot=5, n_sim=0)
    att = fit_calibration(calls, slots=8, max_num_batched_tokens=4096, n_boot=5, n_sim=0,
                          attention=True)  # fmt: skip
    assert att.profile.attention_decode_s == 0.0
    assert att.profile.decode_tps == pytest.approx(plain.profile.decode_tps)


async def _grouped_workload(rho: float, waves: int = 150) -> pd.DataFrame:
    """``_workload``'s idle calls, then waves of 6 calls, one group (run) each: 3 of call
    label ``x``, whose lengths correlate within a wave by ``rho``, and 3 of ``y``, drawn
    independently."""
    clock = VirtualClock()
    truth = {**TRUE, "lengths": {"x": [300.0, 0.5], "y": [300.0, 0.5], "evaluation": [80.0, 0.4]},
             "length_corr": {"x": rho}}  # fmt: skip
    c = LLMClient("sim/vllm-3b", seed=2, **truth).with_clock(clock)
    recs = []
    for i in range(60):
        msgs = [{"role": "user", "content": f"q{i} " + "w" * (200 + 230 * i)}]
        recs.append((await c.complete(msgs, labels={"stage": "evaluation"})).record)
    for w in range(waves):
        labels = [{"stage": "discussion", "call": "xy"[j % 2], "run_id": f"run-{w}"}
                  for j in range(6)]  # fmt: skip
        msgs = [[{"role": "user", "content": f"w{w} e{j} " + "d" * 800}] for j in range(6)]
        rs = await asyncio.gather(
            *(c.complete(m, labels=lb) for m, lb in zip(msgs, labels, strict=True))
        )
        recs.extend(r.record for r in rs)
        await clock.sleep(1.0)
    return pd.DataFrame([rec.to_dict() for rec in recs])


def test_length_corr_is_fitted_where_a_groups_lengths_move_together() -> None:
    """``length_corr_by``: the intraclass correlation of the length scores within a group
    recovers the copula's rho for the label drawn with one, and a label drawn
    independently keeps none (its interval includes 0)."""
    calls = asyncio.run(_grouped_workload(0.6))
    cal = fit_calibration(calls, slots=8, max_num_batched_tokens=4096, lengths_by="call",
                          length_corr_by="run_id", n_boot=100, n_sim=0)  # fmt: skip
    rows = cal.params.set_index("parameter")
    print(rows.loc[[r for r in rows.index if r.startswith("length_corr")]])
    assert rows.loc["length_corr[x]", "value"] == pytest.approx(0.6, abs=0.12)
    assert rows.loc["length_corr[x]", "ci_low"] <= 0.6 <= rows.loc["length_corr[x]", "ci_high"]
    assert rows.loc["length_corr[y]", "value"] == 0.0
    corr = dict(cal.profile.length_corr)
    assert set(corr) == {"x"} and cal.profile.length_corr_by == "run_id"
    with pytest.raises(ConfigError, match="length_corr_by needs lengths_by"):
        fit_calibration(calls, length_corr_by="run_id", n_boot=2, n_sim=0)


def test_length_corr_round_trip_on_the_paper_workflow(tmp_path: Path) -> None:
    """Fitted on ``sim/vllm-3b``'s own Star runs (lengths per call label, round and task
    category, as the profile holds them), ``length_corr`` comes back near the profile's."""
    from agentlab.topology import Experiment

    exp = Experiment(topologies=["star"], runs=80, llm="sim/vllm-3b", seed=1, clock="virtual",
                     out=tmp_path, progress=False)  # fmt: skip
    cal = fit_calibration(exp.run_sync().calls_df(), slots=8, max_num_batched_tokens=11200,
                          by="run_id", lengths_by=["call", "round", "task_category"],
                          length_corr_by="run_id", n_boot=20, n_sim=0, step_roofline=True)  # fmt: skip
    truth = dict(get_profile("vllm-3b").length_corr)
    fitted = dict(cal.profile.length_corr)
    for call in ("vertical_solver", "vertical_reviewer"):
        assert fitted[call] == pytest.approx(truth[call], abs=0.15), (call, fitted)


def test_a_tool_using_society_reruns_on_its_fitted_profile(tmp_path: Path) -> None:
    """Persona agents on ``social_feed`` (``sim/vllm-3b``: llama3 counts, prefix caching)
    fitted, then re-run on the fitted profile: the re-run's prompts, reply lengths and
    latencies are the recorded run's. Before: the length law pooled the short tool-call
    replies (~17 tokens) with the text (median 46 tokens, not 110), the profile counted
    prompts at 4 characters a token (a quarter fewer than llama3) and cached nothing."""
    from agentlab.runtime import Society

    def run(path: Path, llm: str) -> pd.DataFrame:
        soc = Society.create(path, agents=24, env=["social_feed"], llm=LLMClient(llm, seed=1),
                             clock="virtual", seed=1, progress=False)  # fmt: skip
        soc.run_sync(ticks=4)
        soc.close()
        return agentlab.open_run(path).llm_calls_df()

    rec = run(tmp_path / "recorded", "sim/vllm-3b")
    cal = fit_calibration(rec, n_boot=20, n_sim=0)
    prof = cal.profile
    text = rec[rec.finish_reason == "stop"].completion_tokens
    assert prof.length_of("react")[0] == pytest.approx(text.median(), rel=0.15)
    assert prof.tokenizer == "llama3" and prof.prefix_caching
    assert len(cal.notes) == 1 and cal.notes[0].startswith("slots = 8 is the most calls seen")
    again = run(tmp_path / "rerun", f"sim/{prof.save(tmp_path / 'fitted.toml')}")
    # per kind of reply (how many of each the agents make is their dynamics, not the fit's)
    for reason in ("stop", "tool_calls"):
        a, b = rec[rec.finish_reason == reason], again[again.finish_reason == reason]
        for col, rel in (("prompt_tokens", 0.1), ("completion_tokens", 0.15), ("latency", 0.2),
                         ("ttft", 0.2), ("cached_tokens", 0.1)):  # fmt: skip
            want, got = a[col].median(), b[col].median()
            assert got == pytest.approx(want, rel=rel), (reason, col, want, got)
    for col in ("latency", "ttft"):
        assert again[col].median() == pytest.approx(rec[col].median(), rel=0.2), col
    # the recorded server's step (roofline) is the one fitted: its prefill speed and
    # overhead come back (the additive line went through the floor: +17 % and 0 s)
    truth = get_profile("vllm-3b")
    fitted = cal.params.set_index("parameter")["value"]
    assert (
        prof.step_roofline
        and not fit_calibration(rec, n_boot=2, n_sim=0, step_roofline=False).profile.step_roofline
    )
    assert fitted["prefill_tps"] == pytest.approx(truth.prefill_tps, rel=0.05)
    assert fitted["overhead_s"] == pytest.approx(truth.overhead_s, rel=0.2)
    # the recorded calls replayed on the server's own parameters give back their TTFTs: a
    # call prefills its uncached tokens and attends to its whole prompt (replayed as the
    # uncached tokens alone: TTFT p50 -11 %; as the whole prompt prefilled: far above)
    for pred in (predict_calls(truth, rec), predict_calls(truth, rec, seed=1)):
        assert pred.ttft_pred.median() == pytest.approx(rec.ttft.median(), rel=0.06)
        assert pred.latency_pred.median() == pytest.approx(rec.latency.median(), rel=0.06)


def test_the_fitted_profiles_tokenizer_is_the_one_that_counted_the_calls() -> None:
    calls = asyncio.run(_workload(seed=3))
    assert fit_calibration(calls, slots=8, n_boot=5, n_sim=0).profile.tokenizer == "llama3"
    named = fit_calibration(calls, slots=8, n_boot=5, n_sim=0, tokenizer="chars:4.8")
    assert named.profile.tokenizer == "chars:4.8" and named.notes == []
    # slots not given: the most seen at once, said to be a lower bound
    seen = fit_calibration(calls, n_boot=5, n_sim=0)
    assert seen.profile.slots == 8 and "--slots" in seen.notes[0]
    real = calls.assign(model="openai/gpt-4o-mini")  # a provider's own counts
    cal = fit_calibration(real, slots=8, n_boot=5, n_sim=0)
    assert cal.profile.tokenizer == "chars:4" and "openai/gpt-4o-mini" in cal.notes[0]
    assert "--tokenizer" in cal.report()
    with pytest.raises(ConfigError, match="unknown tokenizer"):
        fit_calibration(calls, slots=8, n_boot=5, n_sim=0, tokenizer="gpt2")
    # a fitted profile is run by its file; handing the object over says how
    with pytest.raises(ConfigError, match=r"save it .*'sim/calibrated.toml'"):
        LLMClient(named.profile)  # type: ignore[arg-type]
    # every call after the first finds the template's fixed first block in the cache (as
    # on vLLM: Llama 3's system lines are ~25 tokens): the fitted server caches prefixes;
    # calls that found nothing cached, a server that caches nothing
    assert (calls["cached_tokens"].iloc[1:] >= 16).all()
    assert fit_calibration(calls, slots=8, n_boot=5, n_sim=0).profile.prefix_caching
    none = calls.assign(cached_tokens=0)
    assert not fit_calibration(none, slots=8, n_boot=5, n_sim=0).profile.prefix_caching


def test_a_profile_saves_into_a_folder_that_does_not_exist_yet(tmp_path: Path) -> None:
    path = get_profile("vllm-3b").save(tmp_path / "profiles" / "new" / "p.toml")
    loaded = LLMClient(f"sim/{path}").profile
    assert loaded is not None and loaded.decode_tps == 107.3 and loaded.tokenizer == "llama3"


def test_the_step_model_and_tokenizer_follow_the_recorded_client(tmp_path: Path) -> None:
    """Fitting a run directory takes the step model and tokenizer of the profile its calls
    ran on, with the overrides its client was made with (``run.json``): a client that
    turned ``sim/vllm-3b``'s roofline off, or counted with another tokenizer, is fitted as
    it ran, not as the profile's name says; a DataFrame of the same calls goes by the name."""
    from agentlab.runtime import Society

    llm = LLMClient("sim/vllm-3b", seed=2, step_roofline=False, tokenizer="chars:4.8")
    soc = Society.create(tmp_path / "run", agents=6, env=["social_feed"], llm=llm,
                         clock="virtual", seed=2, progress=False)  # fmt: skip
    soc.run_sync(ticks=3)
    soc.close()
    run = agentlab.open_run(tmp_path / "run")
    for given in (run, tmp_path / "run", str(tmp_path / "run")):
        prof = fit_calibration(given, slots=8, n_boot=2, n_sim=0).profile
        assert not prof.step_roofline and prof.tokenizer == "chars:4.8", given
    named = fit_calibration(run.llm_calls_df(), slots=8, n_boot=2, n_sim=0).profile
    assert named.step_roofline and named.tokenizer == "llama3"
    run.close()
