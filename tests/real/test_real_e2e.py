"""End to end against a real model: a society and a topology run through litellm over HTTP.

Run by ``make test-real`` (part of ``make test``) via ``scripts/real_server.sh``, which
installs the prebuilt llama-cpp-cffi route and serves SmolLM2-135M with
``scripts/real_server.py``. These check the toolkit on a real server (records, streaming
TTFT, grammar-constrained structured output, the workflow's call graph), not the model's
wisdom.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from agentlab.llm import LLMClient

pytestmark = pytest.mark.real

BASE_URL = os.environ.get("AGENTLAB_REAL_BASE_URL")
MODEL = os.environ.get("AGENTLAB_REAL_MODEL", "openai/smollm2")
if not BASE_URL:
    pytest.skip(
        "AGENTLAB_REAL_BASE_URL not set: run scripts/real_server.sh", allow_module_level=True
    )


def _client(**kw: object) -> LLMClient:
    opts: dict[str, object] = {
        "seed": 0,
        "timeout": 300.0,
        "max_retries": 1,
        "temperature": 0.7,
        "max_tokens": 40,
        "structured_output": "json_object",  # our server: grammar from the schema
    }
    opts.update(kw)
    return LLMClient(MODEL, base_url=BASE_URL, **opts)


class Vote(BaseModel):
    choice: int = Field(ge=1, le=3)
    reason: str


async def test_streaming_ttft_usage_and_finish_reason() -> None:
    c = _client()
    s = c.stream([{"role": "user", "content": "Write two sentences about rivers."}], max_tokens=12)
    deltas = [d async for d in s]
    resp = s.response
    assert resp is not None and len(deltas) > 1 and "".join(deltas) == resp.text
    rec = resp.record
    assert rec.ttft is not None and 0 < rec.ttft < rec.latency
    assert rec.prompt_tokens > 10 and rec.completion_tokens == 12
    assert resp.finish_reason == "length"  # the server reports the cut, not "stop"


async def test_structured_output_is_grammar_constrained() -> None:
    r = await _client().complete(
        [{"role": "user", "content": "Pick option 1, 2 or 3 for lunch and say why."}],
        response_format=Vote,
        max_tokens=60,
    )
    assert isinstance(r.parsed, Vote) and r.record.outcome == "ok"


def test_topology_run_against_the_real_server(tmp_path: Path) -> None:
    from agentlab.topology import Experiment

    exp = Experiment(
        topologies=["sequential"],
        agents=2,
        runs=1,
        llm=_client(),
        clock="real",
        out=tmp_path / "topo",
        progress=False,
        rounds=1,
        max_iterations=1,
    )
    res = exp.run_sync()
    calls = res.calls_df()
    stages = set(calls["stage"])
    assert {"recruitment", "discussion", "execution", "evaluation", "final"} <= stages
    ok = calls[calls["outcome"] == "ok"]
    assert len(ok) >= len(calls) - 2  # a 135M model may break a schema now and then
    assert (ok["end"] > ok["start"]).all() and (ok["completion_tokens"] > 0).all()


def test_small_society_against_the_real_server(tmp_path: Path) -> None:
    from agentlab.runtime import Society

    society = Society.create(
        tmp_path / "soc",
        agents=[{"type": "llm", "n": 2, "prefix": "citizen", "config": {"max_iterations": 1}}],
        env=["social_feed"],
        llm=_client(max_tokens=32),
        seed=0,
    )
    try:
        stats = society.run_sync(ticks=1)
    finally:
        society.close()
    assert stats["llm_calls"] >= 2 and stats["tokens"] > 0
    import agentlab

    calls = agentlab.open_run(tmp_path / "soc").llm_calls_df()
    assert len(calls) >= 2 and (calls["model"] == MODEL).all()
