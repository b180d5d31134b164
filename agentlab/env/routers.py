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

from collections.abc import Callable
from typing import Any

from agentlab.env.base import EnvBase
from agentlab.env.registry import env_from_spec
from agentlab.env.routers_base import (
    _ROUTERS,
    LLMLike,
    Router,
    RouteResult,
    RouterStats,
    ToolArgumentError,
    register_router,
)
from agentlab.env.routers_codegen import CodeGenRouter, extract_code
from agentlab.env.routers_react import DirectRouter, ReActRouter
from agentlab.errors import UnknownNameError

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


for _cls in (DirectRouter, ReActRouter, CodeGenRouter):
    register_router(_cls)


def _load_all() -> None:
    import agentlab.env.routers_plan
    import agentlab.env.routers_search  # noqa: F401  (registers search)


def router_kinds() -> list[str]:
    """Names accepted by :func:`make_router`."""
    _load_all()
    return sorted(_ROUTERS)


def make_router(kind: str, env: EnvBase | list[EnvBase], **kwargs: Any) -> Router:
    """Build a router by kind (``direct``, ``react``, ``codegen``, ``plan``, ``two_tier``,
    ``search``).

    ``env`` is one module, or a list of modules for ``two_tier``.

    Raises:
        UnknownNameError: listing the router kinds.
    """
    _load_all()
    # the kinds' constructors take one module, or a list (two_tier)
    cls: Callable[..., Router] | None = _ROUTERS.get(kind)
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
