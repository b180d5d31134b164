"""Routers: turn an agent's request into tool calls on an env module.

- :class:`DirectRouter` — the request *is* a structured call
  (``{"tool": name, "arguments": {...}}``); validated against the tool's schema, no LLM.
- :class:`ReActRouter` — natural language; a bounded tool-calling loop over
  ``llm.complete(messages, tools=...)``.
- :class:`CodeGenRouter` — natural language; the LLM writes a short Python snippet that runs
  in the sandbox with only the tools callable — by default in a worker process of
  :class:`~agentlab.env.sandbox_pool.SandboxPool` (``isolation="process"``), so hostile code
  costs one request, never the host. Generated code is cached by (request shape, tool
  signatures) (:class:`~agentlab.env.code_cache.CodeCache`; ``cache_hits``/``cache_misses``).
- :class:`~agentlab.env.routers_plan.PlanRouter` (``plan``) and
  :class:`~agentlab.env.routers_plan.TwoTierRouter` (``two_tier``: pick a module, then a
  tool) live in :mod:`agentlab.env.routers_plan`.

Observations are rendered with a character budget *before* they are built
(:func:`~agentlab.env.render.bounded_json`), whatever the value's logical size.

A router never raises for a bad request: it returns a :class:`RouteResult` whose
``observation`` tells the agent what went wrong, and counts it in :class:`RouterStats`
(``rejections`` for refused requests — unknown tool, invalid arguments, unsafe code;
``errors`` for failures — a tool or the LLM failed, an iteration limit was hit). Call
``result.raise_for_error()`` to turn it into the exception.

A router can be rebuilt in another process (a Ray worker or actor) from
:meth:`Router.to_spec` with :func:`router_from_spec`. (A society's env host — in-process,
or one Ray actor under the Ray executor — builds its own ``DirectRouter`` per module.)
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Protocol

from agentlab.env.base import EnvBase
from agentlab.env.code_cache import CodeCache
from agentlab.env.registry import env_from_spec, env_spec
from agentlab.env.render import TooLarge, bounded_json, logical_size
from agentlab.env.sandbox import Limits, Sandbox
from agentlab.env.sandbox_pool import SandboxPool, default_pool
from agentlab.errors import (
    AgentlabError,
    ConfigError,
    ToolError,
    UnknownNameError,
    UnsafeCodeError,
)

__all__ = [
    "CodeGenRouter",
    "DirectRouter",
    "LLMLike",
    "ReActRouter",
    "RouteResult",
    "Router",
    "RouterStats",
    "ToolArgumentError",
    "make_router",
    "router_from_spec",
    "router_kinds",
]


class ToolArgumentError(ToolError):
    """A tool call named an unknown tool or carried arguments that fail its schema."""


class LLMLike(Protocol):
    """What routers need from an LLM: the ``LLMClient.complete`` contract."""

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        """Return an ``LLMResponse``-like object (``text``, ``tool_calls``)."""
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

    async def route(self, request: Any, *, agent_id: str | None = None) -> RouteResult:
        """Carry out ``request`` for ``agent_id``; never raises for bad requests."""
        self.stats.calls += 1
        llm_before = self.stats.llm_calls
        try:
            result = await self._route(request, agent_id)
        except (ToolArgumentError, UnsafeCodeError, UnknownNameError) as exc:
            self.stats.rejections += 1
            result = self._failure(exc, "rejected")
        except Exception as exc:  # a tool bug or LLM failure must not kill the society
            self.stats.errors += 1
            result = self._failure(exc, "failed")
        result.router = result.router or self.kind
        result.llm_calls = self.stats.llm_calls - llm_before
        return result

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


class DirectRouter(Router):
    """A structured call: ``{"tool": name, "arguments": {...}}`` (or OpenAI's
    ``{"name": ..., "arguments": "<json>"}``, a ``ToolCall``, or that as a JSON string).
    No LLM call is made."""

    kind = "direct"

    async def _route(self, request: Any, agent_id: str | None) -> RouteResult:
        name, arguments = _parse_direct(request)
        calls: list[dict[str, Any]] = []
        try:
            value = await self.call_tool(name, arguments, agent_id, calls)
        except BaseException as exc:
            exc._agentlab_calls = calls  # type: ignore[attr-defined]
            raise
        return RouteResult(ok=True, calls=calls, value=value, max_chars=self.max_observation_chars)


def _parse_direct(request: Any) -> tuple[str, Any]:
    if isinstance(request, str):
        try:
            request = json.loads(request)
        except json.JSONDecodeError:
            raise ToolArgumentError(
                'a direct request must be {"tool": name, "arguments": {...}}, got text '
                f"{request[:80]!r}"
            ) from None
    if hasattr(request, "name") and hasattr(request, "arguments"):  # core.ToolCall
        return str(request.name), request.arguments
    if isinstance(request, dict):
        inner = request.get("function")
        fn: dict[str, Any] = inner if isinstance(inner, dict) else request
        name = fn.get("tool", fn.get("name"))
        if isinstance(name, str):
            return name, fn.get("arguments", {})
    raise ToolArgumentError(
        f'a direct request must be {{"tool": name, "arguments": {{...}}}}, got {request!r:.120}'
    )


class ReActRouter(Router):
    """Tool-calling loop: the LLM sees the tools, calls some, sees results, answers.

    Args:
        max_iterations: LLM calls per request at most; hitting it is an error.
        system_prompt: overrides the default (world description + instructions).
    """

    kind = "react"

    def __init__(
        self,
        env: EnvBase,
        *,
        llm: LLMLike | None = None,
        max_iterations: int = 4,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(env, llm=llm, **kwargs)
        if max_iterations < 1:
            raise ToolArgumentError(f"max_iterations must be >= 1, got {max_iterations}")
        self.max_iterations = max_iterations
        self.system_prompt = system_prompt

    def _options(self) -> dict[str, Any]:
        return {
            **super()._options(),
            "max_iterations": self.max_iterations,
            "system_prompt": self.system_prompt,
        }

    async def _route(self, request: Any, agent_id: str | None) -> RouteResult:
        if self.llm is None:
            raise ToolError("ReActRouter needs an llm")
        system = self.system_prompt or (
            f"{self.env.describe(agent_id)}\nUse the tools to carry out the user's request, "
            "then answer briefly."
        )
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": str(request)},
        ]
        schemas = self.env.tool_schemas(self.tool_names)
        calls: list[dict[str, Any]] = []
        value: Any = None
        for i in range(self.max_iterations):
            self.stats.llm_calls += 1
            resp = await self.llm.complete(
                messages,
                tools=schemas,
                agent_id=agent_id,
                labels={"stage": "router", "router": self.kind, "iteration": i},
            )
            tool_calls = list(getattr(resp, "tool_calls", None) or [])
            text = getattr(resp, "text", "") or ""
            if not tool_calls:
                observation = "\n".join(
                    [f"{c['tool']}: {_render(c.get('result', c.get('error')), 400)}" for c in calls]
                    + ([text] if text else [])
                )
                return RouteResult(
                    ok=True,
                    text=_render(observation or "(no action)", self.max_observation_chars),
                    calls=calls,
                    value=value,
                )
            messages.append(_assistant_message(text, tool_calls))
            for tc in tool_calls:
                try:
                    value = await self.call_tool(tc.name, tc.arguments, agent_id, calls)
                    content = _render(value, self.max_observation_chars)
                except (ToolError, UnknownNameError) as exc:
                    # the model sees its mistake and may correct it in the next iteration
                    if isinstance(exc, ToolArgumentError):
                        self.stats.rejections += 1
                    else:
                        self.stats.errors += 1
                    content = f"error: {exc}"
                messages.append(
                    {"role": "tool", "tool_call_id": getattr(tc, "id", ""), "content": content}
                )
        err = ToolError(
            f"ReAct loop stopped after max_iterations={self.max_iterations} without a final answer"
        )
        err._agentlab_calls = calls  # type: ignore[attr-defined]
        raise err


def _assistant_message(text: str, tool_calls: list[Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {
                "id": getattr(tc, "id", ""),
                "type": "function",
                "function": {
                    "name": tc.name,
                    "arguments": tc.arguments
                    if isinstance(tc.arguments, str)
                    else json.dumps(tc.arguments),
                },
            }
            for tc in tool_calls
        ],
    }


_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str:
    """The first fenced code block of ``text``, or the whole text stripped."""
    m = _FENCE.search(text or "")
    return (m.group(1) if m else (text or "")).strip()


class CodeGenRouter(Router):
    """The LLM writes a short Python snippet calling the tools; it runs in the sandbox.

    Args:
        limits: sandbox budgets.
        cache_size: generated programs remembered by (request shape, tool signatures)
            (0 disables).
        isolation: ``"process"`` (default: a :class:`SandboxPool` worker with OS limits) or
            ``"inline"`` (the interpreter in this process; for trusted code and benchmarks).
        pool: the pool to use (default :func:`~agentlab.env.sandbox_pool.default_pool`).
    """

    kind = "codegen"
    ISOLATIONS: ClassVar[tuple[str, ...]] = ("process", "inline")

    def __init__(
        self,
        env: EnvBase,
        *,
        llm: LLMLike | None = None,
        limits: Limits | dict[str, Any] | None = None,
        cache_size: int = 256,
        isolation: str = "process",
        pool: SandboxPool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(env, llm=llm, **kwargs)
        if isolation not in self.ISOLATIONS:
            raise ConfigError(f"isolation {isolation!r} is not valid; use one of {self.ISOLATIONS}")
        self.limits = Limits(**limits) if isinstance(limits, dict) else (limits or Limits())
        self.cache_size = cache_size
        self.isolation = isolation
        self.pool = pool
        self.cache = CodeCache(cache_size)

    def _options(self) -> dict[str, Any]:
        return {
            **super()._options(),
            "limits": asdict(self.limits),
            "cache_size": self.cache_size,
            "isolation": self.isolation,
        }

    def signatures(self) -> tuple[str, ...]:
        """The offered tools' signatures (part of the code cache key)."""
        return tuple(self.env.get_tool(n).signature_text() for n in self.tool_names)

    def prompt(self, request: str, agent_id: str | None) -> list[dict[str, Any]]:
        """The messages sent to the LLM for ``request``."""
        lines = [
            f"- {s.signature_text()}: {s.description}"
            for s in (self.env.get_tool(n) for n in self.tool_names)
        ]
        system = (
            f"{self.env.describe(agent_id)}\nWrite a few lines of Python that carry out the "
            "request using only these functions:\n" + "\n".join(lines) + "\nRules: no imports, "
            "no def/lambda/class, no attribute access except simple str/list/dict methods. "
            "The value of the last line is the result. Reply with code only."
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": request}]

    async def _route(self, request: Any, agent_id: str | None) -> RouteResult:
        text = str(request)
        sigs = self.signatures()
        code = self.cache.get(text, sigs)
        hit = code is not None
        if code is not None:
            self.stats.cache_hits += 1
        else:
            self.stats.cache_misses += 1
            if self.llm is None:
                raise ToolError("CodeGenRouter needs an llm")
            self.stats.llm_calls += 1
            resp = await self.llm.complete(
                self.prompt(text, agent_id),
                agent_id=agent_id,
                labels={"stage": "router", "router": self.kind},
            )
            code = extract_code(getattr(resp, "text", "") or "")
        try:
            result = await self.run_code(code, agent_id=agent_id)
        except BaseException as exc:
            exc._agentlab_code = code  # type: ignore[attr-defined]
            exc._agentlab_cache_hit = hit  # type: ignore[attr-defined]
            raise
        result.code, result.cache_hit = code, hit
        if not hit:
            self.cache.put(text, sigs, code)
        return result

    async def run_code(self, code: str, *, agent_id: str | None = None) -> RouteResult:
        """Run ``code`` in the sandbox with this router's tools (no LLM involved).

        Raises:
            UnsafeCodeError / ToolError: handled by :meth:`route`; raised when called directly.
        """
        calls: list[dict[str, Any]] = []

        def bind(name: str) -> Any:
            spec = self.env.get_tool(name)

            async def fn(args: list[Any], kwargs: dict[str, Any]) -> Any:
                if len(args) > len(spec.params):
                    raise ToolArgumentError(
                        f"{name}() takes {len(spec.params)} arguments, got {len(args)}; "
                        f"expected {spec.signature_text()}"
                    )
                merged = dict(zip(spec.params, args, strict=False))
                dup = set(merged) & set(kwargs)
                if dup:
                    raise ToolArgumentError(f"{name}() got multiple values for {sorted(dup)}")
                return await self.call_tool(name, {**merged, **kwargs}, agent_id, calls)

            return fn

        tools = {n: bind(n) for n in self.tool_names}
        try:
            if self.isolation == "process":
                out = await (self.pool or default_pool()).run(code, tools, self.limits)
            else:
                out = await Sandbox(tools, self.limits).run(code)
        except AgentlabError as exc:
            exc._agentlab_calls = calls  # type: ignore[attr-defined]
            raise
        parts = [*out.printed]
        if out.value is not None or not parts:
            parts.append(_render(out.value, self.max_observation_chars))
        return RouteResult(
            ok=True,
            text=_render("\n".join(parts), self.max_observation_chars),
            calls=calls,
            value=out.value,
            code=code,
        )


_ROUTERS: dict[str, type[Router]] = {
    "direct": DirectRouter,
    "react": ReActRouter,
    "codegen": CodeGenRouter,
}


def register_router(cls: type[Router]) -> type[Router]:
    """Make ``cls`` buildable by its ``kind`` with :func:`make_router`."""
    _ROUTERS[cls.kind] = cls
    return cls


def _load_all() -> None:
    import agentlab.env.routers_plan  # noqa: F401  (registers plan / two_tier)


def router_kinds() -> list[str]:
    """Names accepted by :func:`make_router`."""
    _load_all()
    return sorted(_ROUTERS)


def make_router(kind: str, env: Any, **kwargs: Any) -> Router:
    """Build a router by kind (``direct``, ``react``, ``codegen``, ``plan``, ``two_tier``).

    ``env`` is one module, or a list of modules for ``two_tier``.

    Raises:
        UnknownNameError: listing the router kinds.
    """
    _load_all()
    cls = _ROUTERS.get(kind)
    if cls is None:
        raise UnknownNameError("router", kind, list(_ROUTERS))
    return cls(env, **kwargs)


def router_from_spec(
    spec: dict[str, Any],
    *,
    env: EnvBase | None = None,
    llm: LLMLike | None = None,
    run_dir: str | None = None,
) -> Router:
    """Rebuild a router from :meth:`Router.to_spec` (e.g. inside a Ray actor).

    Args:
        spec: the spec.
        env: use this module instead of building one from ``spec["env"]``.
        llm: use this LLM instead of ``LLMClient.from_dict(spec["llm"])``.
        run_dir: restore the env's checkpoint from here after ``init``.
    """
    if env is None:
        env = env_from_spec(spec["env"], run_dir=run_dir)
    if llm is None and spec.get("llm"):
        from agentlab.llm import LLMClient  # layer 2; imported only when a spec carries one

        llm = LLMClient.from_dict(spec["llm"])
    return make_router(spec["kind"], env, llm=llm, **spec.get("options", {}))
