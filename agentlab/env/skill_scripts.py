"""Run an Agent Skill's script through the sandbox, with the skill's ``allowed-tools``.

A skill script (``scripts/*.py`` of a skill, :mod:`agentlab.agents.skills`) is treated like
generated code: it must be in the sandbox's Python subset (no import, def, class, try,
attribute access beyond the allow-list ...) and runs in :class:`~agentlab.env.sandbox.Sandbox`
with its :class:`~agentlab.env.sandbox.Limits`, through
:meth:`~agentlab.env.routers_codegen.CodeGenRouter.run_code` — with only the env tools the
skill's ``allowed-tools`` names callable. Anything else is refused before it runs:

- a script that is not Python (``.sh``, ``.js`` ...): the sandbox has no shell or other
  interpreter;
- a script that breaks the sandbox's rules (an ``import``, a ``def``, a name starting with
  ``_``, a tool outside ``allowed-tools`` ...): :class:`~agentlab.errors.UnsafeCodeError`
  naming the script.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from agentlab.env.base import EnvBase
from agentlab.env.codecheck import SAFE_BUILTINS, check_code
from agentlab.env.routers_base import RouteResult
from agentlab.env.routers_codegen import CodeGenRouter
from agentlab.env.sandbox import Limits
from agentlab.errors import AgentlabError, UnsafeCodeError

__all__ = ["check_skill_script", "run_skill_script", "script_runner"]


class _NoTools(EnvBase):
    """The env of a script run without one: builtins only."""


def _tools(env: EnvBase, allowed_tools: Iterable[str]) -> list[str]:
    have = env.tool_specs()
    return [t for t in dict.fromkeys(allowed_tools) if t in have]


def check_skill_script(
    code: str, *, path: str, allowed_tools: Iterable[str] = (), env: EnvBase | None = None,
    limits: Limits | None = None,
) -> None:  # fmt: skip
    """Refuse a script the sandbox would not run, naming it.

    Raises:
        UnsafeCodeError: not a Python script, or it breaks the sandbox's rules (including
            calling a tool outside ``allowed-tools``).
    """
    if not path.endswith(".py"):
        raise UnsafeCodeError(
            f"skill script {path}: only Python scripts in the sandbox's subset can run (the "
            "sandbox has no shell or other interpreter)"
        )
    callables = frozenset(_tools(env or _NoTools(), allowed_tools)) | SAFE_BUILTINS
    try:
        check_code(code, callables, limits or Limits())
    except UnsafeCodeError as exc:
        raise UnsafeCodeError(
            f"skill script {path} breaks the sandbox's rules: {exc} (callable tools: "
            f"{', '.join(sorted(callables - SAFE_BUILTINS)) or 'none'})"
        ) from None


async def run_skill_script(
    code: str,
    *,
    path: str,
    allowed_tools: Iterable[str] = (),
    env: EnvBase | None = None,
    agent_id: str | None = None,
    limits: Limits | None = None,
    isolation: str = "inline",
) -> RouteResult:
    """Check, then run ``code`` in the sandbox with the allowed tools of ``env``.

    Returns:
        the :class:`RouteResult` of the run (``ok``, ``value``, ``calls``, ``observation``;
        a failure at run time — a tool refused, a budget ran out — is ``ok=False``).

    Raises:
        UnsafeCodeError: refused before running (see :func:`check_skill_script`).
    """
    box = env or _NoTools()
    allowed = list(allowed_tools)
    check_skill_script(code, path=path, allowed_tools=allowed, env=box, limits=limits)
    router = CodeGenRouter(box, tools=_tools(box, allowed), limits=limits, isolation=isolation)
    try:
        result = await router.run_code(code, agent_id=agent_id)
    except AgentlabError as exc:  # a tool refused, a budget ran out: an observation
        result = router._failure(exc, "failed")
    result.router = "skill_script"
    return result


def script_runner(
    env: EnvBase | None = None,
    *,
    limits: Limits | None = None,
    isolation: str = "inline",
) -> Callable[[Any, str, str | None], Awaitable[RouteResult]]:
    """The hook an agent's skills use to run a skill's script (``SkillSet.script_runner``):
    ``await runner(skill, path, agent_id)`` runs ``skill.script(path)`` through
    :func:`run_skill_script` with the skill's ``allowed-tools`` of ``env`` (builtins only
    without an env) -- never any other way.

    Args:
        env: the env whose tools an allowed script may call.
        limits, isolation: the sandbox's (:class:`~agentlab.env.sandbox.Limits`, ``inline``
            or ``process``).
    """

    async def run(skill: Any, path: str, agent_id: str | None) -> RouteResult:
        return await run_skill_script(
            skill.script(path),
            path=skill.script_label(path),
            allowed_tools=skill.allowed_tools,
            env=env,
            agent_id=agent_id,
            limits=limits,
            isolation=isolation,
        )

    return run
