"""End to end against a real model: a society and a topology run through litellm over HTTP.

Run by ``make test-real`` (part of ``make test``) via ``scripts/real_server.sh``, which
installs the prebuilt llama-cpp-cffi route and serves SmolLM2-135M with
``scripts/real_server.py``. These check the toolkit on a real server (records, streaming
TTFT, grammar-constrained structured output, the workflow's call graph), not the model's
wisdom.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from agentlab.llm import LLMClient
from agentlab.topology import STAGES

pytestmark = pytest.mark.real

BASE_URL = os.environ.get("AGENTLAB_REAL_BASE_URL")
MODEL = os.environ.get("AGENTLAB_REAL_MODEL", "openai/smollm2")
if not BASE_URL:
    pytest.skip(
        "AGENTLAB_REAL_BASE_URL not set: run scripts/real_server.sh", allow_module_level=True
    )
# scripts/real_server.sh has the server log every request it answers here
REQUEST_LOG = Path(os.environ.get("AGENTLAB_REAL_REQUEST_LOG", "/nonexistent"))


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


def _requests_since(offset: int) -> list[dict[str, Any]]:
    """What the server was asked and answered after byte ``offset`` of its request log."""
    with REQUEST_LOG.open("rb") as f:
        f.seek(offset)
        return [json.loads(line) for line in f.read().splitlines() if line.strip()]


def _marker_rows(name: str, rows: list[dict[str, Any]]) -> None:
    """Report how often the real model wrote the marker (test-output/real/<name>.json)."""
    out = Path(os.environ.get("AGENTLAB_TEST_OUTPUT", "test-output")) / "real"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(rows, indent=1))
    print(f"{name} on SmolLM2-135M:", rows)


# A one-line task keeps prompts short: prefill (~60-200 prompt tokens/s on one thread,
# depending on the box's load) is most of what a call costs here.
TASK = {"id": "add", "category": "math", "prompt": "What is 17 + 25?"}


def test_topology_run_requests_and_parses_markers_on_the_real_server(tmp_path: Path) -> None:
    """A Sequential run through litellm: every stage reaches the real server, every
    discussion turn asks for the original's ``[CONSENSUS]`` marker, and the run's agreement
    is the marker parsed from the real replies. A 135M model cut at 16 tokens rarely writes
    it (the prompt asks for it at the end): the rate is reported, not required."""
    from agentlab.topology import Experiment
    from agentlab.topology import prompts as P

    offset = REQUEST_LOG.stat().st_size
    exp = Experiment(
        topologies=["sequential"],
        agents=2,
        runs=1,
        tasks=[TASK],
        # SmolLM2's recruitment JSON does not fit in 16 tokens (nor in 160: its strings run
        # on), so the workflow pads the team with executors, as the original does, and the
        # failed call and its repair are recorded; structured output proper is tested above.
        llm=_client(max_retries=0, max_tokens=16),
        clock="real",
        out=tmp_path / "topo",
        progress=False,
        rounds=1,
        max_iterations=1,
        max_tokens=16,  # every free-text call, discussion to final answer
    )
    res = exp.run_sync()
    calls, runs = res.calls_df(), res.runs_df()
    assert set(calls["stage"]) == set(STAGES)
    assert (runs["status"] == "ok").all()
    free = calls[calls["stage"] != "recruitment"]
    assert (free["outcome"] == "ok").all(), free[["stage", "outcome", "error"]]
    assert (free["end"] > free["start"]).all() and (free["completion_tokens"] > 0).all()
    assert (free["completion_tokens"] <= 16).all()  # the workflow's cap reached the server

    reqs = _requests_since(offset)
    turns = [r for r in reqs if "in a discussion among experts" in r["messages"][-1]["content"]]
    assert len(turns) == (calls["stage"] == "discussion").sum() == 2
    assert all(P.CONSENSUS in r["messages"][-1]["content"] for r in turns)  # asked for
    marks = [P.has_consensus(r["reply"]) for r in turns]
    run = runs.iloc[0]
    assert int(run["agreed_rounds"]) == int(all(marks))  # parsed from the real text
    said = res.messages_df()["content"].tolist()
    assert said == [r["reply"] for r in turns]  # the history holds the real replies
    _marker_rows("consensus_rate", [{"turns": len(marks), "with_marker": sum(marks)}])


async def test_star_reviews_ask_for_approval_on_the_real_server() -> None:
    """Star's protocol alone (a solver and one reviewer): the review asks for
    ``[APPROVED]`` and the protocol's decision is the marker parsed from the real reply."""
    from agentlab.core.clock import RealClock
    from agentlab.topology import PROTOCOLS, RunContext, WorkflowConfig
    from agentlab.topology import prompts as P
    from agentlab.topology.models import Expert

    offset = REQUEST_LOG.stat().st_size
    experts = [
        Expert("expert_1", "planner", "plan", "You are the planner."),
        Expert("expert_2", "critic", "review", "You are the critic."),
    ]
    cfg = WorkflowConfig(agents=2, rounds=1, max_tokens=16)
    ctx = RunContext(_client(), cfg, "star", "star-real", TASK, RealClock(), simulated=False)
    await PROTOCOLS["star"](ctx, experts, 1)
    reqs = _requests_since(offset)
    assert len(reqs) == 2 and "reviewing the solver" in reqs[1]["messages"][-1]["content"]
    assert P.APPROVED in reqs[1]["messages"][-1]["content"]
    assert P.APPROVED not in reqs[0]["messages"][-1]["content"]  # the solver is not asked
    approved = P.has_approval(reqs[1]["reply"])
    assert ctx.stats["agreed_rounds"] == int(approved) and ctx.stats["rounds"] == 1
    _marker_rows("approval_rate", [{"reviews": 1, "with_marker": int(approved)}])


def test_small_society_against_the_real_server(tmp_path: Path) -> None:
    from agentlab.runtime import Society

    society = Society.create(
        tmp_path / "soc",
        agents=[{"type": "llm", "n": 2, "prefix": "citizen", "config": {"max_iterations": 1}}],
        env=["social_feed"],
        llm=_client(max_tokens=16),
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
