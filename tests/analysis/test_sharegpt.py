"""``sharegpt.json``: the file ``vllm bench serve --dataset-name sharegpt`` reads, checked
field by field against vLLM's documented reader (``ShareGPTDataset.load_data`` /
``sample`` and ``is_valid_sequence``, re-implemented below, vLLM itself needs a GPU
build), with the Llama-3 vocabulary of the run's profile: every call's output length
survives as the completion's token count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentlab.analysis.sharegpt import export_sharegpt, text_of_tokens, vllm_keeps
from agentlab.analysis.traffic import export_traffic
from agentlab.llm.tokens import get_tokenizer
from agentlab.runtime import Society
from agentlab.store import open_run

LLAMA3 = get_tokenizer("llama3")


def _vllm_sharegpt_reader(path: Path, bos: int) -> list[dict[str, Any]]:
    """vLLM's ShareGPT rule: ``json.load`` a list, keep entries with >= 2 conversation
    turns, prompt = turn 0 ``value``, completion = turn 1 ``value``, lengths =
    ``len(tokenizer(text).input_ids)`` (the Llama-3 tokenizer adds one BOS), then the
    default ``is_valid_sequence`` filter (min 4, prompt <= 1024, total <= 2048)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data = [e for e in data if "conversations" in e and len(e["conversations"]) >= 2]
    out = []
    for e in data:
        prompt, completion = e["conversations"][0]["value"], e["conversations"][1]["value"]
        p, o = LLAMA3.count(prompt) + bos, LLAMA3.count(completion) + bos
        if not (p < 4 or o < 4 or p > 1024 or p + o > 2048):
            out.append({"id": e["id"], "prompt_len": p, "output_len": o})
    return out


def _run(out: Path) -> Path:
    soc = Society.create(out, agents=[{"type": "counter", "n": 6, "config": {"llm_calls": 2}},
                                      {"type": "llm", "n": 4}],
                         llm="sim/vllm-3b", seed=5, clock="virtual", progress=False)  # fmt: skip
    soc.run_sync(ticks=2)
    soc.close()
    return out


def test_vllm_sharegpt_reader_keeps_every_recorded_length(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    paths = export_traffic(run, tmp_path / "out")
    with open_run(run) as r:
        calls = {row["request_id"]: row for row in r.df("llm_calls").to_dict("records")}
    doc = json.loads(paths["sharegpt"].read_text())
    # the documented format, field by field: a list of {"id", "conversations": [human, gpt]}
    assert isinstance(doc, list) and len(doc) == len(calls) == 32
    for e in doc:
        assert set(e) == {"id", "conversations"} and e["id"] in calls
        assert [t["from"] for t in e["conversations"]] == ["human", "gpt"]
        assert all(isinstance(t["value"], str) for t in e["conversations"])
    assert len({e["conversations"][0]["value"] for e in doc}) == len(doc)  # no shared prompts
    read = _vllm_sharegpt_reader(paths["sharegpt"], bos=1)
    assert len(read) == len(doc)  # nothing outside the reader's filter in this run
    lengths = {(r["prompt_len"], r["output_len"]) for r in read}
    assert len({o for _, o in lengths}) > 5  # many output lengths, not one default
    for r in read:
        c = calls[r["id"]]
        assert (r["prompt_len"], r["output_len"]) == (c["prompt_tokens"], c["completion_tokens"])


def test_vllm_custom_file_says_it_loses_output_lengths(tmp_path: Path) -> None:
    from agentlab.analysis import traffic

    assert "which loses output lengths" in (traffic.__doc__ or "")
    paths = export_traffic(_run(tmp_path / "run"), tmp_path / "out")
    rows = [json.loads(x) for x in paths["vllm"].read_text().splitlines()]
    assert rows and all(isinstance(r["prompt"], str) for r in rows)  # CustomDataset's column


def test_entries_outside_vllms_filter_are_counted_and_warned(tmp_path: Path) -> None:
    from agentlab.topology import Experiment

    # an agent workflow's prompts: most are longer than vLLM's 1024-token ShareGPT limit
    Experiment(topologies=["sequential"], agents=3, runs=1, llm="sim/vllm-3b", seed=1,
               out=tmp_path / "exp", progress=False, max_iterations=1).run_sync()  # fmt: skip
    with open_run(tmp_path / "exp") as r:
        calls = r.df("llm_calls")
    outside = sum(
        not vllm_keeps(p, o)
        for p, o in zip(calls.prompt_tokens, calls.completion_tokens, strict=True)
    )
    assert outside > 0
    with pytest.warns(UserWarning, match=rf"drops {outside} of {len(calls)} entries"):
        res = export_sharegpt(tmp_path / "exp", tmp_path / "s.json")
    assert (res["entries"], res["vllm_drops"], res["inexact"]) == (len(calls), outside, 0)
    read = _vllm_sharegpt_reader(res["path"], bos=1)
    assert len(read) == len(calls) - outside
    assert not vllm_keeps(1025, 10) and not vllm_keeps(3, 10)
    assert vllm_keeps(4, 2, fixed_output_len=True)


@pytest.mark.parametrize("tok", ["llama3", "chars:3.6"])
@pytest.mark.parametrize("n", [0, 1, 3, 4, 17, 256, 1500])
def test_filler_text_has_exactly_n_tokens(tok: str, n: int) -> None:
    text = text_of_tokens(n, tok, f"seed-{n}")
    assert get_tokenizer(tok).count(text) == n
    assert text == text_of_tokens(n, tok, f"seed-{n}")  # deterministic
