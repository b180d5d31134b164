"""Codegen routing under the virtual clock is a function of the seed: a request counts only
its own LLM calls (not those of requests in flight beside it), and the sandbox worker's real
time is not charged to virtual time (two runs of one seed give the same span times)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agentlab.core import LLMResponse
from agentlab.env.routers import CodeGenRouter
from agentlab.env.social_feed import SocialFeed
from agentlab.llm import LLMClient
from agentlab.runtime import Society


async def test_each_request_counts_only_its_own_llm_calls(scripted: Any) -> None:
    class SlowLLM(scripted):  # type: ignore[misc,valid-type]
        async def complete(self, messages: list[dict[str, Any]], **kw: Any) -> LLMResponse:
            await asyncio.sleep(0.01)  # requests overlap, as they do in a society
            return await super().complete(messages, **kw)

    env = SocialFeed()
    env.init(seed=0)
    router = CodeGenRouter(env, llm=SlowLLM("post(text='hi')"), isolation="inline")
    results = await asyncio.gather(
        *(router.route(f"say hi {i}", agent_id=f"a{i}") for i in range(5))
    )
    assert [r.llm_calls for r in results] == [1] * 5
    assert router.stats.llm_calls == 5


def _society(out: Path) -> None:
    s = Society.create(
        out,
        agents=[{"type": "llm", "n": 12, "config": {"env_mode": "ask"}}],
        env=[{"type": "social_feed", "router": "codegen"}],  # process sandbox (default)
        llm=LLMClient("sim/vllm-3b", seed=3),
        clock="virtual",
        seed=3,
        progress=False,
    )
    try:
        s.run_sync(ticks=2)
    finally:
        s.close()


def _times(run: Path) -> tuple[list[str], list[str]]:
    spans = []
    for f in (run / "trace").glob("*.jsonl"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            spans.append(json.dumps([r["name"], r["start"], r.get("end"), r["attributes"]]))
    routers = []
    for f in (run / "replay" / "timeline").glob("*.jsonl"):
        routers += [json.dumps(json.loads(line)["routers"]) for line in f.read_text().splitlines()]
    return sorted(spans), sorted(routers)


def test_two_codegen_runs_of_one_seed_have_the_same_virtual_times(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "run", tmp_path / "b" / "run"  # the run name is in the spans
    _society(a)
    _society(b)
    spans_a, routers_a = _times(a)
    spans_b, routers_b = _times(b)
    assert len(spans_a) > 24 and len(routers_a) == 2
    assert spans_a == spans_b
    assert routers_a == routers_b
