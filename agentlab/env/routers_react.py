"""The routers without a code step: :class:`DirectRouter` (a structured call, no LLM) and
:class:`ReActRouter` (a bounded tool-calling loop). Re-exported by
:mod:`agentlab.env.routers`; here so the routers built on ReAct (``plan``, ``two_tier``,
``search``) import it without importing the module that registers them.
"""

from __future__ import annotations

import json
from typing import Any

from agentlab.core.tools import run_tool_loop
from agentlab.env.base import EnvBase
from agentlab.env.routers_base import (
    LLMLike,
    Router,
    RouteResult,
    ToolArgumentError,
    _render,
)
from agentlab.errors import ToolError, UnknownNameError

__all__ = ["DirectRouter", "ReActRouter"]


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

        async def complete(i: int) -> Any:
            assert self.llm is not None
            self.count_llm_calls()
            return await self.llm.complete(
                messages,
                tools=schemas,
                agent_id=agent_id,
                labels={"stage": "router", "router": self.kind, "iteration": i},
            )

        async def call_tool(tc: Any) -> str:
            nonlocal value
            try:
                value = await self.call_tool(tc.name, tc.arguments, agent_id, calls)
                return _render(value, self.max_observation_chars)
            except (ToolError, UnknownNameError) as exc:
                # the model sees its mistake and may correct it in the next iteration
                if isinstance(exc, ToolArgumentError):
                    self.stats.rejections += 1
                else:
                    self.stats.errors += 1
                return f"error: {exc}"

        end = await run_tool_loop(
            messages,
            complete=complete,
            call_tool=call_tool,
            max_iterations=self.max_iterations,
            assistant_message=lambda resp, tcs: _assistant_message(
                getattr(resp, "text", "") or "", tcs
            ),
        )
        if end.answered:
            text = getattr(end.response, "text", "") or ""
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
