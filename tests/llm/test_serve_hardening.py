"""sim-serve hardening (issue 23), each over real HTTP or a raw socket: schemas that
wedged the server ($ref cycles, huge minLength / minItems), the fault-control endpoint
(opt-in, JSON only, Host and Origin checked), wrongly typed ``sim_*`` fields, unbounded
lengths, ``tool_choice`` naming a missing tool, slow-header connections and the listen
backlog."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from agentlab.llm.sim_serve import SimServeHandle, start_sim_server
from tests.llm.serve_helpers import MSGS, free_port

CYCLE = {"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}}
# a recursive model whose required field never ends (Node.child: Node)
ENDLESS = {
    "$ref": "#/$defs/Node",
    "$defs": {
        "Node": {
            "type": "object",
            "properties": {"child": {"$ref": "#/$defs/Node"}},
            "required": ["child"],
        }
    },
}
# a recursive model that does end (children may be empty): must still be served
TREE = {
    "$ref": "#/$defs/Node",
    "$defs": {
        "Node": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 20},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            },
            "required": ["name", "children"],
        }
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[SimServeHandle]:
    with start_sim_server("vllm-3b", seed=0, overhead_s=0.01, decode_tps=2000) as h:
        yield h


async def _post(
    h: SimServeHandle, timeout: float = 20.0, **body: Any
) -> tuple[int, dict[str, Any]]:
    body = {"model": "vllm-3b", "messages": MSGS, **body}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s,
        s.post(h.base_url + "/chat/completions", json=body) as r,
    ):
        assert r.headers["Content-Type"].startswith("application/json"), await r.text()
        return r.status, await r.json()


def _schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def _tool(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "f", "parameters": schema}}]


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (CYCLE, "cycle"),
        (ENDLESS, "values"),
        ({"type": "string", "minLength": 100_000_000}, "minLength"),
        ({"type": "array", "minItems": 10_000_000}, "minItems"),
    ],
)
async def test_schema_that_wedged_the_server_is_a_400(
    server: SimServeHandle, schema: dict[str, Any], why: str
) -> None:
    t0 = time.perf_counter()
    status, r = await _post(server, response_format=_schema_format(schema))
    assert status == 400 and r["error"]["param"] == "response_format", r
    assert why in r["error"]["message"]
    obj = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    if "$defs" in schema:  # refs resolve from the parameters' root
        obj = {**schema}
    status, r = await _post(server, tools=_tool(obj), tool_choice="required")
    assert status == 400 and r["error"]["param"] == "tools[0].function.parameters", r
    assert time.perf_counter() - t0 < 10
    # and the server still answers
    status, r = await _post(server, response_format=_schema_format(TREE))
    assert status == 200
    assert "children" in json.loads(r["choices"][0]["message"]["content"])


async def test_huge_max_items_is_served_with_a_short_array(server: SimServeHandle) -> None:
    schema = {"type": "array", "items": {"type": "integer"}, "maxItems": 10_000_000}
    status, r = await _post(server, response_format=_schema_format(schema))
    assert status == 200 and len(json.loads(r["choices"][0]["message"]["content"])) <= 64


def _control(h: SimServeHandle, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """POST /sim/faults with raw headers (Host and Origin as a browser would send them)."""
    with socket.create_connection((h.host, h.port), timeout=10) as sk:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        sk.sendall(
            f"POST /sim/faults HTTP/1.1\r\n{head}Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        data = b""
        while chunk := sk.recv(65536):
            data += chunk
    head_b, _, payload = data.partition(b"\r\n\r\n")
    return int(head_b.split()[1]), json.loads(payload or b"{}")


def test_fault_control_is_off_unless_asked(server: SimServeHandle) -> None:
    host = f"127.0.0.1:{server.port}"
    body = json.dumps({"p_timeout": 1.0}).encode()
    status, r = _control(server, body, {"Host": host, "Content-Type": "application/json"})
    assert status == 403 and "--fault-control" in r["error"]["message"]
    assert server.server.profile.p_timeout == 0.0


def test_fault_control_refuses_web_pages() -> None:
    with start_sim_server("instant", fault_control=True) as h:
        host = f"127.0.0.1:{h.port}"
        body = json.dumps({"p_timeout": 1.0}).encode()
        refused = [
            # a no-cors fetch from another site: text/plain, with its Origin
            ({"Host": host, "Content-Type": "text/plain", "Origin": "http://evil.example"}, 415),
            ({"Host": host, "Content-Type": "application/x-www-form-urlencoded"}, 415),
            ({"Host": host}, 415),
            # JSON with a foreign Origin (CORS preflight would stop a browser; curl-like)
            ({"Host": host, "Content-Type": "application/json", "Origin": "http://evil.example"}, 403),
            # DNS rebinding: the attacker's name resolving to 127.0.0.1
            ({"Host": f"evil.example:{h.port}", "Content-Type": "application/json"}, 403),
        ]  # fmt: skip
        for headers, want in refused:
            status, _ = _control(h, body, headers)
            assert status == want, (headers, status)
        assert h.server.profile.p_timeout == 0.0
        ok = {"Host": host, "Content-Type": "application/json", "Origin": f"http://{host}"}
        status, r = _control(h, body, ok)
        assert status == 200 and r["p_timeout"] == 1.0 and h.server.profile.p_timeout == 1.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sim_p_timeout", "x"),
        ("sim_completion_tokens", [1]),
        ("sim_completion_tokens", 1.5),
        ("sim_p_rate_limit", 2),
        ("sim_marker", 3),
        ("sim_bool_p", {}),
    ],
)
async def test_wrongly_typed_sim_field_is_a_400_naming_it(
    server: SimServeHandle, field: str, value: Any
) -> None:
    status, r = await _post(server, **{field: value})
    assert status == 400 and r["error"]["param"] == field, r
    assert r["error"]["type"] == "invalid_request_error"


async def test_null_sim_field_means_the_default(server: SimServeHandle) -> None:
    status, r = await _post(server, sim_p_rate_limit=None, sim_completion_tokens=None)
    assert status == 200, r


@pytest.mark.parametrize(
    "change",
    [
        {"max_tokens": 10**12},
        {"max_tokens": 10**12, "sim_completion_tokens": 10**9},
        {"max_completion_tokens": 200_000},
        {"sim_completion_tokens": 10**9},
        {"min_tokens": 10**9},
    ],
)
async def test_unbounded_lengths_are_refused(
    server: SimServeHandle, change: dict[str, Any]
) -> None:
    status, r = await _post(server, timeout=10, **change)
    assert status == 400 and r["error"]["param"] in change, r


async def test_tool_choice_naming_a_missing_tool_names_tool_choice(server: SimServeHandle) -> None:
    tools = _tool({"type": "object", "properties": {}})
    choice = {"type": "function", "function": {"name": "nope"}}
    status, r = await _post(server, tools=tools, tool_choice=choice)
    assert (
        status == 400 and r["error"]["param"] == "tool_choice" and "nope" in r["error"]["message"]
    )
    status, r = await _post(server, tool_choice="required")
    assert status == 400 and r["error"]["param"] == "tool_choice"


async def test_slow_header_connections_are_dropped() -> None:
    with start_sim_server("instant", header_timeout=0.5) as h:
        socks = []
        for _ in range(20):  # each sends half a request line and then nothing
            sk = socket.create_connection((h.host, h.port), timeout=10)
            sk.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            socks.append(sk)
        await asyncio.sleep(0.2)
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        # dropped: the server closes each (recv returns b"" instead of blocking for ever)
        closed = await asyncio.gather(*(loop.run_in_executor(None, sk.recv, 100) for sk in socks))
        waited = time.perf_counter() - t0
        for sk in socks:
            sk.close()
        assert closed == [b""] * 20 and waited < 8
        # a request sent in time is served
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                h.base_url + "/chat/completions", json={"model": "instant", "messages": MSGS}
            ) as r,
        ):
            assert r.status == 200


def _listen_backlog(port: int) -> int:
    out = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout
    return int(out.split()[2])  # State Recv-Q Send-Q: Send-Q of a listener is its backlog


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read backlogs")
def test_listen_backlog_is_raised() -> None:
    with start_sim_server("instant") as h:
        assert _listen_backlog(h.port) >= 1024
    port = free_port()
    cmd = [sys.executable, "-m", "agentlab.cli", "sim-serve", "--profile", "instant"]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port), "--backlog", "2000"], stdout=subprocess.PIPE
    )
    try:
        for _ in range(100):
            try:
                backlog = _listen_backlog(port)
                break
            except (IndexError, subprocess.CalledProcessError):
                time.sleep(0.1)
        else:
            pytest.fail("sim-serve did not listen")
    finally:
        proc.terminate()
        proc.wait(10)
    with open("/proc/sys/net/core/somaxconn") as f:
        assert backlog == min(2000, int(f.read()))
