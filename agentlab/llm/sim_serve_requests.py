"""What a ``sim-serve`` request body asks of the simulator, and the refusals that do not
need it: the simulator's per-call parameters (:func:`sim_params`), a raw
``/v1/completions`` prompt and its tokens (:func:`raw_prompt`), vLLM's 400 for a reply
longer than the context and for a prompt that leaves no room for it
(:func:`over_context`, :func:`prompt_over_context`), the field holding a refused schema
(:func:`schema_param`), the 404 of an unknown model (:func:`model_not_found`), and the
guard of the non-OpenAI fault control (:func:`refuse_control`).

Split out of :mod:`agentlab.llm.sim_serve`, which routes the requests and runs the server.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from typing import Any

from aiohttp import web

from agentlab.errors import ConfigError
from agentlab.llm.serve_models import SamplingRequest, error_body
from agentlab.llm.sim_backend import SimServer
from agentlab.llm.sim_content import Rng, SchemaError, gen_value
from agentlab.llm.token_ids import decode_ids

__all__ = [
    "LOOPBACK",
    "RAW_PROMPT_ROLE",
    "model_not_found",
    "over_context",
    "prompt_over_context",
    "raw_prompt",
    "refuse_control",
    "schema_param",
    "sim_params",
]

#: the role a raw ``/v1/completions`` prompt is planned under: no chat role, so the request
#: hash (its reply) and its KV blocks share nothing with a chat prompt of the same text, as
#: in vLLM, where the chat template's header tokens make the two differ from the start
RAW_PROMPT_ROLE = "raw_prompt"

#: names of this machine a browser page cannot rebind to another host
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def model_not_found(model: str, served: tuple[str, ...]) -> web.Response:
    msg = f"The model `{model}` does not exist. This server serves: {', '.join(served)}."
    body = error_body(msg, "invalid_request_error", "model", "model_not_found")
    return web.json_response(body, status=404)


def raw_prompt(prompt: Any, server: SimServer) -> tuple[str, int]:
    """A validated ``/v1/completions`` prompt (:class:`TextCompletionRequest`: a text or a
    list of token ids) as the text the simulator plans on (its hash seeds the reply, its
    blocks are the prefix cache's) and its tokens: a text as the profile's tokenizer counts
    it with the server's special tokens, token ids one each (vLLM adds none to them).

    Raises:
        ValueError: a token id past the tokenizer's vocabulary, with vLLM's message (its
            engine refuses the prompt with a 400); an estimating tokenizer (``chars:R``)
            has no vocabulary to hold ids to.
    """
    if isinstance(prompt, str):
        return prompt, server.raw_prompt_tokens(prompt)
    try:
        decode_ids(server.tokenizer, prompt)
    except ConfigError:
        pass
    except ValueError:
        raise ValueError(f"Token id {max(prompt)} is out of vocabulary") from None
    return " ".join(map(str, prompt)), len(prompt)


def sim_params(req: SamplingRequest, body: dict[str, Any], default_cap: int) -> dict[str, Any]:
    """The simulator's per-call parameters from a validated request body."""
    params = {k: v for k, v in body.items() if k.startswith("sim_") and v is not None}
    cap = req.max_new_tokens()
    if cap is not None:
        params["max_tokens"] = cap
    if req.ignore_eos:  # vLLM: generate until max_tokens (or the model's limit), no EOS
        params["sim_completion_tokens"] = cap or default_cap
    if req.min_tokens:
        params["min_tokens"] = req.min_tokens
    if req.stop:
        params["stop"] = req.stop
    if body.get("tool_choice") is not None:
        params["tool_choice"] = body["tool_choice"]
    return params


def over_context(req: SamplingRequest, max_model_len: int) -> dict[str, Any] | None:
    """vLLM's 400 for a reply longer than the model's context, or None."""
    for field in ("max_completion_tokens", "max_tokens", "min_tokens", "sim_completion_tokens"):
        value = getattr(req, field, None)
        if value is not None and value > max_model_len:
            msg = (
                f"This model's maximum context length is {max_model_len} tokens. However, "
                f"you requested {value} tokens in the completion ('{field}'). Please reduce "
                "the length of the completion."
            )
            return error_body(msg, param=field, code="invalid_value")
    return None


def prompt_over_context(
    prompt_tokens: int, cap: int | None, max_model_len: int, field: str
) -> dict[str, Any] | None:
    """vLLM's 400 for a prompt that leaves no room for its reply in the model's context
    (``prompt + max_tokens`` above it, or without ``max_tokens`` the prompt alone filling
    it), naming the prompt's ``field``; or None."""
    if cap is None:
        if prompt_tokens < max_model_len:
            return None
        msg = (
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt_tokens} input tokens. Please reduce the length of the input."
        )
    else:
        if prompt_tokens + cap <= max_model_len:
            return None
        msg = (
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_tokens + cap} tokens ({prompt_tokens} in the {field}, {cap} "
            f"in the completion). Please reduce the length of the {field} or completion."
        )
    return error_body(msg, param=field, code="context_length_exceeded")


def schema_param(schema: dict[str, Any] | None, tools: list[dict[str, Any]] | None) -> str:
    """Which field holds the schema the simulator refused (found again on the error path)."""
    if schema is not None:
        try:
            gen_value(schema, Rng(0))
        except SchemaError:
            return "response_format"
    for i, tool in enumerate(tools or []):
        try:
            gen_value(tool.get("function", {}).get("parameters") or {}, Rng(0))
        except SchemaError:
            return f"tools[{i}].function.parameters"
    return "tools" if tools else "response_format"


def refuse_control(request: web.Request, enabled: bool, bound: str) -> web.Response | None:
    """Why a ``POST /sim/faults`` is refused (a response), or None to go ahead.

    Off unless enabled; a JSON body only (a cross-site ``fetch`` without CORS can send
    only text/plain, form or multipart bodies); a ``Host`` that is loopback, an IP literal
    or the bound name (a DNS-rebinding page sends its own domain name); no ``Origin``
    other than the server's own."""
    if not enabled:
        msg = "runtime fault control is off; start sim-serve with --fault-control"
        return web.json_response(error_body(msg, "permission_error"), status=403)
    ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        msg = f"POST /sim/faults takes Content-Type application/json, got {ctype or 'none'!r}"
        return web.json_response(error_body(msg, code="unsupported_media_type"), status=415)
    host = request.host.rsplit(":", 1)[0].strip("[]") if request.host else ""
    if not _trusted_host(host, bound):
        msg = f"POST /sim/faults refused for Host {request.host!r} (not this server)"
        return web.json_response(error_body(msg, "permission_error"), status=403)
    origin = request.headers.get("Origin")
    if origin is not None:
        parts = urllib.parse.urlsplit(origin)
        if (parts.hostname or "") != host or parts.netloc != request.host:
            msg = f"POST /sim/faults refused from Origin {origin!r} (another site)"
            return web.json_response(error_body(msg, "permission_error"), status=403)
    return None


def _trusted_host(host: str, bound: str) -> bool:
    if host in LOOPBACK or host == bound:
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
