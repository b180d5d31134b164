"""The routers of a society's env host: which router serves ``env.ask``, and its run log.

Each env module names its router kind in the society config::

    Society.create(run, env=[{"type": "social_feed", "router": "codegen",
                              "router_options": {"cache_size": 64}}])

(``direct`` when absent; ``react``, ``codegen``, ``plan``; modules marked ``two_tier`` share
one :class:`~agentlab.env.routers_plan.TwoTierRouter`). Direct tool calls
(``services.env.call``) always take the module's :class:`DirectRouter`;
natural-language requests (``services.env.ask``) take the configured router, whose LLM calls
go through the run's recording client (``llm_calls`` rows with ``stage = 'router'``, the
asking agent and tick). Every ``ask`` is one ``env_requests`` row; the summed counters of
each tick go into the ``routers`` column of ``timeline``.
"""

from __future__ import annotations

import contextvars
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentlab.errors import ConfigError, UnknownNameError

if TYPE_CHECKING:
    from agentlab.core.records import LLMResponse
    from agentlab.env.base import EnvBase
    from agentlab.env.routers_base import RouteResult
    from agentlab.runtime.services import RunServices

__all__ = ["ROUTER_ATTR", "ROUTER_KINDS", "RouterSet", "attach_router", "router_config_of"]

#: attribute of an env module instance carrying its router config
ROUTER_ATTR = "_agentlab_router"
ROUTER_KINDS = ("direct", "react", "codegen", "plan", "two_tier", "search")
_TEXT_LIMIT = 4000


@dataclass
class _Counter:
    """What ``RecordingLLM.complete(counter=...)`` increments, for one request."""

    llm_calls: int = 0
    llm_errors: int = 0
    latency_us: int = 0
    tokens: int = 0


_REQUEST: contextvars.ContextVar[tuple[int, _Counter]] = contextvars.ContextVar("env_request")


def attach_router(
    module: EnvBase, kind: str | None, options: dict[str, Any] | None = None
) -> EnvBase:
    """Mark ``module`` to be served by a ``kind`` router (``None``: direct)."""
    kind = kind or "direct"
    if kind not in ROUTER_KINDS:
        raise UnknownNameError("router", kind, list(ROUTER_KINDS))
    if options is not None and not isinstance(options, dict):
        raise ConfigError(f"router_options must be a dict, got {type(options).__name__}")
    setattr(module, ROUTER_ATTR, {"kind": kind, "options": dict(options or {})})
    return module


def router_config_of(module: EnvBase) -> dict[str, Any]:
    """``{"kind", "options"}`` of ``module`` (direct when never attached)."""
    cfg = getattr(module, ROUTER_ATTR, None)
    return dict(cfg) if cfg else {"kind": "direct", "options": {}}


class _RouterLLM:
    """The run's recording LLM, labelled with the asking agent's tick (a context var)."""

    def __init__(self, services: RunServices) -> None:
        self.services = services

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        agent_id: str | None = None,
        labels: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> LLMResponse:
        tick, counter = _REQUEST.get((None, None))  # type: ignore[arg-type]
        labels = {**(labels or {}), "tick": tick}
        return await self.services.llm.complete(
            messages, agent_id=agent_id, labels=labels, tick=tick, counter=counter, **kwargs
        )


class RouterSet:
    """Routers of the host's modules (LLM routers built on the first ``ask``)."""

    def __init__(self, modules: list[Any]) -> None:
        from agentlab.env.routers import DirectRouter

        self.modules = modules
        self.names = _module_names(modules)
        self.direct = {id(m): DirectRouter(m) for m in modules}
        self.configs = [router_config_of(m) for m in modules]
        self._asking: dict[str, Any] | None = None
        self._group: Any = None
        self._services: Any = None
        self._tick: dict[str, dict[str, Any]] = {}
        self._pending: dict[str, Any] | None = None  # restored state of unbuilt routers
        #: failed direct tool calls by ``"tool: ErrorClass"`` (whole run, this process)
        self.call_errors: Counter[str] = Counter()

    # --- building ------------------------------------------------------------------------

    def _build(self, services: Any) -> None:
        from agentlab.env.routers import make_router

        llm = _RouterLLM(services)
        self._services = services
        self._asking = {}
        group = []
        for name, m, cfg in zip(self.names, self.modules, self.configs, strict=True):
            if cfg["kind"] == "two_tier":
                group.append(m)
            elif cfg["kind"] == "direct":
                self._asking[name] = self.direct[id(m)]
            else:
                self._asking[name] = make_router(cfg["kind"], m, llm=llm, **cfg["options"])
        if group:
            opts = next(c["options"] for c in self.configs if c["kind"] == "two_tier")
            self._group = make_router("two_tier", group, llm=llm, **opts)
        self._load_pending()

    def _pick(self, module: str | None) -> tuple[str, Any]:
        assert self._asking is not None
        if module is not None:
            if module in self._asking:
                return module, self._asking[module]
            if self._group is not None and module in self._group.names:
                return module, self._group
            raise UnknownNameError("env module", module, self.names)
        if self._group is not None:
            return "two_tier", self._group
        llm_routed = [n for n, c in zip(self.names, self.configs, strict=True)
                      if c["kind"] != "direct"]  # fmt: skip
        if len(llm_routed) == 1:
            return llm_routed[0], self._asking[llm_routed[0]]
        if len(self.names) == 1:
            return self.names[0], self._asking[self.names[0]]
        raise ConfigError(
            f"env.ask() needs module= when {len(llm_routed)} modules have language routers; "
            f"modules: {self.names}"
        )

    def routers(self) -> list[Any]:
        """Every router built so far (direct ones, then language routers), once each."""
        found = [*self.direct.values(), *(self._asking or {}).values()]
        if self._group is not None:
            found.append(self._group)
        return list({id(r): r for r in found}.values())

    # --- serving -------------------------------------------------------------------------

    async def call(
        self, module: EnvBase, name: str, arguments: dict[str, Any], agent_id: str
    ) -> RouteResult:
        """A direct tool call through the module's :class:`DirectRouter`."""
        result = await self.direct[id(module)].route(
            {"tool": name, "arguments": arguments}, agent_id=agent_id
        )
        self._count("direct", result)
        if not result.ok:
            self.call_errors[f"{name}: {result.error_type}"] += 1
        return result

    async def ask(
        self, agent_id: str, text: str, tick: int, services: RunServices, module: str | None = None
    ) -> dict[str, Any]:
        """Route a natural-language request; record it; return ``RouteResult.to_dict()``."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"env.ask() needs a non-empty request text, got {text!r:.80}")
        if self._asking is None:
            self._build(services)
        where, router = self._pick(module)
        if router.clock is None:  # sandbox waits must not move the run's virtual clock
            router.bind_clock(services.clock)
        counter = _Counter()
        token = _REQUEST.set((tick, counter))
        t0 = time.perf_counter()
        try:
            result = await router.route(text, agent_id=agent_id)
        finally:
            _REQUEST.reset(token)
        latency = time.perf_counter() - t0
        self._count(router.kind, result)
        out = result.to_dict()
        self._record(agent_id, tick, where, text, result, out, counter, latency)
        return out

    async def run_skill_script(
        self,
        agent_id: str,
        code: str,
        path: str,
        allowed_tools: list[str],
        tick: int,
        services: RunServices,
    ) -> dict[str, Any]:
        """Run an Agent Skill's script here, where the env lives: through the sandbox with
        the tools of the skill's ``allowed-tools`` (:func:`~agentlab.env.skill_scripts.
        run_skill_script`), with the sandbox limits and isolation of the module's
        ``codegen`` router options if it has them. The module is the one offering most of
        the allowed tools (a script calls the tools of one module). One ``env_requests``
        row (``router = 'skill_script'``), counted in ``timeline.routers``.

        Raises:
            UnsafeCodeError: the script was refused (recorded first).
        """
        from agentlab.env.routers_base import RouteResult
        from agentlab.env.sandbox import Limits
        from agentlab.env.skill_scripts import run_skill_script
        from agentlab.errors import UnsafeCodeError

        if self._asking is None:
            self._build(services)
        module = max(
            self.modules, default=None, key=lambda m: len(set(allowed_tools) & set(m.tool_specs()))
        )
        opts = router_config_of(module)["options"] if module is not None else {}
        limits = opts.get("limits")
        where = self.names[self.modules.index(module)] if module is not None else "-"
        t0 = time.perf_counter()
        try:
            result = await run_skill_script(
                code,
                path=path,
                allowed_tools=allowed_tools,
                env=module,
                agent_id=agent_id,
                limits=Limits(**limits) if isinstance(limits, dict) else limits,
                isolation=opts.get("isolation", "inline"),
            )
        except UnsafeCodeError as exc:  # refused before running: recorded, then raised
            refused = RouteResult(
                ok=False, error=str(exc), error_type=type(exc).__name__, text=f"error: {exc}"
            )
            self._log_script(agent_id, tick, where, path, code, refused, t0)
            raise
        return self._log_script(agent_id, tick, where, path, code, result, t0)

    def _log_script(
        self, agent_id: str, tick: int, where: str, path: str, code: str, result: Any, t0: float
    ) -> dict[str, Any]:
        result.code, result.router = code, "skill_script"
        self._count("skill_script", result)
        out: dict[str, Any] = result.to_dict()
        self._record(agent_id, tick, where, path, result, out, _Counter(), time.perf_counter() - t0)
        return out

    def _count(self, kind: str, result: Any) -> None:
        s = self._tick.setdefault(kind, {})
        for key, inc in (
            ("requests", 1),
            ("ok", int(result.ok)),
            ("tool_calls", len(result.calls)),
            ("llm_calls", result.llm_calls),
            ("rejections", int(not result.ok and result.error_type in _REJECTED)),
            ("errors", int(not result.ok and result.error_type not in _REJECTED)),
            ("cache_hits", int(result.cache_hit is True)),
            ("cache_misses", int(result.cache_hit is False)),
        ):
            s[key] = s.get(key, 0) + inc
        found = getattr(result, "search", None)  # the search router's retrieval
        if found is not None:
            for key, inc in (("search_hits", found["hit"]), ("search_misses", not found["hit"]),
                             ("search_top1", found["top1"])):  # fmt: skip
                s[key] = s.get(key, 0) + int(inc)
            if found["chosen"] is not None:  # which tools the model picked, by name
                chosen = s.setdefault("search_chosen", {})
                chosen[found["chosen"]] = chosen.get(found["chosen"], 0) + 1

    def _record(
        self,
        agent_id: str,
        tick: int,
        module: str,
        text: str,
        result: Any,
        out: dict[str, Any],
        counter: _Counter,
        latency: float,
    ) -> None:
        services = self._services
        if services is None:
            return
        outcome = "ok" if result.ok else (
            "rejected" if result.error_type in _REJECTED else "failed"
        )  # fmt: skip
        services.replay.append(
            "env_requests",
            {
                "run_id": services.run_id,
                "tick": tick,
                "agent_id": agent_id,
                "router": result.router,
                "module": module,
                "request": text[:_TEXT_LIMIT],
                "code": result.code,
                "plan": out.get("plan"),
                "tool_calls": [
                    {k: c.get(k) for k in ("tool", "arguments", "ok", "error")}
                    for c in out["calls"]
                ],
                "n_tool_calls": len(result.calls),
                "ok": result.ok,
                "outcome": outcome,
                "error_type": result.error_type,
                "error": (result.error or "")[:_TEXT_LIMIT] or None,
                "observation": out["observation"][:_TEXT_LIMIT],
                "llm_calls": counter.llm_calls,
                "tokens": counter.tokens,
                "cache_hit": result.cache_hit,
                "latency_s": latency,
            },
        )

    def state_dict(self) -> dict[str, Any] | None:
        """The routers' counters and learned state (the codegen cache), or ``None`` while no
        language router has been built (nothing to keep beyond the direct counters)."""
        if self._asking is None:
            return None
        return {
            "schema_version": 1,
            "direct": [self.direct[id(m)].state_dict() for m in self.modules],
            "asking": {name: r.state_dict() for name, r in self._asking.items()},
            "group": self._group.state_dict() if self._group is not None else None,
            "call_errors": dict(self.call_errors),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the language routers get theirs when built."""
        for m, st in zip(self.modules, state["direct"], strict=True):
            self.direct[id(m)].load_state_dict(st)
        self.call_errors = Counter(state["call_errors"])
        self._pending = state

    def _load_pending(self) -> None:
        state, self._pending = self._pending, None
        if state is None or self._asking is None:
            return
        direct = {id(r) for r in self.direct.values()}
        for name, st in state["asking"].items():
            router = self._asking.get(name)
            if router is not None and id(router) not in direct:  # direct ones: loaded
                router.load_state_dict(st)
        if self._group is not None and state["group"] is not None:
            self._group.load_state_dict(state["group"])

    def take_tick_stats(self) -> dict[str, Any]:
        """Counters since the last call, summed and ``by_kind`` (for the timeline)."""
        by_kind, self._tick = self._tick, {}
        total: dict[str, Any] = {}
        for s in by_kind.values():
            for k, v in s.items():
                if isinstance(v, dict):  # per-name counts (search_chosen)
                    into = total.setdefault(k, {})
                    for name, n in v.items():
                        into[name] = into.get(name, 0) + n
                else:
                    total[k] = total.get(k, 0) + v
        return {**total, "by_kind": by_kind}

    def flush(self) -> None:
        """Make this process's ``env_requests`` rows durable (the Ray actor's own sink)."""
        if self._services is not None:
            self._services.flush()


_REJECTED = frozenset({"ToolArgumentError", "UnsafeCodeError", "UnknownNameError"})


def _module_names(modules: list[Any]) -> list[str]:
    names = [str(getattr(m, "env_type", "") or type(m).__name__.lower()) for m in modules]
    if len(set(names)) != len(names):
        names = [f"{n}_{i}" for i, n in enumerate(names)]
    return names
