"""The router base: results, counters, bounded rendering, validated tool calls.

:class:`Router` runs validated tool calls and keeps :class:`RouterStats`; every routed
request ends in a :class:`RouteResult` (never an exception for a bad request). The concrete
routers live in :mod:`agentlab.env.routers` (direct, ReAct), :mod:`agentlab.env.routers_codegen`
and :mod:`agentlab.env.routers_plan`.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Protocol

from agentlab.core.clock import Clock
from agentlab.core.records import LLMResponse
from agentlab.env.base import EnvBase
from agentlab.env.registry import env_spec
from agentlab.env.render import TooLarge, bounded_json, logical_size
from agentlab.errors import ToolError, UnknownNameError, UnsafeCodeError

__all__ = [
    "LLMLike",
    "RouteResult",
    "Router",
    "RouterStats",
    "ToolArgumentError",
    "register_router",
]


class ToolArgumentError(ToolError):
    """A tool call named an unknown tool or carried arguments that fail its schema."""


class LLMLike(Protocol):
    """What routers need from an LLM: the ``LLMClient.complete`` contract."""

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> LLMResponse:
        """Return an ``LLMResponse`` (``text``, ``tool_calls``)."""
        ...


@dataclass
class RouterStats:
    """Counters of one router (per process; add them up across processes)."""

    calls: int = 0
    tool_calls: int = 0
    llm_calls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    rejections: int = 0
    errors: int = 0

    def to_dict(self) -> dict[str, int]:
        """Plain dict (for logs and widgets)."""
        return asdict(self)

    def __add__(self, other: RouterStats) -> RouterStats:
        return RouterStats(**{k: v + getattr(other, k) for k, v in asdict(self).items()})


@dataclass
class RouteResult:
    """Outcome of one routed request.

    Attributes:
        ok: whether the request was carried out.
        calls: the tool calls made: ``{"tool", "arguments", "ok", "result" | "error"}``.
        value: the last result (direct/ReAct) or the program's value (codegen).
        error: error message when not ok; ``error_type`` its class name.
        text: the observation if already rendered (else rendered from ``value`` on first use
            of :attr:`observation`, so callers that only need ``value`` pay no JSON cost).
    """

    ok: bool
    calls: list[dict[str, Any]] = field(default_factory=list)
    value: Any = None
    error: str | None = None
    error_type: str | None = None
    exception: BaseException | None = field(default=None, repr=False, compare=False)
    text: str | None = None
    max_chars: int = field(default=2000, repr=False)
    #: the generated program (codegen) or plan (plan router), for the run log
    code: str | None = None
    plan: Any = None
    #: LLM calls this request made, and whether the program came from the code cache
    llm_calls: int = 0
    cache_hit: bool | None = None
    router: str = ""
    #: the search router's retrieval: ``{"offered", "chosen", "hit", "top1"}``
    search: dict[str, Any] | None = None

    @property
    def observation(self) -> str:
        """Text for the agent: the results, or what went wrong."""
        if self.text is None:
            self.text = _render(self.value, self.max_chars)
        return self.text

    def raise_for_error(self) -> RouteResult:
        """Raise the stored error (``ToolError``/``UnsafeCodeError``/...) if not ok."""
        if not self.ok:
            if self.exception is not None:
                raise self.exception
            raise ToolError(self.error or "request failed")
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (what crosses process boundaries)."""
        return {
            "ok": self.ok,
            "observation": self.observation,
            "calls": [{k: _jsonable(v) for k, v in c.items()} for c in self.calls],
            "value": _jsonable(self.value),
            "error": self.error,
            "error_type": self.error_type,
            "code": self.code,
            "plan": _jsonable(self.plan),
            "llm_calls": self.llm_calls,
            "cache_hit": self.cache_hit,
            "router": self.router,
            "search": self.search,
        }


def _jsonable(value: Any, limit: int = 20_000) -> Any:
    # The value may come from generated code: price the walk before json.dumps runs it.
    try:
        logical_size(value, limit)
        json.dumps(value)
        return value
    except (TooLarge, TypeError, ValueError, RecursionError):
        return bounded_json(value, limit)


def _render(value: Any, limit: int) -> str:
    text = bounded_json(value, limit + 1)  # stops at the budget: O(limit) for any value
    return text if len(text) <= limit else text[: limit - 15] + "... (truncated)"


#: the LLM-call counter of the request :meth:`Router.route` is carrying out in this task
_REQUEST_LLM_CALLS: ContextVar[list[int] | None] = ContextVar(
    "agentlab_router_request_llm_calls", default=None
)


class Router:
    """Base class: runs validated tool calls and keeps the counters.

    Args:
        env: the env module whose tools are exposed.
        llm: an object with ``LLMClient.complete`` (unused by :class:`DirectRouter`).
        tools: expose only these tool names (default: all).
        max_observation_chars: observations are truncated to this length.
    """

    kind: ClassVar[str] = ""

    def __init__(
        self,
        env: EnvBase,
        *,
        llm: LLMLike | None = None,
        tools: list[str] | None = None,
        max_observation_chars: int = 2000,
    ) -> None:
        self.env = env
        self.llm = llm
        self.tool_names = list(tools) if tools is not None else list(env.tool_specs())
        for name in self.tool_names:
            env.get_tool(name)  # unknown names fail now, listing the valid ones
        self.max_observation_chars = max_observation_chars
        self.stats = RouterStats()
        #: the run's clock (see :meth:`bind_clock`); ``None``: real time
        self.clock: Clock | None = None

    def bind_clock(self, clock: Clock) -> None:
        """Use the run's clock: under a virtual one, work this router does outside the
        event loop (sandbox processes) takes no virtual time and runs in a fixed order."""
        self.clock = clock

    async def route(self, request: Any, *, agent_id: str | None = None) -> RouteResult:
        """Carry out ``request`` for ``agent_id``; never raises for bad requests."""
        self.stats.calls += 1
        # This request's own LLM calls: the router's counter is shared by every request in
        # flight, so a difference of it would count the concurrent ones too.
        counter = [0]
        token = _REQUEST_LLM_CALLS.set(counter)
        try:
            result = await self._route(request, agent_id)
        except (ToolArgumentError, UnsafeCodeError, UnknownNameError) as exc:
            self.stats.rejections += 1
            result = self._failure(exc, "rejected")
        except Exception as exc:  # a tool bug or LLM failure must not kill the society
            self.stats.errors += 1
            result = self._failure(exc, "failed")
        finally:
            _REQUEST_LLM_CALLS.reset(token)
        result.router = result.router or self.kind
        result.llm_calls = counter[0]
        return result

    def state_dict(self) -> dict[str, Any]:
        """What this router has learned or counted (JSON-able), for the tick's commit."""
        return {"stats": self.stats.to_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.stats = RouterStats(**state["stats"])

    def count_llm_calls(self, n: int = 1) -> None:
        """Count ``n`` LLM calls made for the request being routed (in :attr:`stats` and in
        that request's ``RouteResult.llm_calls``)."""
        self.stats.llm_calls += n
        counter = _REQUEST_LLM_CALLS.get()
        if counter is not None:
            counter[0] += n

    async def _route(self, request: Any, agent_id: str | None) -> RouteResult:
        raise NotImplementedError

    def _failure(self, exc: BaseException, verb: str) -> RouteResult:
        msg = str(exc) or type(exc).__name__
        return RouteResult(
            ok=False,
            text=_render(f"error: request {verb}: {msg}", self.max_observation_chars),
            error=msg,
            error_type=type(exc).__name__,
            exception=exc,
            calls=getattr(exc, "_agentlab_calls", []),
            code=getattr(exc, "_agentlab_code", None),
            plan=getattr(exc, "_agentlab_plan", None),
            cache_hit=getattr(exc, "_agentlab_cache_hit", None),
            search=getattr(exc, "_agentlab_search", None),
        )

    async def call_tool(
        self, name: str, arguments: Any, agent_id: str | None, calls: list[dict[str, Any]]
    ) -> Any:
        """Validate and run one tool call, appending it to ``calls``.

        Raises:
            ToolArgumentError: unknown tool or invalid arguments.
            ToolError: the tool refused the call.
        """
        if name not in self.tool_names:
            raise ToolArgumentError(
                f"unknown tool {name!r}; available: {', '.join(sorted(self.tool_names))}"
            )
        spec = self.env.get_tool(name)
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                raise ToolArgumentError(
                    f"arguments for tool {name!r} are not valid JSON: {exc}"
                ) from None
        try:
            kwargs = spec.validate(arguments)
        except ToolError as exc:
            raise ToolArgumentError(str(exc)) from None
        entry: dict[str, Any] = {"tool": name, "arguments": kwargs}
        calls.append(entry)
        self.stats.tool_calls += 1
        try:
            result = await self.env.invoke(spec, kwargs, agent_id=agent_id)
        except Exception as exc:
            entry.update(ok=False, error=f"{type(exc).__name__}: {exc}")
            raise
        entry.update(ok=True, result=result)
        return result

    def to_spec(self) -> dict[str, Any]:
        """Small JSON-serialisable spec for :func:`router_from_spec`."""
        to_dict = getattr(self.llm, "to_dict", None)
        return {
            "kind": self.kind,
            "env": env_spec(self.env),
            "llm": to_dict() if callable(to_dict) else None,
            "options": self._options(),
        }

    def _options(self) -> dict[str, Any]:
        return {"tools": self.tool_names, "max_observation_chars": self.max_observation_chars}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={type(self.env).__name__}, stats={self.stats})"


#: router kinds buildable by ``make_router`` (:mod:`agentlab.env.routers` registers
#: ``direct``, ``react`` and ``codegen`` first, then loads the modules of the others)
_ROUTERS: dict[str, type[Router]] = {}


def register_router(cls: type[Router]) -> type[Router]:
    """Make ``cls`` buildable by its ``kind`` with :func:`make_router`."""
    _ROUTERS[cls.kind] = cls
    return cls
