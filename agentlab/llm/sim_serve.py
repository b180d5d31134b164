"""``agentlab sim-serve``: an OpenAI-compatible HTTP server over the simulator.

Endpoints (127.0.0.1 by default):

- ``POST /v1/chat/completions`` — streaming (SSE, with a final usage chunk when
  ``stream_options.include_usage``) and non-streaming; ``tools``, ``tool_choice``,
  ``response_format`` and ``sim_*`` overrides in the body are honoured; simulated 429s
  answer with HTTP 429;
- ``GET /v1/models``; ``GET /health``;
- ``GET /metrics`` — Prometheus text with vLLM's metric names
  (``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, ...).

One server process is one shared simulated GPU: point several Ray workers at it with
``LLMClient("openai/<profile>", base_url=...)`` when they must share capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import threading
import time
from typing import Any

from aiohttp import web

from agentlab.core.clock import RealClock
from agentlab.llm.sim_backend import SimResult, SimServer
from agentlab.llm.sim_profiles import get_profile
from agentlab.llm.structured import output_spec

__all__ = ["SimServeHandle", "build_app", "main", "start_sim_server"]

# Created at import: aiohttp's AppKey looks for a module frame, absent in worker threads.
SIM_KEY = web.AppKey("sim", SimServer)

_MAX_HANG_S = 3600.0


def build_app(profile: str = "instant", *, seed: int = 0, **params: Any) -> Any:
    """The aiohttp application serving ``sim/<profile>`` (profile parameters overridable)."""
    name = profile.removeprefix("sim/")
    server = SimServer(get_profile(name, **params), seed, RealClock())
    model_id = f"sim/{name}"
    app = web.Application()
    app[SIM_KEY] = server

    async def models(_: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "owned_by": "agentlab"} for m in (model_id, name)]
        return web.json_response({"object": "list", "data": data})

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def metrics(_: web.Request) -> web.Response:
        m = server.metrics()
        lbl = f'{{model_name="{model_id}"}}'
        lines = [
            f"vllm:num_requests_running{lbl} {m['num_requests_running']}",
            f"vllm:num_requests_waiting{lbl} {m['num_requests_waiting']}",
            f"vllm:prompt_tokens_total{lbl} {m['prompt_tokens_total']}",
            f"vllm:generation_tokens_total{lbl} {m['generation_tokens_total']}",
            f"vllm:request_success_total{lbl} {m['requests_total'] - m['rejected_total']}",
            f"agentlab_sim_rejected_total{lbl} {m['rejected_total']}",
            f"agentlab_sim_generation_tokens_per_second{lbl} {m['generation_tokens_per_s']:.3f}",
            f"agentlab_sim_slots{lbl} {m['slots']}",
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def chat(request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
            messages = body["messages"]
        except (ValueError, KeyError, TypeError):
            return _error(400, "body must be JSON with a 'messages' list", "invalid_request_error")
        spec = output_spec(body.get("response_format"))
        params = {k: v for k, v in body.items() if k.startswith("sim_")}
        for k in ("max_tokens", "max_completion_tokens", "tool_choice"):
            if body.get(k) is not None:
                params[k] = body[k]
        res = server.plan(
            messages, spec=spec, tools=body.get("tools"), params=params, timeout=_MAX_HANG_S
        )
        rid = f"chatcmpl-{server.requests_total}"
        created = int(time.time())
        if res.fault == "rate_limited":
            await asyncio.sleep(max(0.0, res.fault_at - time.time()))
            return _error(429, "Rate limit reached (simulated)", "rate_limit_error")
        if not body.get("stream"):
            if res.fault is not None:
                await asyncio.sleep(max(0.0, res.fault_at - time.time()))
                return _error(504, "generation timed out (simulated)", "timeout")
            await asyncio.sleep(max(0.0, res.end - time.time()))
            return web.json_response(_completion(res, rid, created, model_id))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(obj: Any) -> None:
            await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

        base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model_id}
        try:
            if res.tool_calls:
                await asyncio.sleep(max(0.0, res.first_token - time.time()))
                calls = [
                    {
                        "index": i,
                        "id": c[0],
                        "type": "function",
                        "function": {"name": c[1], "arguments": c[2]},
                    }
                    for i, c in enumerate(res.tool_calls)
                ]
                delta: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
                await send({**base, "choices": [{"index": 0, "delta": delta}]})
            else:
                first = True
                async for piece in server.chunks(res, model_id):
                    d: dict[str, Any] = {"content": piece}
                    if first:
                        d["role"], first = "assistant", False
                    await send({**base, "choices": [{"index": 0, "delta": d}]})
            finish = "tool_calls" if res.tool_calls else res.finish_reason
            await send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
            if (body.get("stream_options") or {}).get("include_usage"):
                await send({**base, "choices": [], "usage": _usage(res)})
        except Exception:  # a fault mid-stream: end the stream without [DONE]
            return resp
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/chat/completions", chat)
    return app


def _error(status: int, message: str, kind: str) -> Any:
    return web.json_response(
        {"error": {"message": message, "type": kind, "code": status}}, status=status
    )


def _usage(res: SimResult) -> dict[str, int]:
    return {
        "prompt_tokens": res.prompt_tokens,
        "completion_tokens": res.completion_tokens,
        "total_tokens": res.prompt_tokens + res.completion_tokens,
    }


def _completion(res: SimResult, rid: str, created: int, model: str) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": res.text or None}
    finish = res.finish_reason
    if res.tool_calls:
        msg["tool_calls"] = [
            {"id": c[0], "type": "function", "function": {"name": c[1], "arguments": c[2]}}
            for c in res.tool_calls
        ]
        finish = "tool_calls"
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
        "usage": _usage(res),
    }


class SimServeHandle:
    """A sim-serve instance running in a background thread (see :func:`start_sim_server`)."""

    def __init__(
        self,
        host: str,
        port: int,
        loop: asyncio.AbstractEventLoop,
        thread: threading.Thread,
        stop: asyncio.Event,
    ) -> None:
        self.host, self.port = host, port
        self._loop, self._thread, self._stop = loop, thread, stop

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` — the ``base_url`` for clients."""
        return f"http://{self.host}:{self.port}/v1"

    def stop(self) -> None:
        """Shut the server down and join its thread."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)

    def __enter__(self) -> SimServeHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_sim_server(
    profile: str = "instant",
    *,
    seed: int = 0,
    host: str = "127.0.0.1",
    port: int = 0,
    **params: Any,
) -> SimServeHandle:
    """Run sim-serve in a daemon thread on a free port; returns once it is listening."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    ready = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        async def serve() -> None:
            runner = web.AppRunner(build_app(profile, seed=seed, **params), access_log=None)
            await runner.setup()
            await web.SockSite(runner, sock).start()
            box["loop"], box["stop"] = asyncio.get_running_loop(), asyncio.Event()
            ready.set()
            await box["stop"].wait()
            await runner.cleanup()

        try:
            asyncio.run(serve())
        except BaseException as exc:  # surface startup errors to the caller
            box["error"] = exc
            ready.set()

    t = threading.Thread(target=run, name=f"sim-serve-{profile}", daemon=True)
    t.start()
    ready.wait(30)
    if "error" in box or "loop" not in box:
        raise RuntimeError(f"sim-serve failed to start: {box.get('error')!r}")
    return SimServeHandle(host, sock.getsockname()[1], box["loop"], t, box["stop"])


def main(args: argparse.Namespace) -> int:
    """CLI entry (``agentlab sim-serve``): serve until interrupted; returns an exit code."""
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"sim-serve: warning: listening on {args.host}, not loopback", file=sys.stderr)
    app = build_app(args.profile, seed=args.seed)
    print(
        f"sim-serve: sim/{args.profile.removeprefix('sim/')} on "
        f"http://{args.host}:{args.port}/v1 (metrics at /metrics)",
        flush=True,
    )
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None)
    return 0


if __name__ == "__main__":  # python -m agentlab.llm.sim_serve (benchmarks use this)
    ap = argparse.ArgumentParser(prog="python -m agentlab.llm.sim_serve")
    ap.add_argument("--profile", default="vllm-3b")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8600)
    ap.add_argument("--seed", type=int, default=0)
    sys.exit(main(ap.parse_args()))
