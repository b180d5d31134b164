"""Structured output from pydantic models, with one repair retry and an explicit failure policy.

``complete_structured`` asks the LLM for a reply matching a pydantic model, validates it,
and on failure sends *one* repair request carrying the validation errors. If that also
fails, the :class:`FailurePolicy` decides — ``retry`` (more repair attempts), ``default``
(a given value or a factory), ``abstain`` (an explicit abstention) or ``raise`` (a typed
:class:`~agentlab.errors.StructuredOutputError`). The result always says which path was
taken; a failure is never a silent ``None``.

JSON schemas and per-choice-set models (``Literal`` of the living players, ...) are cached
so a reply does not regenerate them (AgentScope rebuilt its schema 25 times per reply).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, ValidationError, create_model

from agentlab.core.records import LLMResponse
from agentlab.errors import ConfigError, LLMError, StructuredOutputError

__all__ = [
    "CompletionClient",
    "FailurePolicy",
    "StructuredResult",
    "choice_model",
    "complete_structured",
    "json_schema",
]

T = TypeVar("T", bound=BaseModel)
PolicyKind = Literal["retry", "default", "abstain", "raise"]
_KINDS = ("retry", "default", "abstain", "raise")


class CompletionClient(Protocol):
    """What messaging needs from an LLM: ``agentlab.llm.LLMClient.complete``'s shape."""

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> LLMResponse:
        """One chat completion."""
        ...


@dataclass(frozen=True)
class FailurePolicy:
    """What to do when a structured reply is still invalid after the repair retry.

    Args:
        kind: ``"retry"``, ``"default"``, ``"abstain"`` or ``"raise"``.
        default: the value for ``kind="default"``: a model instance, or a callable
            ``f(error) -> instance`` (e.g. a seeded random choice).
        retries: extra repair attempts for ``kind="retry"``.
        then: what ``retry`` falls back to when its attempts are spent.
        catch_llm_errors: also apply the policy when the call itself fails (rate limit,
            timeout after the client's own retries), not only on invalid output.
    """

    kind: PolicyKind = "raise"
    default: Any = None
    retries: int = 2
    then: PolicyKind = "raise"
    catch_llm_errors: bool = True

    def __post_init__(self) -> None:
        for name, value in (("kind", self.kind), ("then", self.then)):
            if value not in _KINDS:
                raise ConfigError(f"invalid failure policy {name} {value!r}; valid: {_KINDS}")
        if self.then == "retry":
            raise ConfigError("failure policy then='retry' would loop; use default/abstain/raise")
        if "default" in (self.kind, self.then) and self.default is None:
            raise ConfigError("failure policy 'default' needs default= (a value or a factory)")
        if self.retries < 0:
            raise ConfigError(f"failure policy retries must be >= 0, got {self.retries}")

    @classmethod
    def coerce(cls, policy: FailurePolicy | str) -> FailurePolicy:
        """Accept a policy or its kind name (``"raise"``, ``"abstain"``, ``"retry"``)."""
        return policy if isinstance(policy, FailurePolicy) else cls(kind=policy)  # type: ignore[arg-type]


@dataclass
class StructuredResult(Generic[T]):
    """Outcome of :func:`complete_structured`.

    Attributes:
        value: the validated object (or the policy's default); ``None`` only if abstained.
        status: ``"ok"`` (first try), ``"repaired"`` (valid after repair), ``"default"``,
            or ``"abstained"``.
        attempts: LLM calls made.
        error: the last error when the policy had to step in.
        response: the last successful LLM response, if any (text, record).
    """

    value: T | None
    status: Literal["ok", "repaired", "default", "abstained"]
    attempts: int
    error: Exception | None = None
    response: LLMResponse | None = None
    responses: list[LLMResponse] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the model produced a valid reply (first try or after repair)."""
        return self.status in ("ok", "repaired")

    @property
    def abstained(self) -> bool:
        return self.status == "abstained"


@functools.lru_cache(maxsize=512)
def json_schema(model: type[BaseModel]) -> str:
    """The model's JSON schema as a compact string, computed once per model class."""
    return json.dumps(model.model_json_schema(), separators=(",", ":"))


@functools.lru_cache(maxsize=1024)
def choice_model(
    name: str, field_name: str, choices: tuple[str, ...], reason: bool = True
) -> type[BaseModel]:
    """A pydantic model whose ``field_name`` is a ``Literal`` of ``choices`` (cached).

    Votes among the living players change every round but repeat across calls, so the model
    (and, through :func:`json_schema`, its schema) is built once per distinct name set.
    ``reason=True`` adds a free-text ``reason`` field before the choice.
    """
    if not choices:
        raise ConfigError(f"choice_model {name!r} needs at least one choice")
    lit = Literal[choices]  # type: ignore[valid-type]
    fields: dict[str, Any] = {}
    if reason:
        fields["reason"] = (str, "")
    fields[field_name] = (lit, ...)
    return create_model(name, **fields)


def _validate(model: type[T], resp: LLMResponse) -> T:
    parsed = resp.parsed
    if isinstance(parsed, model):
        return parsed
    try:
        if isinstance(parsed, dict):
            return model.model_validate(parsed)
        return model.model_validate_json(resp.text or "")
    except ValidationError as exc:
        raise StructuredOutputError(
            f"reply does not match {model.__name__}: {exc.error_count()} error(s)",
            raw=resp.text,
            errors=exc.errors(include_url=False),
        ) from exc


def _repair_messages(
    messages: Sequence[dict[str, Any]], model: type[BaseModel], err: Exception
) -> list[dict[str, Any]]:
    raw = getattr(err, "raw", None)
    errors = getattr(err, "errors", None) or str(err)
    out = list(messages)
    if raw:
        out.append({"role": "assistant", "content": str(raw)[:2000]})
    out.append(
        {
            "role": "user",
            "content": (
                f"Your previous reply was not valid {model.__name__} JSON. Errors: "
                f"{json.dumps(errors, default=str)[:1000]}. Reply again with only a JSON "
                f"object matching this schema: {json_schema(model)}"
            ),
        }
    )
    return out


async def complete_structured(
    client: CompletionClient,
    messages: Sequence[dict[str, Any]],
    model: type[T],
    *,
    policy: FailurePolicy | str = "raise",
    labels: dict[str, Any] | None = None,
    agent_id: str | None = None,
    **overrides: Any,
) -> StructuredResult[T]:
    """Ask ``client`` for a ``model`` instance; repair once; then apply ``policy``.

    Args:
        client: an ``LLMClient`` (or anything with its ``complete`` signature).
        messages: OpenAI-style chat messages.
        model: the pydantic model the reply must match.
        policy: a :class:`FailurePolicy` or a kind name.
        labels: call labels (repair calls get ``repair=<n>`` added).
        agent_id: passed through to the client.
        **overrides: passed through to ``client.complete`` (``sim_bool_p=...``, ...).

    Returns:
        A :class:`StructuredResult` saying how the value was obtained.

    Raises:
        StructuredOutputError: when the policy (or a spent ``retry``) is ``"raise"``.
        LLMError: a failed call when ``policy.catch_llm_errors`` is false.
    """
    pol = FailurePolicy.coerce(policy)
    base = dict(labels or {})
    max_calls = 2 + (pol.retries if pol.kind == "retry" else 0)
    convo = list(messages)
    responses: list[LLMResponse] = []
    last_err: Exception | None = None
    for attempt in range(max_calls):
        call_labels = base if attempt == 0 else {**base, "repair": attempt}
        try:
            resp = await client.complete(
                convo, response_format=model, labels=call_labels, agent_id=agent_id, **overrides
            )
            responses.append(resp)
            value = _validate(model, resp)
        except StructuredOutputError as exc:
            last_err = exc
            convo = _repair_messages(messages, model, exc)
            continue
        except LLMError as exc:
            if not pol.catch_llm_errors:
                raise
            last_err = exc
            continue
        status: Literal["ok", "repaired"] = "ok" if attempt == 0 else "repaired"
        return StructuredResult(value, status, attempt + 1, last_err, resp, responses)
    return _apply_policy(pol, model, last_err, max_calls, responses)


def _apply_policy(
    pol: FailurePolicy,
    model: type[T],
    err: Exception | None,
    attempts: int,
    responses: list[LLMResponse],
) -> StructuredResult[T]:
    kind = pol.then if pol.kind == "retry" else pol.kind
    last = responses[-1] if responses else None
    if kind == "abstain":
        return StructuredResult(None, "abstained", attempts, err, last, responses)
    if kind == "default":
        default = pol.default
        value = default(err) if callable(default) else default
        if isinstance(value, dict):
            value = model.model_validate(value)
        return StructuredResult(value, "default", attempts, err, last, responses)
    if isinstance(err, StructuredOutputError):
        raise err
    raise StructuredOutputError(
        f"no valid {model.__name__} after {attempts} call(s): {err}",
        raw=getattr(err, "raw", None),
        errors=getattr(err, "errors", None) or str(err),
    ) from err
