"""What the simulated server answers, and the per-request draws behind it.

:class:`SimResult` is one attempt's answer (before client-side parsing): what
:class:`~agentlab.llm.sim_backend.SimServer` plans and its waits refine; the real-provider
backends answer in the same shape. The helpers are pure functions of a request: the fault
draw of an attempt (:func:`_fault_u`), the decode-speed jitter (:func:`_lognormal_factor`),
the prompt's KV block hashes (:func:`_block_hashes`) and the check of ``sim_*`` overrides.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, NamedTuple

from agentlab.errors import ConfigError
from agentlab.llm.sim_engine import EngineRequest
from agentlab.llm.sim_kv import chain_segments
from agentlab.llm.sim_profiles import SimProfile
from agentlab.llm.tokens import Tokenizer

__all__ = [
    "MAX_SIM_TOKENS",
    "REQUEST_RANGES",
    "SIM_OVERRIDES",
    "SimResult",
    "check_sim_overrides",
    "check_sim_request_values",
]


#: per-call overrides the simulator understands (everything else ``sim_*`` is an error)
SIM_OVERRIDES = frozenset(
    {
        "sim_completion_tokens",
        "sim_bool_p",
        "sim_marker",
        "sim_marker_p",
        "sim_tool_call_p",
        "sim_p_rate_limit",
        "sim_p_timeout",
        "sim_p_malformed",
        "sim_p_invalid_args",
    }
)


@dataclass(slots=True)
class SimResult:
    """What the simulated server answers (before client-side parsing)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    arrival: float
    queue_wait: float | None
    first_token: float
    end: float
    finish_reason: str = "stop"
    # (id, name, arguments as a JSON string — possibly malformed on purpose)
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)
    fault: str | None = None  # None, "rate_limited", "timeout", "cancelled"
    fault_at: float = 0.0  # when the fault is reported
    req: EngineRequest | None = None  # the engine's request (slots > 0), updated as it runs
    malformed: bool = False  # a malformed reply on purpose (counted in SimServer.faults)
    cached_tokens: int = 0  # prompt tokens served from the engine's prefix cache


def _fault_u(h: int, attempt: int) -> float:
    """The uniform draw deciding the fault of attempt ``attempt`` of request ``h``.

    SplitMix64's finaliser over ``(h, attempt)``: the first ``Rng`` output is linear in
    its seed, so seeds ``s, s + 1, s + 2`` (consecutive attempts) drew ``u, u + 0.097,
    u + 0.195, ...`` and a timeout was always followed by a success. Mixed, the draws of
    one request's attempts are independent.
    """
    z = (h * 0x9E3779B97F4A7C15 + attempt + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return ((z ^ (z >> 31)) >> 11) * 2.0**-53


#: bytes a token inside one piece of a Llama 3 prompt, for the cuts of its blocks (what the
#: text-only layout used throughout, so a discussion's shared head keeps its blocks: 112
#: cached tokens, datasets/make_vllm_3b_profile.py ANCHOR_CACHED_TOKENS); English prose runs
#: ~4.8, JSON and numbers fewer (a piece's cuts stop at its end)
PIECE_BYTES_PER_TOKEN = 4.0


def _block_hashes(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    prompt_tokens: int,
    p: SimProfile,
    tokenizer: Tokenizer,
    raw: bool = False,
) -> tuple[int, ...]:
    """The prompt's KV block hashes for the engine's prefix cache (the token-identity seam):
    :func:`~agentlab.llm.sim_kv.chain_segments` over the prompt as ``tokenizer`` lays it
    out (``Tokenizer.block_segments``: template, system text, tools, messages, each with its
    token count), the tools as their JSON; at most ``prompt_tokens // block_size`` blocks.
    Inside a piece a block's cut is ``bytes_per_token`` bytes a token on: the estimating
    tokenizer's own ratio, else :data:`PIECE_BYTES_PER_TOKEN`.
    ``raw``: a ``/v1/completions`` text prompt, one piece of ``prompt_tokens`` tokens.

    The pieces an agent sends on every call (the template's fixed lines, its system text,
    the tools: all before the first user text) are hashed once per agent and kept
    (:func:`_head`): a call hashes the rest only (issue 22: the tools were ~2/3 of the
    bytes hashed per call on the realistic path)."""
    bs = p.block_size
    r = getattr(tokenizer, "chars_per_token", PIECE_BYTES_PER_TOKEN)
    if raw:
        m = messages[0] if messages else {}
        data = f"{m.get('role', '')}\x1f{m.get('content')}".encode("utf-8", "surrogatepass")
        hashes, _ = chain_segments([(data, prompt_tokens)], bs, prompt_tokens // bs, (0, 0, 0), r)
        return tuple(hashes)
    segments = tokenizer.block_segments(messages, tools)
    lead = 0  # the pieces before the first user text: the agent's head
    for text, _ in segments:
        if text is not None and text.startswith("user\x1f"):
            break
        lead += 1
    total = sum([t for _, t in segments])
    count = min(prompt_tokens, total) // bs
    head = _head(segments[:lead], tools, bs, tokenizer.name, r)
    known = head.hashes
    if count <= len(known):
        return known[:count]
    rest = [(t.encode("utf-8", "surrogatepass"), n) for t, n in segments[lead:] if t is not None]
    more, _ = chain_segments(rest, bs, count, head.state, r)
    return known + tuple(more)


class _Head(NamedTuple):
    """The chain over a prompt's head pieces (:func:`_block_hashes`), to continue from."""

    hashes: tuple[int, ...]  # of the blocks that end inside the head
    state: tuple[int, int, int]  # chain_segments' state after the head


_HEADS: dict[tuple[Any, ...], _Head] = {}
_HEADS_MAX = 4096  # an entry per agent (its system text) and tools list: ~1 KB each


def _head(
    segments: list[tuple[str | None, int]],
    tools: list[dict[str, Any]] | None,
    bs: int,
    tok: str,
    r: float,
) -> _Head:
    """The chain over ``segments`` (``None``: the tools' JSON), kept per pieces, tools,
    block size and tokenizer: a society's agents all offer one tools list."""
    tools_text = _tools_text(tools) if tools else ""
    key = (tok, bs, r, tools_text, *segments)
    head = _HEADS.get(key)
    if head is None:
        pieces = [
            ((tools_text if t is None else t).encode("utf-8", "surrogatepass"), n)
            for t, n in segments
        ]
        tokens = sum([n for _, n in segments])
        hashes, state = chain_segments(pieces, bs, tokens // bs + 1, (0, 0, 0), r)
        if len(_HEADS) >= _HEADS_MAX:
            _HEADS.clear()
        head = _HEADS[key] = _Head(tuple(hashes), state)
    return head


_TOOLS_TEXT: dict[int, tuple[list[dict[str, Any]], str]] = {}


def _tools_text(tools: list[dict[str, Any]]) -> str:
    # agents offer the same tools list on every call: serialise it once
    hit = _TOOLS_TEXT.get(id(tools))
    if hit is not None and hit[0] is tools:
        return hit[1]
    if len(_TOOLS_TEXT) > 256:
        _TOOLS_TEXT.clear()
    text = json.dumps(tools)
    _TOOLS_TEXT[id(tools)] = (tools, text)
    return text


_STD_NORMAL = NormalDist()  # immutable: one instance, not one per draw (two draws a call)


def _lognormal_factor(u: float, sigma: float) -> float:
    """Mean-1 log-normal multiplier from a uniform draw ``u`` (inverse normal CDF)."""
    if sigma <= 0:
        return 1.0
    z = _STD_NORMAL.inv_cdf(min(max(u, 1e-9), 1 - 1e-9))
    return math.exp(sigma * z - sigma * sigma / 2)


#: the most tokens one reply may be asked for (``max_tokens``, ``sim_completion_tokens``):
#: above any served context length, below what would make the simulator allocate without bound
MAX_SIM_TOKENS = 1 << 20
#: the values OpenAI and vLLM accept for the sampling fields a simulated call reads; a call
#: in process is held to them as sim-serve's requests are (``serve_models.SamplingRequest``
#: declares its fields with these bounds): ``max_tokens=0`` had meant "no cap" here
REQUEST_RANGES: dict[str, tuple[int | float, int | float]] = {
    "max_tokens": (1, MAX_SIM_TOKENS),
    "max_completion_tokens": (1, MAX_SIM_TOKENS),
    "min_tokens": (0, MAX_SIM_TOKENS),
    "temperature": (0, 2),
    "top_p": (0, 1),
    "presence_penalty": (-2, 2),
    "frequency_penalty": (-2, 2),
}
_WHOLE = frozenset({"max_tokens", "max_completion_tokens", "min_tokens"})


def check_sim_request_values(params: dict[str, Any]) -> None:
    """Raise ConfigError for a sampling field outside what OpenAI and vLLM accept (a 400
    from a real server, silently taken by the simulator before)."""
    for k in params.keys() & REQUEST_RANGES.keys():
        v = params[k]
        if v is None:
            continue
        lo, hi = REQUEST_RANGES[k]
        kind = int if k in _WHOLE else (int, float)
        if isinstance(v, bool) or not isinstance(v, kind) or not lo <= v <= hi:
            what = "a whole number" if k in _WHOLE else "a number"
            raise ConfigError(f"{k} must be {what} in [{lo}, {hi}], got {v!r}")


#: request fields a call may pass (OpenAI chat, vLLM's sampling extras, litellm's call
#: options): never taken for a misspelling of another (``top_k`` is not ``top_p``)
REQUEST_FIELDS = frozenset(
    {
        "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stop", "seed",
        "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs",
        "user", "metadata", "store", "parallel_tool_calls", "service_tier", "modalities",
        "audio", "prediction", "reasoning_effort", "stream_options", "web_search_options",
        "verbosity", "tool_choice", "functions", "function_call", "timeout", "extra_body",
        "extra_headers", "extra_query", "min_tokens", "ignore_eos", "top_k", "min_p",
        "repetition_penalty", "length_penalty", "stop_token_ids", "skip_special_tokens",
        "include_stop_str_in_output", "best_of", "truncate_prompt_tokens",
        "chat_template_kwargs", "thinking", "num_retries", "api_base", "api_key", "base_url",
        "api_version", "mock_response", "caching", "drop_params", "max_retries",
    }
)  # fmt: skip
#: other frameworks' names for what a call here takes under another
_OTHER_NAMES = {"structured_model": "response_format", "max_new_tokens": "max_tokens"}
_ACCEPTED = SIM_OVERRIDES | REQUEST_FIELDS
#: the verdict on each other name seen (None: a provider's own field, passed on)
_VERDICTS: dict[str, str | None] = {}


def check_sim_overrides(params: dict[str, Any]) -> None:
    """Raise ConfigError for an unknown ``sim_*`` override or a misspelt request field
    (``temprature``; ``structured_model``, AgentScope's name for ``response_format``):
    passed on, the simulator ignored them and a real provider answered a 400 or ignored
    them too — typos fail loudly. Other names (a provider's own fields) pass."""
    unknown = params.keys() - _ACCEPTED  # one set operation: usually empty
    for k in params if unknown else ():  # in the caller's order: the first one is named
        if k not in unknown:
            continue
        if k.startswith("sim_"):
            raise ConfigError(
                f"unknown simulator override {k!r}; valid: {', '.join(sorted(SIM_OVERRIDES))}"
            )
        verdict = _VERDICTS.get(k, "")
        if verdict == "":
            close = difflib.get_close_matches(k, REQUEST_FIELDS, n=1, cutoff=0.85)
            verdict = _OTHER_NAMES.get(k) or (close[0] if close else None)
            if len(_VERDICTS) < 1024:
                _VERDICTS[k] = verdict
        if verdict is not None:
            raise ConfigError(f"unknown request field {k!r}: did you mean {verdict!r}?")
