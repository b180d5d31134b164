"""sim-serve's ``POST /tokenize`` and ``POST /detokenize``, as vLLM serves them (at the
server's root, not under ``/v1``).

``/tokenize`` takes a raw ``prompt`` (``add_special_tokens``: the ``<|begin_of_text|>``
that ``/v1/completions`` adds) or chat ``messages`` with ``tools`` (the chat template and
generation prompt that ``/v1/chat/completions`` renders) and answers ``{"count",
"max_model_len", "tokens", "token_strs"}``; ``count`` is what the completion endpoints
charge for the same prompt (their ``usage.prompt_tokens``). A profile whose tokenizer is an
estimate (``chars:R``) has no ids: its answer carries the count and ``tokens: null``, and
its ``/detokenize`` is a 400 saying so. A ``model`` the server does not serve is a 404, as
on the completion endpoints; an id outside the vocabulary a 400.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from agentlab.errors import ConfigError
from agentlab.llm.serve_models import (
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeTextRequest,
    error_body,
    validation_error_body,
)
from agentlab.llm.sim_backend import SimServer
from agentlab.llm.sim_serve_requests import model_not_found
from agentlab.llm.token_ids import chat_token_ids, decode_ids, raw_token_ids, token_strings

__all__ = ["add_token_routes"]


def _bad(msg: str, param: str | None = None) -> web.Response:
    return web.json_response(error_body(msg, param=param, code="invalid_value"), status=400)


def add_token_routes(
    app: web.Application, server: SimServer, served: tuple[str, ...], max_model_len: int
) -> None:
    """Serve ``POST /tokenize`` and ``POST /detokenize`` for ``server``'s tokenizer."""

    def parse(raw: bytes, chat_or_text: bool) -> tuple[object, dict[str, Any]] | web.Response:
        """The body validated (a chat or text tokenize request by its ``messages``, else a
        detokenize request) with the raw body; or the 400 / 404 refusing it."""
        try:
            body = json.loads(raw)
        except ValueError as exc:
            msg = f"We could not parse the JSON body of your request: {exc}"
            return web.json_response(error_body(msg, code="invalid_json"), status=400)
        if not isinstance(body, dict):
            return _bad("The request body must be a JSON object.")
        model: type[BaseModel] = DetokenizeRequest
        if chat_or_text:
            model = TokenizeChatRequest if "messages" in body else TokenizeTextRequest
        try:
            req = model.model_validate(body)
        except ValidationError as exc:
            return web.json_response(validation_error_body(exc), status=400)
        asked = body.get("model")
        if asked is not None and asked not in served:
            return model_not_found(str(asked), served)
        return req, body

    def ids_of(req: object, body: dict[str, Any]) -> tuple[int, list[int] | None]:
        """A tokenize request's count as the completion endpoints charge it, and its ids
        (``None``: the tokenizer is an estimate; then its count is the server's)."""
        tok = server.tokenizer
        try:
            if isinstance(req, TokenizeChatRequest):
                ids = chat_token_ids(tok, body["messages"], body.get("tools"),
                                     add_generation_prompt=req.add_generation_prompt)  # fmt: skip
                if req.add_special_tokens:  # the tokenizer's BOS before the template's own
                    ids = raw_token_ids(tok, "") + ids
            else:
                assert isinstance(req, TokenizeTextRequest)
                ids = raw_token_ids(tok, req.prompt, add_special_tokens=req.add_special_tokens)
        except ConfigError:  # counted by an estimate (chars:R): no ids
            if isinstance(req, TokenizeChatRequest):
                return server.chat_prompt_tokens(body["messages"], body.get("tools")), None
            return server.raw_prompt_tokens(body["prompt"]), None
        return len(ids), ids

    async def tokenize(request: web.Request) -> web.Response:
        got = parse(await request.read(), True)
        if isinstance(got, web.Response):
            return got
        req, body = got
        count, ids = ids_of(req, body)
        strs = None
        if ids is not None and getattr(req, "return_token_strs", False):
            strs = token_strings(server.tokenizer, ids)
        return web.json_response(
            {"count": count, "max_model_len": max_model_len, "tokens": ids, "token_strs": strs}
        )

    async def detokenize(request: web.Request) -> web.Response:
        got = parse(await request.read(), False)
        if isinstance(got, web.Response):
            return got
        req = got[0]
        assert isinstance(req, DetokenizeRequest)
        try:
            text = decode_ids(server.tokenizer, req.tokens)
        except ConfigError as exc:
            return _bad(str(exc))
        except ValueError as exc:
            return _bad(str(exc), "tokens")
        return web.json_response({"prompt": text})

    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
