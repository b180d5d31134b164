"""Traffic both ways: a society's LLM traffic exported as a trace and fired at sim-serve over
HTTP in open loop (original arrival times) and closed loop (dependencies), each a new run."""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from agentlab.analysis.traffic import export_traffic, load_trace, replay_traffic, traffic_trace
from agentlab.errors import ConfigError
from agentlab.llm.sim_serve import start_sim_server
from agentlab.runtime import Society
from agentlab.store import open_run

if importlib.util.find_spec("litellm") is None:
    pytest.skip("litellm not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("traffic") / "src"
    s = Society.create(
        run,
        agents={"llm": 6},
        env=["social_feed"],
        llm="sim/vllm-3b",
        seed=1,
        clock="virtual",
        progress=False,
    )
    s.run_sync(ticks=2)
    return run


def test_trace_has_times_sizes_labels_and_agent_chains(source: Path, tmp_path: Path) -> None:
    calls = open_run(source).df("llm_calls")
    trace = traffic_trace(source)
    assert len(trace) == len(calls) > 6
    assert trace[0]["t"] == 0.0 and all(a["t"] <= b["t"] for a, b in itertools.pairwise(trace))
    by_id = {c["id"]: c for c in trace}
    chained = [c for c in trace if c["parent"] is not None]
    assert chained  # ReAct iterations after a tool call depend on the call before
    for c in chained:
        p = by_id[c["parent"]]
        assert p["agent_id"] == c["agent_id"] and p["tick"] == c["tick"]
        assert p["t"] + p["latency"] <= c["t"] + 1e-9 and c["think_s"] >= 0
    assert {c["labels"]["stage"] for c in trace} == {"react"}
    assert sum(c["prompt_tokens"] for c in trace) == int(calls["prompt_tokens"].sum())

    paths = export_traffic(source, tmp_path / "out")
    assert load_trace(paths["trace"]) == trace
    vllm = [json.loads(x) for x in paths["vllm"].read_text().splitlines()]
    guide = [json.loads(x) for x in paths["guidellm"].read_text().splitlines()]
    assert len(vllm) == len(guide) == len(trace)
    assert set(vllm[0]) == {"prompt", "output_tokens"}
    assert set(guide[0]) == {"prompt", "prompt_tokens_count", "output_tokens_count"}
    # synthetic prompts have the recorded size, as the simulator counts tokens
    assert abs(len(vllm[0]["prompt"]) // 4 + 4 - trace[0]["prompt_tokens"]) <= 1


async def test_open_and_closed_loop_replay_against_sim_serve(source: Path, tmp_path: Path) -> None:
    trace = traffic_trace(source)
    speed = 20.0  # the virtual-clock run spans tens of seconds
    with start_sim_server("vllm-3b", seed=0, overhead_s=0.01, decode_tps=3000) as h:
        open_run_dir = await replay_traffic(
            trace, h.base_url, tmp_path / "open", model="openai/vllm-3b", speed=speed
        )
        closed_dir = await replay_traffic(
            source, h.base_url, tmp_path / "closed", model="openai/vllm-3b", mode="closed",
            speed=speed,
        )  # fmt: skip
    by_id = {c["id"]: c for c in trace}
    for run_dir in (open_run_dir, closed_dir):
        df = open_run(run_dir).df("llm_calls")
        assert len(df) == len(trace) and set(df["trace_id"]) == set(by_id)
        assert (df["outcome"] == "ok").all()
        # each call asked for the recorded completion size (max_tokens)
        want = df["trace_id"].map(lambda i: by_id[i]["completion_tokens"])
        assert (df["completion_tokens"] <= want.clip(lower=1)).all()
    o = open_run(open_run_dir).df("llm_calls").set_index("trace_id")
    t0 = o["start"].min()
    offsets = pd.Series({i: by_id[i]["t"] / speed for i in o.index})
    assert ((o["start"] - t0) - offsets).abs().max() < 0.25  # original arrival process
    c = open_run(closed_dir).df("llm_calls").set_index("trace_id")
    for i, call in by_id.items():
        if call["parent"] is not None:  # a child is sent only after its parent answered
            assert c.loc[i, "start"] >= c.loc[call["parent"], "end"] - 1e-6


@pytest.mark.slow  # a subprocess that imports litellm: ~20 s
def test_replay_traffic_cli_and_errors(source: Path, tmp_path: Path) -> None:
    with start_sim_server("instant", seed=0) as h:
        cmd = [sys.executable, "-m", "agentlab.cli", "replay-traffic", str(source)]
        cmd += ["--base-url", h.base_url, "--out", str(tmp_path / "cli"), "--model"]
        cmd += ["openai/instant", "--speed", "50", "--export", str(tmp_path / "exp")]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "exp" / "trace.jsonl").exists()
    assert len(open_run(tmp_path / "cli").df("llm_calls")) == len(traffic_trace(source))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"t": 0}\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:1: not a trace call"):
        load_trace(bad)


def test_replay_traffic_where_every_call_fails_exits_non_zero(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from agentlab.analysis.traffic import main

    args = argparse.Namespace(run=str(source), export=None, out=str(tmp_path / "none"),
                              model="openai/no-such-model", mode="open", speed=50.0,
                              timeout=30.0)  # fmt: skip
    with start_sim_server("instant", seed=0) as h:
        args.base_url = h.base_url
        assert main(args) == 1  # the server serves 'instant' only: every call is a 404
        err = capsys.readouterr().err
        n = len(traffic_trace(source))
        assert f"{n} of {n} calls failed" in err and "no-such-model" in err and "--model" in err
        args.out, args.model = str(tmp_path / "ok"), "openai/instant"
        assert main(args) == 0


async def test_replay_traffic_refuses_a_url_nothing_answers_at(
    source: Path, tmp_path: Path
) -> None:
    # (at the trace's own pace the replay ran for the trace's whole span, silent, and
    # every call failed: 2 minutes of nothing for a 10-tick society before this check)
    import socket

    with socket.socket() as s:  # a port nobody listens at
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConfigError, match=rf"nothing answers at http://127.0.0.1:{port}/v1"):
        await replay_traffic(source, f"http://127.0.0.1:{port}/v1", tmp_path / "r")
    assert not (tmp_path / "r").exists()  # no half-made run left behind
