"""Routers: turn an agent's request into tool calls on an env module.

- :class:`DirectRouter` — the request *is* a structured call
  (``{"tool": name, "arguments": {...}}``); validated against the tool's schema, no LLM.
- :class:`ReActRouter` — natural language; a bounded tool-calling loop over
  ``llm.complete(messages, tools=...)``.
- :class:`~agentlab.env.routers_codegen.CodeGenRouter` — natural language; the LLM writes a short Python snippet that runs
  in the sandbox with only the tools callable — by default in a worker process of
  :class:`~agentlab.env.sandbox_pool.SandboxPool` (``isolation="process"``), so hostile code
  costs one request, never the host. Generated code is cached by (request shape, tool
  signatures) (:class:`~agentlab.env.code_cache.CodeCache`; ``cache_hits``/``cache_misses``).
- :class:`~agentlab.env.routers_plan.PlanRouter` (``plan``) and
  :class:`~agentlab.env.routers_plan.TwoTierRouter` (``two_tier``: pick a module, then a
  tool) live in :mod:`agentlab.env.routers_plan`.
- :class:`~agentlab.env.routers_search.SearchRouter` (``search``: BM25 over the tool specs,
  ReAct over the top-k) lives in :mod:`agentlab.env.routers_search`.

Observations are rendered with a character budget *before* they are built
(:func:`~agentlab.env.render.bounded_json`), whatever the value's logical size.

A router never raises for a bad request: it returns a :class:`RouteResult` whose
``observation`` tells the agent what went wrong, and counts it in :class:`RouterStats`
(``rejections`` for refused requests — unknown tool, invalid arguments, unsafe code;
``errors`` for failures — a tool or the LLM failed, an iteration limit was hit). Call
``result.raise_for_error()`` to turn it into the exception.

The base class, results and counters are in :mod:`agentlab.env.routers_base` (re-exported
here). A router can be rebuilt in another process (a Ray worker or actor) from
:meth:`Router.to_spec` with :func:`router_from_spec`. (A society's env host — in-process,
or one Ray actor under the Ray executor — builds a ``DirectRouter`` per module for tool
calls and the configured router for ``env.ask``; see :mod:`agentlab.runtime.env_routing`.)
"""

from __future__ import annotations

import json
from typing import Any

from agentlab.env.base import EnvBase
from agentlab.env.registry import env_from_spec
from agentlab.env.routers_base import (
    LLMLike,
    Router,
    RouteResult,
    RouterStats,
    ToolArgumentError,
    _render,
)
from agentlab.env.routers_codegen import CodeGenRouter, extract_code
from agentlab.errors import ToolError, UnknownNameError

__all__ = [
    "CodeGenRouter",
    "DirectRouter",
    "LLMLike",
    "ReActRouter",
    "RouteResult",
    "Router",
    "RouterStats",
    "ToolArgumentError",
    "extract_code",
    "make_router",
    "register_router",
    "router_from_spec",
    "router_kinds",
]


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
        return await self._loop(request, agent_id, self.tool_names)

    async def _loop(self, request: Any, agent_id: str | None, offered: list[str]) -> RouteResult:
        """The tool-calling loop with the schemas of ``offered`` shown to the model."""
        if self.llm is None:
            raise ToolError(f"{type(self).__name__} needs an llm")
        system = self.system_prompt or (
            f"{self.env.describe(agent_id)}\nUse the tools to carry out the user's request, "
            "then answer briefly."
        )
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": str(request)},
        ]
        schemas = self.env.tool_schemas(offered)
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
    import agentlab.env.routers_plan
    import agentlab.env.routers_search  # noqa: F401  (registers search)


def router_kinds() -> list[str]:
    """Names accepted by :func:`make_router`."""
    _load_all()
    return sorted(_ROUTERS)


def make_router(kind: str, env: Any, **kwargs: Any) -> Router:
    """Build a router by kind (``direct``, ``react``, ``codegen``, ``plan``, ``two_tier``,
    ``search``).

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
