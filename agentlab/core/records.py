"""Plain records shared by every layer: LLM call records, responses, tool calls, usage.

These are the shapes that travel between processes and land in the run log, so they are
small dataclasses with ``to_dict``/``from_dict`` and a ``schema_version``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallRecord", "LLMResponse", "ToolCall", "Usage"]

SCHEMA_VERSION = 1


@dataclass(slots=True)
class ToolCall:
    """One tool call requested by a model (OpenAI shape: id, name, JSON arguments)."""

    id: str
    name: str
    arguments: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        """The ``tool_calls`` entry an OpenAI-style assistant message carries."""
        import json

        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


@dataclass(slots=True)
class Usage:
    """Token counts; ``+`` adds them, so per-process totals can be merged."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    errors: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.calls + other.calls,
            self.errors + other.errors,
        )

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class CallRecord:
    """What one LLM call looked like from the client: timing, tokens and outcome.

    Times are seconds from the run's :class:`~agentlab.core.clock.Clock` (epoch seconds for
    the real clock, virtual seconds for the virtual one). ``first_token`` is ``None`` when
    the call failed before any output. ``queue_wait`` is reported by backends that know it
    (the simulator; vLLM metrics); ``None`` otherwise.
    """

    request_id: str
    model: str
    start: float
    end: float = 0.0
    first_token: float | None = None
    queue_wait: float | None = None
    agent_id: str | None = None
    labels: dict[str, Any] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    outcome: str = "ok"  # "ok" or an LLMError.code such as "rate_limited"
    error: str | None = None  # message of the final error, if any
    attempts: int = 1
    stream: bool = False
    schema_version: int = SCHEMA_VERSION
    #: the attempts of a retried or failed call: ``(attempt, code, start, end, error)``
    #: with ``code`` "ok" or an ``LLMError.code`` (empty for a first-attempt success);
    #: written to the ``llm_attempts`` dataset, not to ``llm_calls``
    tries: list[tuple[int, str, float, float, str | None]] = field(default_factory=list)
    #: prompt tokens the server found in its prefix cache (vLLM's
    #: ``usage.prompt_tokens_details.cached_tokens``); 0 where unknown
    cached_tokens: int = 0

    @property
    def latency(self) -> float:
        return self.end - self.start

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.start

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["labels"] = dict(self.labels)
        d["tries"] = [list(t) for t in self.tries]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CallRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "tries" in kw:
            kw["tries"] = [tuple(t) for t in kw["tries"]]
        return cls(**kw)


@dataclass(slots=True)
class LLMResponse:
    """A completed LLM call: the text, any tool calls, parsed structured output, the record."""

    text: str
    record: CallRecord
    tool_calls: list[ToolCall] = field(default_factory=list)
    parsed: Any = None  # validated pydantic object / dict when response_format was given
    finish_reason: str = "stop"

    @property
    def usage(self) -> Usage:
        r = self.record
        return Usage(r.prompt_tokens, r.completion_tokens, 1, 0 if r.outcome == "ok" else 1)

    def to_message(self) -> dict[str, Any]:
        """The assistant message to append to a conversation history."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            msg["tool_calls"] = [tc.to_openai() for tc in self.tool_calls]
        return msg
