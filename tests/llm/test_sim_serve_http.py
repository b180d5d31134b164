"""sim-serve as a real OpenAI-compatible server: validation, 404s, finish_reason, metrics,
fresh fault draws per request, and slots freed by client disconnects (real HTTP)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import openai
import pytest

from agentlab.llm.sim_serve import ATTEMPT_HEADER, SimServeHandle, start_sim_server
from tests.llm.serve_helpers import MSGS, free_port

TOOL = {
    "type": "function",
    "function": {"name": "post", "parameters": {"type": "object", "properties": {}}},
}


@pytest.fixture(scope="module")
def server() -> Iterator[SimServeHandle]:
    with start_sim_server("vllm-3b", seed=0, overhead_s=0.05, decode_tps=400) as h:
        yield h


def _sdk(h: SimServeHandle) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=h.base_url, api_key="none", max_retries=0)


# (body changes, status, param, code) — each found answering 500 or a silent 200 before
BAD_BODIES: list[tuple[dict[str, Any], str, str]] = [
    ({"messages": "hello"}, "messages", "invalid_type"),
    ({"messages": None}, "messages", "invalid_type"),
    ({"messages": []}, "messages", "empty_array"),
    ({"messages": [{"role": "user", "content": None}]}, "messages[0]", "invalid_value"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role", "invalid_value"),
    ({"max_tokens": "5"}, "max_tokens", "invalid_type"),
    ({"max_tokens": -5}, "max_tokens", "integer_below_min_value"),
    ({"max_tokens": 0}, "max_tokens", "integer_below_min_value"),
    ({"temperature": "hot"}, "temperature", "invalid_type"),
    ({"temperature": 7}, "temperature", "integer_above_max_value"),
    ({"tools": "post"}, "tools", "invalid_type"),
    ({"tools": [{"type": "function"}]}, "tools[0].function", "missing_required_parameter"),
    ({"tools": [{"name": "post"}]}, "tools[0].type", "missing_required_parameter"),
    ({"tools": [TOOL], "tool_choice": "always"}, "tool_choice", "invalid_value"),
    ({"response_format": 3}, "response_format", "invalid_type"),
    ({"response_format": {"type": "yaml"}}, "response_format.type", "invalid_value"),
    ({"response_format": {"type": "json_schema"}}, "response_format", "invalid_value"),
    ({"stream": "yes"}, "stream", "invalid_type"),
    ({"sim_bogus": 1}, "sim_bogus", "invalid_value"),
]


@pytest.mark.parametrize(("change", "param", "code"), BAD_BODIES)
async def test_malformed_body_gets_openai_400_naming_the_field(
    server: SimServeHandle, change: dict[str, Any], param: str, code: str
) -> None:
    body = {"model": "vllm-3b", "messages": MSGS, **change}
    async with (
        aiohttp.ClientSession() as s,
        s.post(server.base_url + "/chat/completions", json=body) as r,
    ):
        assert r.status == 400, await r.text()
        err = (await r.json())["error"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param and err["code"] == code
    assert param.split("[")[0].split(".")[0] in err["message"]
    # the same body through the openai SDK: BadRequestError carrying the same fields
    kw = {k: v for k, v in body.items() if k not in ("model", "messages")}
    extra = {k: kw.pop(k) for k in list(kw) if k.startswith("sim_")}
    with pytest.raises(openai.BadRequestError) as ei:
        await _sdk(server).chat.completions.create(
            model=body["model"], messages=body["messages"], extra_body=extra or None, **kw
        )
    assert ei.value.status_code == 400 and ei.value.param == param and ei.value.code == code


async def test_invalid_json_and_unknown_route_are_json_errors(server: SimServeHandle) -> None:
    async with aiohttp.ClientSession() as s:
        url = server.base_url + "/chat/completions"
        async with s.post(
            url, data=b'{"model": ', headers={"Content-Type": "application/json"}
        ) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "invalid_json"
        async with s.get(server.base_url + "/nothing") as r:
            assert r.status == 404 and "error" in await r.json()


async def test_unknown_model_is_404_model_not_found(server: SimServeHandle) -> None:
    with pytest.raises(openai.NotFoundError) as ei:
        await _sdk(server).chat.completions.create(model="gpt-9", messages=MSGS)  # type: ignore[arg-type]
    assert ei.value.code == "model_not_found" and ei.value.param == "model"
    assert "gpt-9" in ei.value.message
    with pytest.raises(openai.NotFoundError):
        await _sdk(server).models.retrieve("gpt-9")
    assert (await _sdk(server).models.retrieve("sim/vllm-3b")).id == "sim/vllm-3b"


async def test_finish_reason_length_when_max_tokens_cuts_the_reply(server: SimServeHandle) -> None:
    sdk = _sdk(server)
    r = await sdk.chat.completions.create(model="vllm-3b", messages=MSGS, max_tokens=3)  # type: ignore[arg-type]
    assert r.choices[0].finish_reason == "length" and r.usage and r.usage.completion_tokens == 3
    r = await sdk.chat.completions.create(
        model="vllm-3b",
        messages=MSGS,  # type: ignore[arg-type]
        max_tokens=1000,
        extra_body={"sim_completion_tokens": 5},
    )
    assert r.choices[0].finish_reason == "stop" and r.usage and r.usage.completion_tokens == 5
    stream = await sdk.chat.completions.create(
        model="vllm-3b",
        messages=MSGS,  # type: ignore[arg-type]
        max_completion_tokens=4,
        stream=True,
    )
    finishes = [c.choices[0].finish_reason async for c in stream if c.choices]
    assert finishes[-1] == "length"


async def test_metrics_are_prometheus_with_vllm_names(server: SimServeHandle) -> None:
    await _sdk(server).chat.completions.create(model="vllm-3b", messages=MSGS)  # type: ignore[arg-type]
    async with aiohttp.ClientSession() as s, s.get(server.base_url[:-3] + "/metrics") as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        text = await r.text()
    for name, kind in (
        ("vllm:num_requests_running", "gauge"),
        ("vllm:num_requests_waiting", "gauge"),
        ("vllm:time_to_first_token_seconds", "histogram"),
        ("vllm:e2e_request_latency_seconds", "histogram"),
        ("vllm:prompt_tokens_total", "counter"),
        ("vllm:generation_tokens_total", "counter"),
        ("vllm:request_success_total", "counter"),
    ):
        assert f"# HELP {name} " in text and f"# TYPE {name} {kind}" in text, name
    count = [
        ln for ln in text.splitlines() if ln.startswith("vllm:e2e_request_latency_seconds_count")
    ]
    assert count and float(count[0].split()[-1]) >= 1


async def test_fault_draw_is_fresh_per_request_unless_the_attempt_header_pins_it() -> None:
    with start_sim_server("instant", seed=3, p_rate_limit=0.5) as h:
        url = h.base_url + "/chat/completions"
        body = {"model": "instant", "messages": MSGS}
        async with aiohttp.ClientSession() as s:
            fresh = [(await s.post(url, json=body)).status for _ in range(30)]
            pinned = [
                (await s.post(url, json=body, headers={ATTEMPT_HEADER: "7"})).status
                for _ in range(5)
            ]
    # the same request retried meets new draws: both outcomes appear, about half each
    assert set(fresh) == {200, 429} and 5 <= fresh.count(429) <= 25
    assert len(set(pinned)) == 1  # a pinned attempt number reproduces its draw


def test_cli_fault_rate_flags_configure_the_server() -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "agentlab.cli", "sim-serve", "--profile", "instant"]
    cmd += ["--port", str(port), "--rate-limit-rate", "1.0", "--set", "slots=2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert "p_rate_limit=1.0" in banner, banner
        body = json.dumps({"model": "instant", "messages": MSGS}).encode()
        import urllib.error
        import urllib.request

        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        for _ in range(50):  # the banner prints just before the socket listens
            try:
                urllib.request.urlopen(req, timeout=5)
            except urllib.error.HTTPError as exc:
                assert exc.code == 429
                break
            except urllib.error.URLError:
                time.sleep(0.1)
        else:
            pytest.fail("sim-serve did not answer")
    finally:
        proc.terminate()
        proc.wait(10)
    bad = subprocess.run(
        [*cmd[:6], "--timeout-rate", "2"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "--timeout-rate must be in [0, 1]" in bad.stderr


async def _timed(url: str, body: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        assert r.status == 200
        await r.read()
    return time.perf_counter() - t0


async def test_disconnect_storm_frees_every_slot() -> None:
    # 8 slots, ~2 s per 120-token reply: 200 requests would hold the server ~50 s
    with start_sim_server("vllm-3b", seed=0, overhead_s=0.05, decode_tps=60) as h:
        url = h.base_url + "/chat/completions"
        probe = {"model": "vllm-3b", "messages": MSGS, "sim_completion_tokens": 12}
        normal = await _timed(url, probe)

        async def leave(i: int) -> None:
            body = {"model": "vllm-3b", "messages": [{"role": "user", "content": f"q{i}"}]}
            if i % 2:  # streaming client that goes away after the stream has started
                async with aiohttp.ClientSession() as s:
                    r = await s.post(url, json={**body, "stream": True})
                    assert r.status == 200
                    try:
                        await asyncio.wait_for(r.content.readline(), 0.3)
                    except TimeoutError:
                        pass
                    r.close()
            else:  # non-streaming client that times out
                timeout = aiohttp.ClientTimeout(total=0.3)
                async with aiohttp.ClientSession(timeout=timeout) as s:
                    with pytest.raises(TimeoutError):
                        await s.post(url, json=body)

        await asyncio.gather(*(leave(i) for i in range(200)))
        await asyncio.sleep(0.2)  # let the server notice the last disconnects
        m = h.server.metrics()
        assert m["num_requests_running"] == 0 and m["num_requests_waiting"] == 0, m
        after = await _timed(url, probe)
    assert after < 2 * normal + 0.1, (normal, after)
