"""Two more routers: plan-then-execute, and two-tier selection for large tool sets.

- :class:`PlanRouter` (``plan``) — one LLM call writes the whole plan as JSON
  (``[{"tool": name, "arguments": {...}}, ...]``); the steps then run in order without
  further LLM calls, each validated like a direct call; the first failing step ends it.
- :class:`TwoTierRouter` (``two_tier``) — for many modules / tools: the LLM first picks a
  module (a tool call of ``choose_module`` whose ``module`` is an enum of the modules'
  names), then sees only that module's tools and calls one (a ReAct router on the module).
  Two short prompts instead of one with every schema.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentlab.core.clock import Clock
from agentlab.core.tools import function_tool, object_parameters
from agentlab.env.base import EnvBase
from agentlab.env.routers_base import (
    LLMLike,
    Router,
    RouteResult,
    ToolArgumentError,
    _render,
    register_router,
)
from agentlab.env.routers_react import ReActRouter
from agentlab.errors import ConfigError, ToolError

__all__ = ["PlanRouter", "TwoTierRouter", "parse_plan"]

_JSON_BLOCK = re.compile(r"```(?:json)?[ \t]*\n(.*?)```", re.DOTALL)


def parse_plan(text: str, max_steps: int) -> list[dict[str, Any]]:
    """The plan in an LLM reply: a JSON list of ``{"tool", "arguments"}`` steps.

    Raises:
        ToolArgumentError: not JSON, not a list of steps, or longer than ``max_steps``.
    """
    m = _JSON_BLOCK.search(text or "")
    raw = (m.group(1) if m else text or "").strip()
    start = raw.find("[")
    try:
        plan = json.loads(raw[start:] if start > 0 and not raw.startswith("{") else raw)
    except json.JSONDecodeError as exc:
        raise ToolArgumentError(
            f'the plan is not valid JSON ({exc}); expected [{{"tool": name, "arguments": '
            f"{{...}}}}, ...], got {raw[:120]!r}"
        ) from None
    if isinstance(plan, dict):
        plan = plan.get("steps", plan.get("plan", [plan]))
    if not isinstance(plan, list) or not all(isinstance(s, dict) for s in plan):
        raise ToolArgumentError(f"the plan must be a list of steps, got {type(plan).__name__}")
    if len(plan) > max_steps:
        raise ToolArgumentError(f"the plan has {len(plan)} steps; at most {max_steps} allowed")
    steps = []
    for i, step in enumerate(plan):
        name = step.get("tool", step.get("name"))
        if not isinstance(name, str):
            raise ToolArgumentError(f"plan step {i} names no tool: {json.dumps(step)[:120]}")
        steps.append({"tool": name, "arguments": step.get("arguments", step.get("args", {}))})
    return steps


@register_router
class PlanRouter(Router):
    """Plan-then-execute: one LLM call for the plan, then the steps in order.

    Args:
        max_steps: longest plan accepted.
    """

    kind = "plan"

    def __init__(
        self, env: EnvBase, *, llm: LLMLike | None = None, max_steps: int = 6, **kwargs: Any
    ) -> None:
        super().__init__(env, llm=llm, **kwargs)
        if max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps

    def _options(self) -> dict[str, Any]:
        return {**super()._options(), "max_steps": self.max_steps}

    def prompt(self, request: str, agent_id: str | None) -> list[dict[str, Any]]:
        """The messages asking for a plan."""
        lines = [
            f"- {s.signature_text()}: {s.description}"
            for s in (self.env.get_tool(n) for n in self.tool_names)
        ]
        system = (
            f"{self.env.describe(agent_id)}\nPlan the tool calls that carry out the request. "
            "Available tools:\n" + "\n".join(lines) + "\nReply with a JSON list only: "
            '[{"tool": name, "arguments": {...}}, ...] '
            f"(at most {self.max_steps} steps)."
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": request}]

    async def _route(self, request: Any, agent_id: str | None) -> RouteResult:
        if self.llm is None:
            raise ToolError("PlanRouter needs an llm")
        self.count_llm_calls()
        resp = await self.llm.complete(
            self.prompt(str(request), agent_id),
            agent_id=agent_id,
            labels={"stage": "router", "router": self.kind},
        )
        calls: list[dict[str, Any]] = []
        plan: Any = getattr(resp, "text", "") or ""
        try:
            plan = parse_plan(plan, self.max_steps)
            value: Any = None
            results = []
            for step in plan:
                value = await self.call_tool(step["tool"], step["arguments"], agent_id, calls)
                results.append(f"{step['tool']}: {_render(value, 400)}")
        except BaseException as exc:
            exc._agentlab_calls = calls  # type: ignore[attr-defined]
            exc._agentlab_plan = plan  # type: ignore[attr-defined]
            raise
        return RouteResult(
            ok=True,
            calls=calls,
            value=value,
            plan=plan,
            text=_render("\n".join(results) or "(empty plan)", self.max_observation_chars),
        )


@register_router
class TwoTierRouter(Router):
    """Pick a module, then a tool of it (see the module docstring).

    Args:
        env: the modules (a list; one module is allowed but gains nothing).
        max_iterations: LLM calls of the second tier (a ReAct loop on the chosen module).
    """

    kind = "two_tier"

    def __init__(
        self,
        env: EnvBase | list[EnvBase],
        *,
        llm: LLMLike | None = None,
        max_iterations: int = 2,
        max_observation_chars: int = 2000,
        tools: list[str] | None = None,
    ) -> None:
        modules = list(env) if isinstance(env, (list, tuple)) else [env]
        if not modules:
            raise ConfigError("TwoTierRouter needs at least one env module")
        super().__init__(modules[0], llm=llm, tools=[], max_observation_chars=max_observation_chars)
        self.modules = modules
        self.names = [_module_name(m, i) for i, m in enumerate(modules)]
        if len(set(self.names)) != len(self.names):
            self.names = [f"{n}_{i}" for i, n in enumerate(self.names)]
        self.inner = {
            n: ReActRouter(m, llm=llm, max_iterations=max_iterations, tools=tools)
            for n, m in zip(self.names, modules, strict=True)
        }
        self.max_iterations = max_iterations
        self.tool_names = [t for r in self.inner.values() for t in r.tool_names]

    def _options(self) -> dict[str, Any]:
        return {"max_iterations": self.max_iterations,
                "max_observation_chars": self.max_observation_chars}  # fmt: skip

    def to_spec(self) -> dict[str, Any]:
        """Spec of the first module only is not enough: rebuild two-tier routers by hand."""
        raise ConfigError("TwoTierRouter spans several modules; build it with make_router")

    def bind_clock(self, clock: Clock) -> None:
        """The run's clock, for this router and every module's router."""
        super().bind_clock(clock)
        for router in self.inner.values():
            router.bind_clock(clock)

    def choose_schema(self) -> dict[str, Any]:
        """The first tier's one tool: ``choose_module(module: enum of names)``."""
        return function_tool(
            "choose_module",
            "Pick the part of the world that can carry out the request.",
            object_parameters({"module": {"type": "string", "enum": self.names}}),
        )

    async def _route(self, request: Any, agent_id: str | None) -> RouteResult:
        if self.llm is None:
            raise ToolError("TwoTierRouter needs an llm")
        menu = "\n".join(
            f"- {n}: {m.describe(agent_id)[:300]} (tools: {', '.join(m.tool_specs())})"
            for n, m in zip(self.names, self.modules, strict=True)
        )
        messages = [
            {"role": "system", "content": "Choose the module for the request:\n" + menu},
            {"role": "user", "content": str(request)},
        ]
        self.count_llm_calls()
        resp = await self.llm.complete(
            messages,
            tools=[self.choose_schema()],
            tool_choice={"type": "function", "function": {"name": "choose_module"}},
            agent_id=agent_id,
            labels={"stage": "router", "router": self.kind, "iteration": 0},
        )
        choice = _chosen(resp, self.names)
        result = await self.inner[choice].route(request, agent_id=agent_id)
        # the second tier's work is this router's work (its own counters stay internal)
        self.count_llm_calls(result.llm_calls)
        self.stats.tool_calls += len(result.calls)
        result.plan = {"module": choice}
        result.router = self.kind
        if not result.ok and result.exception is not None:
            result.exception._agentlab_plan = result.plan  # type: ignore[attr-defined]
            raise result.exception
        return result


def _module_name(m: EnvBase, i: int) -> str:
    return str(getattr(m, "env_type", "") or type(m).__name__.lower() or f"module{i}")


def _chosen(resp: Any, names: list[str]) -> str:
    for tc in getattr(resp, "tool_calls", None) or []:
        args = tc.arguments
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = {}
        name = args.get("module") if isinstance(args, dict) else None
        if name in names:
            return str(name)
        raise ToolArgumentError(f"module {name!r} does not exist; choose one of {names}")
    text = (getattr(resp, "text", "") or "").strip().lower()
    for n in names:
        if n.lower() in text:
            return n
    raise ToolArgumentError(f"no module chosen; choose one of {names}")
