"""``agentlab sim-serve``: an OpenAI-compatible HTTP server over the simulator.

Endpoints (127.0.0.1 by default):

- ``POST /v1/chat/completions`` — streaming (SSE, with a final usage chunk when
  ``stream_options.include_usage``) and non-streaming; ``tools``, ``tool_choice``,
  ``response_format``, ``max_tokens`` and ``sim_*`` overrides are honoured. Bodies are
  validated against :class:`~agentlab.llm.serve_models.ChatCompletionRequest`: a bad one
  gets HTTP 400 with OpenAI's error body naming the field, an unknown model HTTP 404
  (``model_not_found``), a simulated rate limit HTTP 429;
- ``GET /v1/models``, ``GET /v1/models/{id}``; ``GET /health``;
- ``POST /sim/faults`` ``{"p_rate_limit": .., "p_timeout": .., "p_malformed": ..}`` — not
  OpenAI: changes the injected fault rates of the running server (ends a fault phase);
- ``GET /metrics`` — Prometheus exposition (``prometheus_client``) with vLLM's metric
  names (``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:time_to_first_token_seconds``, ``vllm:e2e_request_latency_seconds``,
  ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, ...).

**Faults over HTTP are drawn per request.** A request carrying ``X-Agentlab-Attempt: N``
draws its fault from (seed, request, N), as the in-process simulator does; otherwise from
(seed, request, arrival number at this server), so a client's retry (a later arrival) meets
a fresh draw, never the same fault again. The reply text depends on the request only.

**A client that goes away frees its slot at once**: the handler is cancelled on disconnect
(``handler_cancellation``) or fails writing the stream, and the simulated request is
aborted (:meth:`~agentlab.llm.sim_backend.SimServer.cancel`), as vLLM aborts it.

One server process is one shared simulated GPU: point several Ray workers at it with
``LLMClient("openai/<profile>", base_url=...)`` when they must share capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from agentlab.core.clock import RealClock
from agentlab.errors import LLMError
from agentlab.llm.litellm_backend import ATTEMPT_HEADER  # our clients send it
from agentlab.llm.serve_metrics import ServeMetrics
from agentlab.llm.serve_models import (
    ChatCompletionRequest,
    FaultRates,
    error_body,
    validation_error_body,
)
from agentlab.llm.sim_backend import SIM_OVERRIDES, SimResult, SimServer
from agentlab.llm.sim_profiles import get_profile
from agentlab.llm.sim_serve_args import add_arguments, profile_params
from agentlab.llm.structured import output_spec

__all__ = [
    "ATTEMPT_HEADER",
    "SimServeHandle",
    "add_arguments",
    "build_app",
    "main",
    "start_sim_server",
]

# Created at import: aiohttp's AppKey looks for a module frame, absent in worker threads.
SIM_KEY = web.AppKey("sim", SimServer)
METRICS_KEY = web.AppKey("metrics", ServeMetrics)

_MAX_HANG_S = 3600.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(profile: str = "instant", *, seed: int = 0, **params: Any) -> web.Application:
    """The aiohttp application serving ``sim/<profile>`` (profile parameters overridable).

    Run it with ``handler_cancellation=True`` (as :func:`main` and
    :func:`start_sim_server` do) so disconnects free slots.
    """
    name = profile.removeprefix("sim/")
    server = SimServer(get_profile(name, **params), seed, RealClock())
    model_id = f"sim/{name}"
    served = (model_id, name)
    arrivals = itertools.count()
    metrics = ServeMetrics(server, model_id)
    app = web.Application(middlewares=[_json_errors])
    app[SIM_KEY] = server
    app[METRICS_KEY] = metrics
    created = int(time.time())

    def model_card(m: str) -> dict[str, Any]:
        return {"id": m, "object": "model", "created": created, "owned_by": "agentlab"}

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [model_card(m) for m in served]})

    async def one_model(request: web.Request) -> web.Response:
        m = request.match_info["model"]
        if m not in served:
            return _model_not_found(m, served)
        return web.json_response(model_card(m))

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def metrics_page(_: web.Request) -> web.Response:
        body, ctype = metrics.render()
        return web.Response(body=body, headers={"Content-Type": ctype})

    async def chat(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            req = ChatCompletionRequest.model_validate_json(raw)
        except ValidationError as exc:
            return web.json_response(validation_error_body(exc), status=400)
        if req.model not in served:
            return _model_not_found(req.model, served)
        body = json.loads(raw)
        bad = sorted(k for k in body if k.startswith("sim_") and k not in SIM_OVERRIDES)
        if bad:
            msg = f"Unrecognized simulator override {bad[0]!r}; valid: {sorted(SIM_OVERRIDES)}"
            return web.json_response(
                error_body(msg, param=bad[0], code="invalid_value"), status=400
            )
        seq = next(arrivals)
        attempt = seq
        header = request.headers.get(ATTEMPT_HEADER)
        if header is not None:
            try:
                attempt = int(header)
            except ValueError:
                msg = f"{ATTEMPT_HEADER} must be an integer, got {header!r}"
                return web.json_response(error_body(msg, code="invalid_value"), status=400)
        rf = body.get("response_format")
        spec = output_spec(rf) if rf and rf.get("type") != "text" else None
        params = {k: v for k, v in body.items() if k.startswith("sim_")}
        cap = req.max_new_tokens()
        if cap is not None:
            params["max_tokens"] = cap
        if body.get("tool_choice") is not None:
            params["tool_choice"] = body["tool_choice"]
        res = server.plan(
            body["messages"],
            attempt=attempt,
            spec=spec,
            tools=body.get("tools"),
            params=params,
            timeout=_MAX_HANG_S,
        )
        rid = f"chatcmpl-{seq}"
        try:
            if res.fault == "rate_limited":
                metrics.fault("rate_limited")
                await asyncio.sleep(max(0.0, res.fault_at - time.time()))
                return web.json_response(
                    error_body("Rate limit reached (simulated)", "rate_limit_error"), status=429
                )
            if res.fault == "timeout":
                metrics.fault("timeout")  # a hung request: the client's timeout ends it
            if res.malformed:  # on purpose: cut-short text, JSON or tool-call arguments
                metrics.fault("malformed")
            if not req.stream:
                try:  # the engine re-predicts while others arrive; wait() follows it
                    await server.wait(res, model_id)
                except LLMError:
                    return web.json_response(
                        error_body("generation timed out (simulated)", "timeout"), status=504
                    )
                metrics.finished(res)
                return web.json_response(_completion(res, rid, created, model_id))
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return await _stream(request, server, metrics, res, rid, model_id, include_usage)
        except (asyncio.CancelledError, ConnectionResetError):
            server.cancel(res)  # the client went away: free the slot now
            metrics.fault("cancelled")
            raise

    async def set_faults(request: web.Request) -> web.Response:
        # Not OpenAI: the fault-injection control of the simulator (like toxiproxy's API),
        # so a test can end a fault phase and watch clients recover.
        try:
            rates = FaultRates.model_validate_json(await request.read())
        except ValidationError as exc:
            return web.json_response(validation_error_body(exc), status=400)
        changes = rates.model_dump(exclude_none=True)
        server.profile = dataclasses.replace(server.profile, **changes)
        p = server.profile
        current = {"p_rate_limit": p.p_rate_limit, "p_timeout": p.p_timeout}
        return web.json_response(current | {"p_malformed": p.p_malformed})

    app.router.add_post("/sim/faults", set_faults)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/models/{model:.+}", one_model)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics_page)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def _stream(
    request: web.Request,
    server: SimServer,
    metrics: ServeMetrics,
    res: SimResult,
    rid: str,
    model_id: str,
    include_usage: bool,
) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    base = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time())}
    base["model"] = model_id

    async def send(obj: Any) -> None:
        await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

    try:
        if res.tool_calls:
            await server.wait(res, model_id)  # the arguments are whole once generated
            calls = [
                {"index": i, "id": c[0], "type": "function"}
                | {"function": {"name": c[1], "arguments": c[2]}}
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
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:  # a simulated fault mid-stream: end the stream without [DONE]
        return resp
    finish = "tool_calls" if res.tool_calls else res.finish_reason
    await send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if include_usage:
        await send({**base, "choices": [], "usage": _usage(res)})
    await resp.write(b"data: [DONE]\n\n")
    metrics.finished(res)
    return resp


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown routes and methods answer with OpenAI-style JSON, not aiohttp's text."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        msg = f"{exc.reason}: {request.method} {request.path}"
        kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
        return web.json_response(error_body(msg, kind), status=exc.status)


def _model_not_found(model: str, served: tuple[str, ...]) -> web.Response:
    msg = f"The model `{model}` does not exist. This server serves: {', '.join(served)}."
    body = error_body(msg, "invalid_request_error", "model", "model_not_found")
    return web.json_response(body, status=404)


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


def main(args: argparse.Namespace) -> int:
    """CLI entry (``agentlab sim-serve``): serve until interrupted; returns an exit code."""
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"sim-serve: warning: listening on {args.host}, not loopback", file=sys.stderr)
    params = profile_params(args)
    app = build_app(args.profile, seed=args.seed, **params)
    faults = ", ".join(f"{k}={v}" for k, v in params.items()) or "no overrides"
    print(
        f"sim-serve: sim/{args.profile.removeprefix('sim/')} ({faults}) on "
        f"http://{args.host}:{args.port}/v1 (metrics at /metrics)",
        flush=True,
    )
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
        handler_cancellation=True,
    )
    return 0


class SimServeHandle:
    """A sim-serve instance running in a background thread (see :func:`start_sim_server`)."""

    def __init__(
        self,
        host: str,
        port: int,
        loop: asyncio.AbstractEventLoop,
        thread: threading.Thread,
        stop: asyncio.Event,
        app: web.Application,
    ) -> None:
        self.host, self.port, self.app = host, port, app
        self._loop, self._thread, self._stop = loop, thread, stop

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` — the ``base_url`` for clients."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def server(self) -> SimServer:
        """The simulated server behind the app (read its state, e.g. ``metrics()``)."""
        return self.app[SIM_KEY]

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
    app = build_app(profile, seed=seed, **params)

    def run() -> None:
        async def serve() -> None:
            runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
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
    return SimServeHandle(host, sock.getsockname()[1], box["loop"], t, box["stop"], app)


if __name__ == "__main__":  # python -m agentlab.llm.sim_serve (benchmarks use this)
    ap = argparse.ArgumentParser(prog="python -m agentlab.llm.sim_serve")
    add_arguments(ap)
    sys.exit(main(ap.parse_args()))
