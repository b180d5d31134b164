"""A small OpenAI-compatible chat server over llama-cpp-cffi's ``llama.Model`` (SmolLM2).

Run with ``.venv-real`` (``scripts/real_server.sh`` installs it and starts this):
``python scripts/real_server.py --port P [--threads 1]``. It answers ``GET /v1/models``,
``GET /health`` and ``POST /v1/chat/completions`` (``stream``, ``stream_options.
include_usage``, ``max_tokens``, ``temperature``, ``seed``, ``response_format`` json_schema /
json_object → grammar-constrained JSON) with ids, ``model``, ``usage`` and a true
``finish_reason`` ("length" when ``max_tokens`` ran out). One request decodes at a time
(a single-slot server, like llama.cpp's default) in a worker thread, so the event loop
keeps accepting; the queue is FIFO. ``--request-log PATH`` appends each request's messages,
``max_tokens`` and reply as a JSON line (``tests/real`` checks what the workflow asked).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

# The wheel's CPU .so was built with a newer GCC: resolve symbols lazily (the missing one
# is only on the C++ terminate path). Must be set before `import llama`.
sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_LOCAL)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).parent))

import llama.model  # noqa: E402
import llama.text  # noqa: E402
from aiohttp import web  # noqa: E402
from llama import Model  # noqa: E402
from llama.formatter import format_messages, get_tokenizer  # noqa: E402
from real_model_repo import build  # noqa: E402

ALIAS = "smollm2"


def make_app(repo: Path, threads: int, request_log: Path | None = None) -> web.Application:
    gguf = str(repo / "model.gguf")
    llama.model.hf_hub_download = lambda repo_id, filename: gguf  # a local file, no hub
    # the library re-reads config and tokenizer from disk on every request (~0.3-1 s here)
    llama.model.get_config = functools.lru_cache(llama.model.get_config)
    llama.text.get_tokenizer = functools.lru_cache(llama.text.get_tokenizer)
    model = Model(creator_hf_repo=str(repo), hf_repo=ALIAS, hf_file="model.gguf")
    model.init(n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False)
    tok = get_tokenizer(str(repo))
    gate = threading.Lock()  # one sequence at a time, FIFO enough for a test server

    def generate(body: dict[str, Any], put: Any) -> tuple[int, int, str]:
        msgs = [{"role": m["role"], "content": m.get("content") or ""} for m in body["messages"]]
        n_prompt = len(tok.encode(format_messages(tok, msgs)))
        limit = int(body.get("max_tokens") or body.get("max_completion_tokens") or 512)
        opts: dict[str, Any] = {
            "messages": msgs,
            "predict": limit,
            "temp": body.get("temperature", 0.8),
        }
        if body.get("seed") is not None:
            opts["seed"] = int(body["seed"])
        rf = body.get("response_format") or {}
        if rf.get("type") == "json_schema":
            opts["json_schema"] = json.dumps(rf["json_schema"].get("schema", {}))
        elif rf.get("type") == "json_object":  # llama.cpp style: optional "schema"
            opts["json_schema"] = json.dumps(rf.get("schema") or {})
        n, pieces = 0, []
        with gate:
            for piece in model.completions(**opts):
                n += 1
                pieces.append(piece)
                put(piece)
            finish = "length" if n >= limit else "stop"
            if request_log is not None:  # what the server was asked and answered, for tests
                row = {"messages": msgs, "max_tokens": limit, "response_format": rf.get("type"),
                       "reply": "".join(pieces), "finish_reason": finish}  # fmt: skip
                with request_log.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
        return n_prompt, n, finish

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        rid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        base = {"id": rid, "created": created, "model": body.get("model") or ALIAS}
        loop, q = asyncio.get_running_loop(), asyncio.Queue()  # type: ignore[var-annotated]
        put = lambda piece: loop.call_soon_threadsafe(q.put_nowait, piece)  # noqa: E731
        job = loop.run_in_executor(None, generate, body, put)
        job.add_done_callback(lambda _: loop.call_soon_threadsafe(q.put_nowait, None))
        if not body.get("stream"):
            parts = []
            while (p := await q.get()) is not None:
                parts.append(p)
            n_p, n_c, fin = await job
            msg = {"role": "assistant", "content": "".join(parts)}
            usage = {"prompt_tokens": n_p, "completion_tokens": n_c, "total_tokens": n_p + n_c}
            return web.json_response({**base, "object": "chat.completion", "usage": usage,
                                      "choices": [{"index": 0, "message": msg, "finish_reason": fin}]})  # fmt: skip
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(choices: list[Any], **extra: Any) -> None:
            obj = {**base, "object": "chat.completion.chunk", "choices": choices, **extra}
            await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

        await send([{"index": 0, "delta": {"role": "assistant", "content": ""}}])
        while (p := await q.get()) is not None:
            await send([{"index": 0, "delta": {"content": p}}])
        n_p, n_c, fin = await job
        await send([{"index": 0, "delta": {}, "finish_reason": fin}])
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": n_p, "completion_tokens": n_c, "total_tokens": n_p + n_c}
            await send([], usage=usage)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": ALIAS, "object": "model"}]})

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application(client_max_size=8 << 20)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repo", default=".real-model", help="local model directory (built once)")
    ap.add_argument("--request-log", type=Path, default=None,
                    help="append one JSON line per request (messages, max_tokens, reply)")  # fmt: skip
    a = ap.parse_args()
    app = make_app(build(Path(a.repo)), a.threads, a.request_log)
    web.run_app(app, host=a.host, port=a.port, print=None)
