"""Typed models of the OpenAI chat- and text-completions requests, and OpenAI-style error
bodies.

``sim-serve`` validates every request body against :class:`ChatCompletionRequest` or
:class:`TextCompletionRequest` (strict pydantic, parsed from the raw JSON) and answers a
bad one with HTTP 400 and the body OpenAI sends::

    {"error": {"message": "Invalid type for 'max_tokens': ...", "type":
     "invalid_request_error", "param": "max_tokens", "code": "invalid_type"}}

Strict means what OpenAI does: ``"max_tokens": "5"`` is a type error, not 5. Unknown
top-level fields are accepted (vLLM ignores them too), except unknown ``sim_*`` overrides.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from agentlab.llm.sim_result import MAX_SIM_TOKENS, REQUEST_RANGES

__all__ = [
    "MAX_SIM_TOKENS",
    "TEXT_DEFAULT_MAX_TOKENS",
    "ChatCompletionRequest",
    "DetokenizeRequest",
    "FaultRates",
    "Message",
    "NamedToolChoice",
    "SamplingRequest",
    "TextCompletionRequest",
    "TokenizeChatRequest",
    "TokenizeTextRequest",
    "Tool",
    "error_body",
    "validation_error_body",
]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", populate_by_name=True)


class FunctionDef(_Strict):
    """A tool's function: its name and JSON-schema parameters."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Strict):
    """One entry of ``tools`` (only function tools exist in chat completions)."""

    type: Literal["function"]
    function: FunctionDef


class _CalledFunction(_Strict):
    name: str
    arguments: str


class MessageToolCall(_Strict):
    """A tool call inside an assistant message of the history."""

    id: str
    type: Literal["function"]
    function: _CalledFunction


class Message(_Strict):
    """One message of ``messages``."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _content_rules(self) -> Message:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role!r} message needs 'content' (got null)")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a 'tool' message needs 'tool_call_id'")
        return self


class _NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    """``{"type": "function", "function": {"name": ...}}``: force one tool."""

    type: Literal["function"]
    function: _NamedFunction


class JsonSchemaFormat(_Strict):
    """The ``json_schema`` member of a ``json_schema`` response format."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    """``response_format``: text, json_object (optionally with ``schema``, llama.cpp), or
    json_schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type 'json_schema' needs a 'json_schema' object")
        return self


class StreamOptions(_Strict):
    """``stream_options``, with vLLM's defaults: a stream that sends the object at all gets
    the final usage chunk unless it says ``include_usage: false`` (or null), and
    ``continuous_usage_stats`` (usage in every chunk, which guidellm asks for) only with it."""

    include_usage: bool | None = True
    continuous_usage_stats: bool | None = None


def _bounded(name: str, default: Any = None) -> Any:
    """A field with the bounds a simulated call in process is held to too."""
    lo, hi = REQUEST_RANGES[name]
    return Field(default=default, ge=lo, le=hi)


_Share = Field(default=None, ge=0, le=1)


class SamplingRequest(_Strict):
    """What both completion endpoints take besides the prompt: OpenAI's sampling fields,
    vLLM's extras ``ignore_eos`` and ``min_tokens``, and the simulator's ``sim_*``
    overrides (typed here, so a wrongly typed one is a 400 naming it)."""

    model: str = Field(min_length=1)
    max_tokens: int | None = _bounded("max_tokens")
    min_tokens: int | None = _bounded("min_tokens")
    ignore_eos: bool | None = None
    temperature: float | None = _bounded("temperature")
    top_p: float | None = _bounded("top_p")
    n: int | None = Field(default=None, ge=1, le=1)  # one choice: what the simulator makes
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = _bounded("presence_penalty")
    frequency_penalty: float | None = _bounded("frequency_penalty")
    user: str | None = None
    response_format: ResponseFormat | None = None  # vLLM honours it on both endpoints
    # the simulator's per-call overrides (agentlab.llm.sim_backend.SIM_OVERRIDES)
    sim_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_SIM_TOKENS)
    sim_bool_p: float | None = _Share
    sim_marker: str | None = None
    sim_marker_p: float | None = _Share
    sim_tool_call_p: float | None = _Share
    sim_p_rate_limit: float | None = _Share
    sim_p_timeout: float | None = _Share
    sim_p_malformed: float | None = _Share
    sim_p_invalid_args: float | None = _Share

    @field_validator("stream_options", mode="before")
    @classmethod
    def _only_when_streaming(cls, v: Any, info: ValidationInfo) -> Any:
        # vLLM's validate_stream_options (a 400): only a non-empty object counts, as there
        if v and not info.data.get("stream"):
            raise ValueError("Stream options can only be defined when `stream=True`")
        return v

    def max_new_tokens(self) -> int | None:
        """The completion cap the request asks for."""
        return self.max_tokens


def _refuse_logprobs(v: Any, info: ValidationInfo) -> Any:
    if v is not None and v is not False:  # ``false`` / null ask for nothing
        raise ValueError(
            f"sim-serve does not simulate log probabilities; send no '{info.field_name}'"
        )
    return v


class ChatCompletionRequest(SamplingRequest):
    """The body of ``POST /v1/chat/completions`` (the fields sim-serve understands).

    ``logprobs`` / ``top_logprobs`` are refused with a 400 naming the field: the simulator
    has no token probabilities to report. vLLM's ``echo`` (the last message prepended to a
    reply of the same role) is refused so too: it was ignored, a reply without the echo.
    """

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = _bounded("max_completion_tokens")
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    echo: bool | None = None

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, v: Any, info: ValidationInfo) -> Any:
        if v:
            raise ValueError(f"sim-serve does not serve '{info.field_name}'; send none")
        return v

    @field_validator("logprobs", "top_logprobs")
    @classmethod
    def _no_logprobs(cls, v: Any, info: ValidationInfo) -> Any:
        return _refuse_logprobs(v or None, info)  # (``top_logprobs: 0`` asks for nothing)

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice_matches(cls, tc: Any, info: ValidationInfo) -> Any:
        tools = info.data.get("tools") or []
        if isinstance(tc, NamedToolChoice):
            names = [t.function.name for t in tools]
            if tc.function.name not in names:
                raise ValueError(
                    f"tool_choice names {tc.function.name!r}, not one of the tools {names}"
                )
        elif tc == "required" and not tools:
            raise ValueError("tool_choice 'required' needs 'tools'")
        return tc

    def max_new_tokens(self) -> int | None:
        """``max_completion_tokens`` or ``max_tokens`` (the newer name wins)."""
        return self.max_completion_tokens or self.max_tokens


#: vLLM's (and OpenAI's) default ``max_tokens`` of a text completion
TEXT_DEFAULT_MAX_TOKENS = 16


class TextCompletionRequest(SamplingRequest):
    """The body of ``POST /v1/completions`` (vLLM's text completions: a raw prompt, no
    chat template), what ``vllm bench serve`` and text-completion benchmark clients send.

    ``prompt``: one text or one list of token ids (a list holding one of either is the
    same); several prompts in one request are refused (one choice per request).
    ``max_tokens`` defaults to 16, as in vLLM. ``logprobs``, ``echo`` and ``suffix`` are
    refused with a 400 naming the field (no token probabilities, no detokenizer for an
    echoed token-id prompt, and vLLM serves no suffix either).
    """

    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = _bounded("max_tokens", TEXT_DEFAULT_MAX_TOKENS)
    logprobs: int | None = None
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1, le=1)

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: Any) -> Any:
        if isinstance(v, list) and v and isinstance(v[0], (str, list)):
            if len(v) != 1:
                raise ValueError(f"sim-serve takes one prompt per request, got {len(v)}")
            v = v[0]
        if not v:
            raise ValueError("the prompt is empty")
        if isinstance(v, list) and min(v) < 0:
            raise ValueError("a token id is negative")
        return v

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, v: Any, info: ValidationInfo) -> Any:
        return _refuse_logprobs(v, info)  # (``logprobs: 0`` asks for the sampled token's)

    @field_validator("echo", "suffix")
    @classmethod
    def _not_served(cls, v: Any, info: ValidationInfo) -> Any:
        if v:
            raise ValueError(f"sim-serve does not serve '{info.field_name}'; send none")
        return v


class TokenizeTextRequest(_Strict):
    """vLLM's ``POST /tokenize`` for a raw prompt (``add_special_tokens``: the
    ``<|begin_of_text|>`` first, as ``/v1/completions`` encodes it)."""

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeChatRequest(_Strict):
    """vLLM's ``POST /tokenize`` for a chat prompt: the chat template with ``tools`` and the
    generation prompt, as ``/v1/chat/completions`` counts it. ``add_special_tokens`` (off,
    as vLLM's default) adds a second ``<|begin_of_text|>`` before the template's own.
    ``continue_final_message`` is refused (the simulator renders no open final message)."""

    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    return_token_strs: bool | None = False

    @field_validator("continue_final_message")
    @classmethod
    def _no_continue(cls, v: bool) -> bool:
        if v:
            raise ValueError("sim-serve renders no continued final message; send false")
        return v


class DetokenizeRequest(_Strict):
    """vLLM's ``POST /detokenize``: token ids back to their text."""

    model: str | None = None
    tokens: list[int]


class FaultRates(_Strict):
    """Body of sim-serve's ``POST /sim/faults``: new injected fault rates (omitted: kept)."""

    model_config = ConfigDict(strict=False, extra="forbid")
    p_rate_limit: float | None = Field(default=None, ge=0, le=1)
    p_timeout: float | None = Field(default=None, ge=0, le=1)
    p_malformed: float | None = Field(default=None, ge=0, le=1)


_TYPE_CODES = {"missing": "missing_required_parameter", "too_short": "empty_array"}
_RANGE_CODES = {
    "greater_than_equal": "below_min_value",
    "greater_than": "below_min_value",
    "less_than_equal": "above_max_value",
    "less_than": "above_max_value",
}


def error_body(
    message: str,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """An OpenAI-style error body ``{"error": {message, type, param, code}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _param(loc: tuple[int | str, ...]) -> str | None:
    """``('messages', 0, 'content', 'str')`` → ``messages[0].content`` (union tags dropped)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _is_union_tag(part):
            continue
        else:
            out += ("." if out else "") + part
    return out or None


def _is_union_tag(part: str) -> bool:
    # pydantic names union members by type ("str", "list[...]", "literal['none',...]",
    # "NamedToolChoice", "function-after[...]"): never a field name of these models
    return (
        "[" in part
        or part in {"str", "int", "float", "bool", "none", "dict", "list"}
        or part[:1].isupper()
    )


def validation_error_body(exc: ValidationError) -> dict[str, Any]:
    """The OpenAI-style 400 body for the first problem of a pydantic ``ValidationError``."""
    err = exc.errors(include_url=False)[0]
    kind = str(err["type"])
    if kind == "json_invalid":
        return error_body(
            f"We could not parse the JSON body of your request: {err['msg']}",
            code="invalid_json",
        )
    param = _param(tuple(err["loc"]))
    got = err.get("input")
    if kind == "missing":
        msg = f"Missing required parameter: '{param}'."
        code = _TYPE_CODES[kind]
    elif kind == "too_short":
        msg = f"Invalid '{param}': empty array. Expected an array with minimum length 1."
        code = _TYPE_CODES[kind]
    elif kind in _RANGE_CODES:
        msg = f"Invalid '{param}': {err['msg']}, but got {got!r} instead."
        code = ("integer_" if isinstance(got, int) else "decimal_") + _RANGE_CODES[kind]
    elif kind.endswith("_type") or kind.endswith("_parsing") or kind == "model_type":
        msg = f"Invalid type for '{param}': {err['msg']}, but got {_type_name(got)} instead."
        code = "invalid_type"
    elif kind == "value_error":  # our model validators: the message says it all
        msg = f"Invalid value for '{param}': {str(err['msg']).removeprefix('Value error, ')}."
        code = "invalid_value"
    else:
        msg = f"Invalid value for '{param}': {err['msg']} (got {got!r})."
        code = "invalid_value"
    return error_body(msg, param=param, code=code)


def _type_name(value: Any) -> str:
    names = {str: "a string", int: "an integer", float: "a decimal", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return names.get(type(value), type(value).__name__)
