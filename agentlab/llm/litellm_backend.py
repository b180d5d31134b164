"""Real providers through litellm (``openai/...``, ``hosted_vllm/...``, any litellm model).

litellm is imported lazily (5-7 s CPU) with its network price-list fetch, telemetry and
verbose logging switched off, and its import heap frozen out of the cyclic GC's reach
(``gc.freeze``, see :func:`_freeze_import_heap`; ``AGENTLAB_GC_FREEZE=0`` turns it off). We call ``litellm.acompletion`` directly rather than a
``Router``: our limiter and retry loop replace the Router's, and the Router costs twice
the CPU per call and sleeps its backoff in real time (invisible to a virtual clock).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from agentlab.errors import ConfigError, LLMError, LLMTimeoutError, ProviderError, RateLimitError
from agentlab.llm.sim_backend import SimResult
from agentlab.llm.structured import OutputSpec

__all__ = ["ATTEMPT_HEADER", "acall", "astream", "import_litellm", "map_exception"]

#: request header carrying the attempt number (0 = first) of a call: ``agentlab sim-serve``
#: draws its faults from (seed, request, attempt), so a retry meets a fresh draw whatever
#: the arrival order; other servers ignore it.
ATTEMPT_HEADER = "X-Agentlab-Attempt"

_litellm: Any = None


def import_litellm() -> Any:
    """Import litellm once, offline and quiet."""
    global _litellm
    if _litellm is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
        os.environ.setdefault("LITELLM_LOG", "ERROR")
        import litellm

        litellm.telemetry = False
        litellm.suppress_debug_info = True
        litellm.set_verbose = False
        litellm.drop_params = True  # e.g. `seed` for providers that do not take it
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
            logging.getLogger(name).setLevel(logging.ERROR)
        if os.environ.get("AGENTLAB_GC_FREEZE", "1") != "0":
            _freeze_import_heap()
        _litellm = litellm
    return _litellm


def _freeze_import_heap() -> None:
    """Move every object alive now (litellm's ~400k import-time objects) out of the GC's reach.

    litellm allocates ~1k container objects per call, so the cyclic GC runs every few calls,
    and each full collection re-scans litellm's whole import heap (model cost map, pydantic
    schemas): measured 0.2-0.5 ms CPU per call in a society. ``gc.freeze()`` (CPython's
    documented API) parks those objects in the permanent generation; later collections
    scan only what was allocated after. One ``gc.collect()`` first, so no garbage cycle of
    the import is kept forever. ``AGENTLAB_GC_FREEZE=0`` turns this off.
    """
    gc.collect()
    gc.freeze()


def map_exception(exc: BaseException, model: str) -> LLMError:
    """Translate a litellm/openai/asyncio exception into an ``agentlab.errors`` class."""
    if isinstance(exc, LLMError):
        return exc
    lm = import_litellm()
    status = getattr(exc, "status_code", None)
    msg = f"{model}: {type(exc).__name__}: {str(exc)[:300]}"
    if isinstance(exc, lm.RateLimitError) or status == 429:
        return RateLimitError(msg)
    if isinstance(exc, (lm.Timeout, asyncio.TimeoutError, TimeoutError)) or status == 408:
        return LLMTimeoutError(msg)
    if any(m in str(exc) for m in _NO_CREDENTIALS):
        # the provider's SDK refused before sending; litellm reports it as a server error
        # (500), which the retry policy retried (4 attempts, 6 s for every call)
        err = ProviderError(f"{msg} -- no API key: set the provider's key variable (e.g. "
                            "OPENAI_API_KEY) or pass LLMClient(..., api_key_env='NAME')")  # fmt: skip
        err.retryable = False
        return err
    err = ProviderError(msg)
    if isinstance(status, int) and 400 <= status < 500:
        err.retryable = False  # bad request, auth, unknown model: retrying cannot help
    return err


#: what a provider SDK says when it has no key to send (openai >= 1.x, its older wording)
_NO_CREDENTIALS = ("Missing credentials", "api_key client option must be set")


def _kwargs(
    model: str,
    base_url: str | None,
    api_key_env: str | None,
    messages: list[dict[str, Any]],
    spec: OutputSpec | None,
    tools: list[dict[str, Any]] | None,
    params: dict[str, Any],
    seed: int | None,
    timeout: float,
    attempt: int | None = None,
) -> dict[str, Any]:
    kw: dict[str, Any] = {k: v for k, v in params.items() if not k.startswith("sim_")}
    kw.update(model=model, messages=messages, timeout=timeout, num_retries=0, max_retries=0)
    if attempt is not None:
        kw["extra_headers"] = {ATTEMPT_HEADER: str(attempt)}
    if base_url:
        kw["api_base"] = base_url
    key = os.environ.get(api_key_env) if api_key_env else None
    if key:
        kw["api_key"] = key
    elif base_url:
        kw["api_key"] = "sk-none"  # local OpenAI-compatible servers ignore the key
    if seed is not None and "seed" not in kw:
        kw["seed"] = seed
    mode = kw.pop("structured_output", "json_schema")
    if spec is not None:
        kw.update(_response_format(spec, mode))
    if tools:
        kw["tools"] = tools
    return kw


STRUCTURED_MODES = ("json_schema", "json_object", "none")


def _response_format(spec: Any, mode: str) -> dict[str, Any]:
    """How a schema is asked for: servers differ (``structured_output=`` client default).

    ``json_schema``: OpenAI's ``{"type": "json_schema", ...}`` (OpenAI, vLLM, most clouds);
    ``json_object``: ``{"type": "json_object", "schema": ...}`` (llama.cpp's server, which
    rejects ``json_schema`` and constrains decoding with a grammar built from the schema);
    ``none``: send nothing and rely on the prompt (the reply is validated either way).
    """
    if mode == "json_schema":
        return {"response_format": spec.to_openai()}
    if mode == "json_object":
        return {"response_format": {"type": "json_object", "schema": spec.schema}}
    if mode == "none":
        return {}
    raise ConfigError(f"unknown structured_output {mode!r}; valid: {', '.join(STRUCTURED_MODES)}")


def _usage(obj: Any) -> tuple[int, int]:
    u = getattr(obj, "usage", None)
    if not u:
        return 0, 0
    return int(getattr(u, "prompt_tokens", 0) or 0), int(getattr(u, "completion_tokens", 0) or 0)


async def acall(clock: Any, **kw: Any) -> SimResult:
    """One non-streaming attempt; returns the reply in the simulator's result shape."""
    lm = import_litellm()
    t0 = clock.now()
    try:
        async with asyncio.timeout(kw["timeout"]):
            resp = await lm.acompletion(**_kwargs(**kw))
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise map_exception(exc, kw["model"]) from exc
    t1 = clock.now()
    choices = getattr(resp, "choices", None)
    if not choices:  # {"choices": []}: malformed, as the lean path says (was an IndexError)
        raise ProviderError(f"{kw['model']}: malformed reply from server: no choices")
    choice = choices[0]
    msg = choice.message
    calls = [
        (tc.id or f"call_{i}", tc.function.name, tc.function.arguments or "{}")
        for i, tc in enumerate(getattr(msg, "tool_calls", None) or [])
    ]
    p_tok, c_tok = _usage(resp)
    return SimResult(
        msg.content or "",
        p_tok,
        c_tok,
        t0,
        None,
        t1,
        t1,
        finish_reason=choice.finish_reason or "stop",
        tool_calls=calls,
    )


async def astream(clock: Any, holder: list[SimResult], **kw: Any) -> AsyncIterator[str]:
    """Stream text deltas; the final result is appended to ``holder``.

    Time to first token = the first chunk with non-empty ``delta.content`` or a tool-call
    delta (vLLM streams a call's arguments as they are generated).
    """
    lm = import_litellm()
    kw2 = _kwargs(**kw)
    kw2.update(stream=True, stream_options={"include_usage": True})
    t0 = clock.now()
    first: float | None = None
    parts: list[str] = []
    calls: dict[int, list[str]] = {}
    p_tok = c_tok = 0
    finish = "stop"
    # The deadline bounds each await, not one ``asyncio.timeout`` around the loop: the
    # deltas are yielded to a consumer running in the same task (``LLMStream``), and a
    # timeout firing while it awaited something of its own would cancel that instead.
    deadline = asyncio.get_running_loop().time() + kw["timeout"]
    try:
        async with asyncio.timeout_at(deadline):
            resp = await lm.acompletion(**kw2)
        chunks = resp.__aiter__()
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await chunks.__anext__()
            except StopAsyncIteration:
                break
            pt, ct = _usage(chunk)
            if pt or ct:
                p_tok, c_tok = pt, ct
            if not chunk.choices:
                continue
            ch = chunk.choices[0]
            finish = ch.finish_reason or finish
            delta = ch.delta
            for tc in getattr(delta, "tool_calls", None) or []:
                if first is None:  # a tool call's first piece is the first token too
                    first = clock.now()
                slot = calls.setdefault(tc.index or 0, ["", "", ""])
                slot[0] = tc.id or slot[0]
                if tc.function is not None:
                    slot[1] = tc.function.name or slot[1]
                    slot[2] += tc.function.arguments or ""
            text = getattr(delta, "content", None)
            if text:
                if first is None:
                    first = clock.now()
                parts.append(text)
                yield text
    except BaseException as exc:
        if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
            raise
        raise map_exception(exc, kw["model"]) from exc
    t1 = clock.now()
    res = SimResult("".join(parts), p_tok, c_tok, t0, None, first or t1, t1, finish_reason=finish)
    res.tool_calls = [(c[0] or f"call_{i}", c[1], c[2] or "{}") for i, c in sorted(calls.items())]
    if not res.completion_tokens:
        res.completion_tokens = max(1, len(res.text) // 4) if res.text else 0
    holder.append(res)
