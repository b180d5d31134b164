"""litellm over real HTTP against sim-serve: completions, streaming TTFT, tools, 429s."""

from __future__ import annotations

import importlib.util
import json
import urllib.request
from collections.abc import Iterator

import pytest

from agentlab.errors import RateLimitError
from agentlab.llm import LLMClient
from agentlab.llm.sim_serve import SimServeHandle, start_sim_server
from tests.llm.serve_helpers import MSGS, TOOLS, Vote, quick_vllm_server

if importlib.util.find_spec("litellm") is None:  # find_spec: do not import at collection
    pytest.skip("litellm not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def server() -> Iterator[SimServeHandle]:
    with quick_vllm_server() as h:
        yield h


@pytest.fixture(scope="module")
def limited() -> Iterator[SimServeHandle]:
    with start_sim_server("instant", seed=0, p_rate_limit=1.0) as h:
        yield h


def test_models_and_metrics_endpoints(server: SimServeHandle) -> None:
    models = json.loads(urllib.request.urlopen(server.base_url + "/models", timeout=5).read())
    assert "sim/vllm-3b" in [m["id"] for m in models["data"]]
    text = urllib.request.urlopen(server.base_url[:-3] + "/metrics", timeout=5).read().decode()
    assert "vllm:num_requests_running" in text and "vllm:generation_tokens_total" in text


async def test_round_trip_stream_ttft_structured_and_tools(server: SimServeHandle) -> None:
    c = LLMClient("openai/vllm-3b", base_url=server.base_url, seed=0, max_retries=0)
    direct = await LLMClient("sim/vllm-3b", seed=0).complete(MSGS, sim_completion_tokens=30)
    r = await c.complete(MSGS, sim_completion_tokens=30)  # sim_* is stripped for litellm
    assert r.text and r.record.prompt_tokens == direct.record.prompt_tokens
    assert r.record.outcome == "ok" and r.record.first_token is None and r.record.latency >= 0.2

    s = c.stream(MSGS)
    deltas = [d async for d in s]
    rec = s.response.record  # type: ignore[union-attr]
    assert len(deltas) >= 5 and rec.stream and rec.completion_tokens > 0
    assert rec.ttft is not None and 0.2 <= rec.ttft < rec.latency  # first non-empty chunk

    v = await c.complete(MSGS, response_format=Vote)
    assert isinstance(v.parsed, Vote)
    t = await c.complete(MSGS, tools=TOOLS, tool_choice="required")
    assert t.tool_calls and t.tool_calls[0].name == "post" and "text" in t.tool_calls[0].arguments
    ts = await c.complete(MSGS, tools=TOOLS, tool_choice="required", stream=True)
    assert ts.tool_calls[0].arguments == t.tool_calls[0].arguments


async def test_http_429_maps_to_rate_limit_error(limited: SimServeHandle) -> None:
    c = LLMClient("openai/instant", base_url=limited.base_url, max_retries=1)
    with pytest.raises(RateLimitError) as ei:
        await c.complete(MSGS)
    assert ei.value.record.outcome == "rate_limited" and ei.value.record.attempts == 2  # type: ignore[attr-defined]
