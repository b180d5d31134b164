"""``llm="cache:RUN"``: a run against sim-serve over HTTP (litellm) replayed from its
response cache with the server stopped gives identical rows."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from agentlab.llm import LLMClient
from agentlab.llm.cache_backend import CACHE_DIR, CacheMissError
from agentlab.llm.sim_serve import start_sim_server
from agentlab.runtime import Society
from agentlab.store import open_run

if importlib.util.find_spec("litellm") is None:
    pytest.skip("litellm not installed", allow_module_level=True)

# Real-clock times and per-process request ids cannot repeat; everything else must.
_VOLATILE = {"ts", "start", "end", "first_token", "queue_wait", "latency", "wall_s"}
_VOLATILE |= {f"{c}_at" for c in ("ts", "start", "end", "first_token")}  # their datetimes
_VOLATILE |= {"request_id", "run_id", "llm_request_id"}
_DATASETS = ("agent_states", "env_events", "messages", "llm_calls", "agent_errors")


def _rows(run_dir: Path, name: str) -> pd.DataFrame:
    df = open_run(run_dir).df(name)
    if df.empty:
        return df
    df = df.drop(columns=[c for c in df.columns if c in _VOLATILE or c.startswith("_")])
    keys = [c for c in ("tick", "agent_id", "iteration", "seq", "msg_id") if c in df.columns]
    text = df.astype(str)
    return text.sort_values(keys or list(text.columns)).reset_index(drop=True)


def _society(path: Path, llm: object, clock: str = "real", agents: int = 10) -> Society:
    return Society.create(
        path, agents={"llm": agents}, env=["social_feed"], llm=llm, seed=5, clock=clock,
        progress=False,
    )  # fmt: skip


@pytest.mark.slow
def test_run_over_http_replays_from_cache_with_server_stopped(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "replay"
    # 429s and malformed replies in the source run: the replay must retry exactly alike
    with start_sim_server(
        "vllm-3b", seed=5, overhead_s=0.01, decode_tps=2000, p_rate_limit=0.15, p_malformed=0.05
    ) as h:
        client = LLMClient("openai/vllm-3b", base_url=h.base_url, seed=5, max_retries=8)
        _society(src, client).run_sync(ticks=3)
    entries = [
        json.loads(line)
        for f in (src / CACHE_DIR).glob("*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert any("error" in e for e in entries) and any("result" in e for e in entries)
    assert json.loads((src / CACHE_DIR / "config.json").read_text())["model"] == "openai/vllm-3b"

    # the server is gone: any network call would fail. The virtual clock replays the
    # recorded latencies and backoffs without waiting for them.
    _society(dst, f"cache:{src}", clock="virtual").run_sync(ticks=3)
    assert not (dst / CACHE_DIR).exists()  # a replay records nothing
    calls = open_run(dst).df("llm_calls")
    assert len(calls) == len(open_run(src).df("llm_calls")) > 10
    assert (calls["attempts"] > 1).any()
    for name in _DATASETS:
        pd.testing.assert_frame_equal(_rows(src, name), _rows(dst, name), obj=name)


async def test_cache_miss_names_the_request(tmp_path: Path) -> None:
    with start_sim_server("instant", seed=0) as h:
        client = LLMClient("openai/instant", base_url=h.base_url).with_cache(str(tmp_path))
        await client.complete([{"role": "user", "content": "recorded"}])
    replay = LLMClient(f"cache:{tmp_path}")
    again = await replay.complete([{"role": "user", "content": "recorded"}])
    assert again.text and again.record.model == "openai/instant"
    with pytest.raises(CacheMissError, match=r"occurrence 1.*recorded"):
        await replay.complete([{"role": "user", "content": "recorded"}])  # only asked once
    with pytest.raises(CacheMissError, match="never asked"):
        await replay.complete([{"role": "user", "content": "never asked"}])


async def test_two_replaying_clients_in_one_process_each_start_from_the_first_answer(
    tmp_path: Path,
) -> None:
    msgs = [{"role": "user", "content": "asked twice"}]
    with start_sim_server("instant", seed=0) as h:
        client = LLMClient("openai/instant", base_url=h.base_url).with_cache(str(tmp_path))
        first, second = await client.complete(msgs), await client.complete(msgs)
    for _ in range(2):  # occurrences are counted per replaying client, not per process
        replay = LLMClient(f"cache:{tmp_path}")
        assert (await replay.complete(msgs)).text == first.text
        assert (await replay.complete(msgs)).text == second.text


def test_the_same_cache_replayed_twice_in_one_process_gives_the_same_run(tmp_path: Path) -> None:
    src = tmp_path / "src"
    with start_sim_server("instant", seed=5) as h:
        client = LLMClient("openai/instant", base_url=h.base_url, seed=5)
        _society(src, client, agents=4).run_sync(ticks=2)
    replays = [tmp_path / "replay1", tmp_path / "replay2"]
    for dst in replays:
        out = _society(dst, f"cache:{src}", clock="virtual", agents=4).run_sync(ticks=2)
        assert out["errors"] == 0 and out["steps"] == 8
    for name in ("agent_states", "llm_calls"):
        pd.testing.assert_frame_equal(_rows(replays[0], name), _rows(replays[1], name), obj=name)


def test_cache_of_a_run_without_one_is_a_clear_error(tmp_path: Path) -> None:
    from agentlab.errors import ConfigError

    with pytest.raises(ConfigError, match="no response cache"):
        LLMClient(f"cache:{tmp_path}")


def test_recorder_keeps_appending_after_in_place_truncation_with_bounded_open_files(
    tmp_path: Path,
) -> None:
    from agentlab.llm import cache_backend as cb
    from agentlab.llm.sim_backend import SimResult

    kw = {"model": "openai/x", "messages": [{"role": "user", "content": "héllo"}], "params": {}}
    res = SimResult("réponse", 3, 4, 0.0, None, 0.5, 0.5)
    rec = cb.CacheRecorder(tmp_path / "a", {"model": "openai/x"})
    rec.record(kw, False, 0.5, res=res)
    rec.record(kw, False, 0.25, error=cb.RateLimitError("429"))
    lines = [json.loads(x) for x in rec.path.read_text(encoding="utf-8").splitlines()]
    key = cb.request_key(kw, False)[0]
    assert [(e["key"], e["n"]) for e in lines] == [(key, 0), (key, 1)]
    assert lines[0]["result"]["text"] == "réponse" and lines[0]["result"]["ttft"] == 0.5
    assert lines[1]["error"] == {"class": "RateLimitError", "message": "429"}
    # a Ray batch ships the file and truncates it in place (staging.take_log): the open
    # handle must write from the new end, not leave a hole at its old offset
    os.truncate(rec.path, 0)
    rec.record(kw, False, 0.5, res=res)
    data = rec.path.read_bytes()
    assert b"\0" not in data and json.loads(data)["n"] == 2
    # many runs in one process: at most _MAX_OPEN files stay open, the rest reopen on demand
    others = [cb.CacheRecorder(tmp_path / f"r{i}", {}) for i in range(cb._MAX_OPEN + 2)]
    for r in others:
        r.record(kw, False, 0.1, res=res)
    assert sum(r._file is not None for r in [rec, *others]) <= cb._MAX_OPEN
    assert rec._file is None and others[0]._file is None
    rec.record(kw, False, 0.5, res=res)
    assert [json.loads(x)["n"] for x in rec.path.read_text().splitlines()] == [2, 3]
    for r in [rec, *others]:
        r.close()


@pytest.mark.parametrize("flag", ["1", "0"])
def test_import_litellm_freezes_the_import_heap_unless_turned_off(flag: str) -> None:
    code = (
        "import gc\nfrom agentlab.llm.litellm_backend import import_litellm\n"
        "import_litellm()\nprint(gc.get_freeze_count())"
    )
    env = {**os.environ, "AGENTLAB_GC_FREEZE": flag}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240
    )
    assert out.returncode == 0, out.stderr[-2000:]
    frozen = int(out.stdout.split()[-1])
    # litellm's import leaves ~400k objects; frozen, later full collections skip them
    assert frozen > 100_000 if flag == "1" else frozen == 0
