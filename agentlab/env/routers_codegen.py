"""The code-generating router: the LLM writes a snippet, the sandbox runs it.

:class:`CodeGenRouter` asks the LLM for a few lines of Python that call the env's tools,
and runs them — by default in a :class:`~agentlab.env.sandbox_pool.SandboxPool` worker
process (``isolation="process"``), so hostile code costs one request, never the host; the
tools run here and are called over the worker's pipe. Programs are cached per agent by
(request shape, tool signatures) (:class:`~agentlab.env.code_cache.CodeCache`): a program
the LLM wrote from one agent's prompt never runs as another agent.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any, ClassVar

from agentlab.core.clock import outside_loop
from agentlab.env.base import EnvBase
from agentlab.env.code_cache import CodeCache
from agentlab.env.routers_base import LLMLike, Router, RouteResult, ToolArgumentError, _render
from agentlab.env.sandbox import Limits, Sandbox, ToolFn
from agentlab.env.sandbox_pool import SandboxPool, default_pool
from agentlab.errors import AgentlabError, ConfigError, ToolError

__all__ = ["CodeGenRouter", "extract_code"]


_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str:
    """The first fenced code block of ``text``, or the whole text stripped."""
    m = _FENCE.search(text or "")
    return (m.group(1) if m else (text or "")).strip()


class CodeGenRouter(Router):
    """The LLM writes a short Python snippet calling the tools; it runs in the sandbox.

    Args:
        limits: sandbox budgets.
        cache_size: generated programs remembered by (agent, request shape, tool
            signatures) (0 disables).
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

    def state_dict(self) -> dict[str, Any]:
        """Counters and the code cache (a resumed run reuses the same programs)."""
        return {**super().state_dict(), "cache": self.cache.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        self.cache.load_state_dict(state["cache"])

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
        code = self.cache.get(text, sigs, agent_id)
        hit = code is not None
        if code is not None:
            self.stats.cache_hits += 1
        else:
            self.stats.cache_misses += 1
            if self.llm is None:
                raise ToolError("CodeGenRouter needs an llm")
            self.count_llm_calls()
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
            self.cache.put(text, sigs, code, agent_id)
        return result

    async def run_code(self, code: str, *, agent_id: str | None = None) -> RouteResult:
        """Run ``code`` in the sandbox with this router's tools (no LLM involved).

        Raises:
            UnsafeCodeError / ToolError: handled by :meth:`route`; raised when called directly.
        """
        calls: list[dict[str, Any]] = []

        def bind(name: str) -> ToolFn:
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
                # the worker runs in real time: under a virtual clock it must not move time
                async with outside_loop(self.clock):
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
