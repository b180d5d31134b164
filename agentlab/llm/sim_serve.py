"""``agentlab sim-serve``: an OpenAI-compatible HTTP server over the simulator.

Endpoints (127.0.0.1 by default):

- ``POST /v1/chat/completions`` — streaming (SSE, one chunk per token as vLLM sends
  them, a tool call's arguments in pieces too, a final usage chunk when ``stream_options.include_usage``) and non-streaming;
  ``tools``, ``tool_choice``, ``response_format``, ``max_tokens`` /
  ``max_completion_tokens``, vLLM's ``ignore_eos`` and ``min_tokens``, ``stop`` and
  ``sim_*`` overrides are honoured; ``usage.prompt_tokens_details.cached_tokens`` is the
  engine's prefix-cache hit. Bodies are validated against
  :class:`~agentlab.llm.serve_models.ChatCompletionRequest`: a bad one gets HTTP 400 with
  OpenAI's error body naming the field (``logprobs`` too: not simulated), an unknown
  model HTTP 404 (``model_not_found``), a simulated rate limit HTTP 429;
- ``POST /v1/completions`` — vLLM's text completions (what ``vllm bench serve`` sends):
  one prompt, a text or token ids, counted without the chat template (a text with the
  tokenizer's ``<|begin_of_text|>``, as vLLM encodes it); ``max_tokens`` 16 unless given;
  the same sampling extras, ``response_format``, streaming and usage as chat, the finish reason on the last
  text chunk; ``logprobs``, ``echo``, ``suffix`` and several prompts get a 400 naming the
  field;
- ``POST /tokenize``, ``POST /detokenize`` — vLLM's: a prompt's or a chat's token ids and
  count (what the completion endpoints charge for it), ids back to text
  (:mod:`agentlab.llm.sim_serve_tokens`);
- ``GET /v1/models``, ``GET /v1/models/{id}`` — vLLM's model cards (``owned_by``
  ``vllm``, ``root``: the first served name, ``max_model_len``, ``permission``);
  ``GET /health``, ``GET`` / ``POST /ping`` (200, an empty body, as vLLM's), ``GET /version``
  (agentlab's version: this is not a vLLM release);
- ``POST /sim/faults`` ``{"p_rate_limit": .., "p_timeout": .., "p_malformed": ..}`` — not
  OpenAI, off unless the server was started with ``fault_control=True``
  (``--fault-control``): changes the injected fault rates of the running server (ends a
  fault phase). JSON bodies only, from a loopback ``Host`` and no foreign ``Origin``, so a
  web page cannot reach it;
- ``GET /metrics`` — Prometheus exposition (``prometheus_client``) with vLLM v1's metric
  names, labels (``model_name``, ``engine``) and buckets (see
  :mod:`agentlab.llm.serve_metrics`).

Prompt tokens are counted by the profile's tokenizer (:mod:`agentlab.llm.tokens`: every
message text, content parts as their text — guidellm sends ``[{"type": "text", ...}]`` —
tool schemas and the chat template), as the real server counts them.

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
from typing import Any, TypeVar

from aiohttp import web
from pydantic import ValidationError

from agentlab import __version__
from agentlab.core.clock import RealClock
from agentlab.errors import LLMError
from agentlab.llm.litellm_backend import ATTEMPT_HEADER  # our clients send it
from agentlab.llm.serve_metrics import ServeMetrics
from agentlab.llm.serve_models import (
    ChatCompletionRequest,
    FaultRates,
    NamedToolChoice,
    SamplingRequest,
    TextCompletionRequest,
    error_body,
    validation_error_body,
)
from agentlab.llm.sim_backend import SIM_OVERRIDES, SimResult, SimServer
from agentlab.llm.sim_content import SchemaError
from agentlab.llm.sim_profiles import get_profile
from agentlab.llm.sim_serve_args import add_arguments, profile_params, server_options
from agentlab.llm.sim_serve_replies import (
    _completion,
    _Reply,
    _stream,
    _text_completion,
    _text_stream,
)
from agentlab.llm.sim_serve_requests import (
    LOOPBACK,
    RAW_PROMPT_ROLE,
    model_not_found,
    over_context,
    prompt_over_context,
    raw_prompt,
    refuse_control,
    schema_param,
    sim_params,
)
from agentlab.llm.sim_serve_tokens import add_token_routes
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
#: defaults of the server options (``--max-model-len``, ``--header-timeout``, ``--backlog``)
MAX_MODEL_LEN = 131_072  # Llama-3.2-3B's context, as vLLM serves it by default
HEADER_TIMEOUT_S = 10.0
BACKLOG = 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Body = TypeVar("Body", bound=SamplingRequest)
#: a streamed reply's writer (``sim_serve_replies._stream`` / ``_text_stream``)
Streamer = Callable[
    [web.Request, SimServer, ServeMetrics, SimResult, _Reply], Awaitable[web.StreamResponse]
]


def _permission(created: int) -> dict[str, Any]:
    """vLLM's ``ModelPermission`` of a model card (its defaults: sampling and viewing
    allowed, no fine-tuning)."""
    return {"id": f"modelperm-{created}", "object": "model_permission", "created": created,
            "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
            "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
            "organization": "*", "group": None, "is_blocking": False}  # fmt: skip


def build_app(
    profile: str = "instant",
    *,
    seed: int = 0,
    served_model_name: str | list[str] | tuple[str, ...] | None = None,
    fault_control: bool = False,
    max_model_len: int = MAX_MODEL_LEN,
    tokens_per_chunk: int = 1,
    host: str = "127.0.0.1",
    **params: Any,
) -> web.Application:
    """The aiohttp application serving ``sim/<profile>`` (profile parameters overridable).

    Args:
        served_model_name: the model name(s) served, as vLLM's ``--served-model-name``
            (a tokenizer's repo id or local directory, so that clients resolve a tokenizer
            from it); default ``sim/<profile>`` and ``<profile>``. Replies name the model
            the request asked for; ``/metrics`` labels the first name.
        fault_control: serve ``POST /sim/faults`` (off: HTTP 403).
        max_model_len: the model's context, as vLLM's: ``max_tokens`` /
            ``sim_completion_tokens`` above it get HTTP 400, and so does a prompt whose
            tokens and ``max_tokens`` exceed it (without ``max_tokens``: that fills it).
        tokens_per_chunk: tokens per SSE chunk (1: vLLM's default, one per token).
        host: the address the server binds (the ``Host`` check of ``/sim/faults``).

    Run it with ``handler_cancellation=True`` (as :func:`main` and
    :func:`start_sim_server` do) so disconnects free slots.
    """
    name = profile.removeprefix("sim/")
    # vLLM's OpenAI server never cuts a prompt (an over-long one is refused): the paper's
    # front end's cut (sim/vllm-3b's truncate_to_len) is not the server this stands in for,
    # unless asked for by name
    params.setdefault("truncate_to_len", 0)
    server = SimServer(get_profile(name, **params), seed, RealClock())
    if isinstance(served_model_name, str):
        served_model_name = [served_model_name]
    served = tuple(served_model_name or (f"sim/{name}", name))
    model_id = served[0]
    arrivals = itertools.count()
    metrics = ServeMetrics(server, model_id, max_model_len=max_model_len)
    app = web.Application(middlewares=[_json_errors])
    app[SIM_KEY] = server
    app[METRICS_KEY] = metrics
    created = int(time.time())

    def model_card(m: str) -> dict[str, Any]:
        # vLLM's ModelCard: every served name is the one model (``root``: the first name,
        # vLLM's model path), no LoRA ``parent``; clients read ``max_model_len`` from it
        return {"id": m, "object": "model", "created": created, "owned_by": "vllm",
                "root": model_id, "parent": None, "max_model_len": max_model_len,
                "permission": [_permission(created)]}  # fmt: skip

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [model_card(m) for m in served]})

    async def one_model(request: web.Request) -> web.Response:
        m = request.match_info["model"]
        if m not in served:
            return model_not_found(m, served)
        return web.json_response(model_card(m))

    async def health(_: web.Request) -> web.Response:
        # vLLM answers 200 with an empty body (503 once its engine is dead)
        return web.Response(status=200)

    async def version(_: web.Request) -> web.Response:
        return web.json_response({"version": __version__, "server": "agentlab sim-serve"})

    async def metrics_page(_: web.Request) -> web.Response:
        body, ctype = metrics.render()
        return web.Response(body=body, headers={"Content-Type": ctype})

    def admit(
        request: web.Request, req: SamplingRequest, body: dict[str, Any]
    ) -> tuple[int, int] | web.Response:
        """A validated body's arrival number and fault-draw attempt, or the refusal: an
        unknown model (404), an unknown ``sim_*`` override or a reply longer than the
        context (400), a bad attempt header (400)."""
        if req.model not in served:
            return model_not_found(req.model, served)
        bad = sorted(k for k in body if k.startswith("sim_") and k not in SIM_OVERRIDES)
        if bad:
            msg = f"Unrecognized simulator override {bad[0]!r}; valid: {sorted(SIM_OVERRIDES)}"
            return web.json_response(
                error_body(msg, param=bad[0], code="invalid_value"), status=400
            )
        too_long = over_context(req, max_model_len)
        if too_long is not None:
            return web.json_response(too_long, status=400)
        seq = next(arrivals)
        header = request.headers.get(ATTEMPT_HEADER)
        if header is None:
            return seq, seq
        try:
            return seq, int(header)
        except ValueError:
            msg = f"{ATTEMPT_HEADER} must be an integer, got {header!r}"
            return web.json_response(error_body(msg, code="invalid_value"), status=400)

    async def answer(
        request: web.Request,
        req: SamplingRequest,
        res: SimResult,
        reply: _Reply,
        whole: Callable[[SimResult], dict[str, Any]],
        stream: Streamer,
    ) -> web.StreamResponse:
        """Serve a planned request: HTTP 429 for a simulated rate limit; else, when the
        engine has made it, the ``whole`` reply or the ``stream``; a client that goes away
        aborts it (its slot is freed at once)."""
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
                metrics.finished(res, reply.max_tokens)
                return web.json_response(whole(res))
            return await stream(request, server, metrics, res, reply)
        except (asyncio.CancelledError, ConnectionResetError):
            server.cancel(res)  # the client went away: free the slot now
            metrics.fault("cancelled")
            raise

    def reply_of(req: SamplingRequest, rid: str, named: bool, cap: int | None) -> _Reply:
        opts = req.stream_options
        stamp = int(time.time())  # each reply's own creation time, as vLLM's
        # vLLM's should_include_usage: continuous usage only along with the final chunk
        usage = bool(opts and opts.include_usage)
        every = usage and bool(opts and opts.continuous_usage_stats)
        return _Reply(rid, stamp, req.model, named, usage, every, cap, tokens_per_chunk)

    async def receive(
        request: web.Request, model: type[Body]
    ) -> tuple[Body, dict[str, Any], int, int] | web.Response:
        """A request's body validated as ``model``, the raw body, its arrival number and
        fault-draw attempt (:func:`admit`); or the 400 / 404 refusing it."""
        raw = await request.read()
        try:
            req = model.model_validate_json(raw)
        except ValidationError as exc:
            return web.json_response(validation_error_body(exc), status=400)
        body = json.loads(raw)
        admitted = admit(request, req, body)
        if isinstance(admitted, web.Response):
            return admitted
        return (req, body, *admitted)

    def planned(
        body: dict[str, Any],
        messages: list[dict[str, Any]],
        attempt: int,
        params: dict[str, Any],
        prompt_tokens: int | None,
        tools: list[dict[str, Any]] | None,
    ) -> SimResult | web.Response:
        """The request queued on the simulator with its ``response_format`` (a JSON reply,
        on either endpoint, as vLLM's structured output) and a chat's ``tools``; or the 400 of
        a schema the simulator refuses, naming the field that holds it."""
        rf = body.get("response_format")
        spec = output_spec(rf) if rf and rf.get("type") != "text" else None
        try:
            return server.plan(messages, attempt=attempt, spec=spec, tools=tools,
                               params=params, timeout=_MAX_HANG_S, prompt_tokens=prompt_tokens)  # fmt: skip
        except SchemaError as exc:
            bad_param = schema_param(spec.schema if spec else None, tools)
            msg = f"Invalid schema for '{bad_param}': {exc}."
            return web.json_response(
                error_body(msg, param=bad_param, code="invalid_value"), status=400
            )

    async def chat(request: web.Request) -> web.StreamResponse:
        got = await receive(request, ChatCompletionRequest)
        if isinstance(got, web.Response):
            return got
        req, body, seq, attempt = got
        params = sim_params(req, body, server.profile.max_completion)
        tokens = server.chat_prompt_tokens(body["messages"], body.get("tools"))
        too_long = prompt_over_context(tokens, req.max_new_tokens(), max_model_len, "messages")
        if too_long is not None:
            return web.json_response(too_long, status=400)
        res = planned(body, body["messages"], attempt, params, None, body.get("tools"))
        if isinstance(res, web.Response):
            return res
        named = isinstance(req.tool_choice, NamedToolChoice)
        reply = reply_of(req, f"chatcmpl-{seq}", named, params.get("max_tokens"))

        def whole(r: SimResult) -> dict[str, Any]:
            return _completion(r, reply.rid, reply.created, req.model, named)

        return await answer(request, req, res, reply, whole, _stream)

    async def text(request: web.Request) -> web.StreamResponse:
        # vLLM's text completions: a raw prompt, counted without the chat template
        got = await receive(request, TextCompletionRequest)
        if isinstance(got, web.Response):
            return got
        req, body, seq, attempt = got
        try:
            prompt, tokens = raw_prompt(req.prompt, server)
        except ValueError as exc:
            return web.json_response(
                error_body(str(exc), param="prompt", code="invalid_value"), status=400
            )
        too_long = prompt_over_context(tokens, req.max_new_tokens(), max_model_len, "prompt")
        if too_long is not None:
            return web.json_response(too_long, status=400)
        params = sim_params(req, body, server.profile.max_completion)
        raw = [{"role": RAW_PROMPT_ROLE, "content": prompt}]
        res = planned(body, raw, attempt, params, tokens, None)
        if isinstance(res, web.Response):
            return res
        reply = reply_of(req, f"cmpl-{seq}", False, params.get("max_tokens"))

        def whole(r: SimResult) -> dict[str, Any]:
            return _text_completion(r, reply.rid, reply.created, req.model)

        return await answer(request, req, res, reply, whole, _text_stream)

    async def set_faults(request: web.Request) -> web.Response:
        # Not OpenAI: the fault-injection control of the simulator (like toxiproxy's API),
        # so a test can end a fault phase and watch clients recover. Opt-in, and closed to
        # web pages: a no-cors fetch can only send text/plain, and carries its Origin.
        refused = refuse_control(request, fault_control, host)
        if refused is not None:
            return refused
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
    app.router.add_get("/ping", health)  # vLLM's (SageMaker's) liveness probe, the same
    app.router.add_post("/ping", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics_page)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", text)
    add_token_routes(app, server, served, max_model_len)
    return app


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


def main(args: argparse.Namespace) -> int:
    """CLI entry (``agentlab sim-serve``): serve until interrupted; returns an exit code."""
    if args.host not in LOOPBACK:
        print(f"sim-serve: warning: listening on {args.host}, not loopback", file=sys.stderr)
    params = profile_params(args)
    opts = server_options(args)
    app = build_app(args.profile, seed=args.seed, host=args.host, **opts, **params)
    faults = ", ".join(f"{k}={v}" for k, v in params.items()) or "no overrides"
    names = ", ".join(opts["served_model_name"] or ())
    print(
        f"sim-serve: sim/{args.profile.removeprefix('sim/')} ({faults}) on "
        f"http://{args.host}:{args.port}/v1 (metrics at /metrics)"
        + (f" as {names}" if names else "")
        + (", fault control on" if opts["fault_control"] else ""),
        flush=True,
    )
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
        handler_cancellation=True,
        backlog=args.backlog,
        keepalive_timeout=args.header_timeout,
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
    backlog: int = BACKLOG,
    header_timeout: float = HEADER_TIMEOUT_S,
    **params: Any,
) -> SimServeHandle:
    """Run sim-serve in a daemon thread on a free port; returns once it is listening.

    ``backlog``: the listen queue; ``header_timeout``: seconds a connection may take to
    send a request's headers (from connecting, or from the end of its previous reply)
    before it is dropped. Other keywords go to :func:`build_app` (server options and
    profile fields).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    ready = threading.Event()
    box: dict[str, Any] = {}
    app = build_app(profile, seed=seed, host=host, **params)

    def run() -> None:
        async def serve() -> None:
            # keepalive_timeout: aiohttp arms it at connect and after each reply, and
            # closes the connection if no request's headers were complete by then
            runner = web.AppRunner(
                app, access_log=None, handler_cancellation=True, keepalive_timeout=header_timeout
            )
            await runner.setup()
            await web.SockSite(runner, sock, backlog=backlog).start()
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
