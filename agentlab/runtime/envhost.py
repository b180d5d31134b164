"""Hosting env modules for a society: in-process, or inside one Ray actor.

``EnvHost`` owns the modules of a run (``EnvBase`` instances), routes an agent's tool call
to the module that offers the tool, and takes per-tick checkpoints. Agents reach it
through an env *handle*: :class:`LocalEnvHandle` (same process; the local executor) or
:class:`RayEnvHandle` (a pickled actor handle; the Ray executor). Both cache the static
parts (tool schemas, world description) so only ``call``/``ask``/``observe`` cross the wire.

Natural-language requests (``ask``) go through the router each module names in its spec
(``{"type": ..., "router": "codegen"}``; see :mod:`agentlab.runtime.env_routing`).
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.errors import ConfigError, UnknownNameError
from agentlab.runtime.env_routing import RouterSet, attach_router, router_config_of
from agentlab.store.atomic import atomic_write_bytes

if TYPE_CHECKING:
    from agentlab.env.base import EnvBase
    from agentlab.runtime.services import RunServices

__all__ = [
    "EnvHost",
    "LocalEnvHandle",
    "RayEnvHandle",
    "build_env_modules",
    "checkpoint_files",
    "env_spec_of",
    "module_paths",
    "modules_from_specs",
]

ENV_CKPT_DIR = "env/ticks"
#: the routers' state of a tick (counters, the codegen cache), beside the modules' files
ROUTERS_FILE = "routers.json"


def checkpoint_files(root: str | os.PathLike[str], paths: list[str]) -> list[str]:
    """Every file of a tick's env checkpoint under ``root``: the modules' ``paths`` (as
    ``SOCIETY_STEP.json["env"]`` lists them) and, when the routers had state, their
    :data:`ROUTERS_FILE` beside them. What is copied when a checkpoint moves (the Ray env
    actor's bytes, a respawned actor, ``Society.fork``)."""
    if not paths:
        return []
    routers = (Path(paths[0]).parent / ROUTERS_FILE).as_posix()
    return [*paths, routers] if (Path(root) / routers).exists() else list(paths)


def module_paths(files: list[str]) -> list[str]:
    """The modules' paths among :func:`checkpoint_files` (what :meth:`EnvHost.restore` takes)."""
    return [rel for rel in files if Path(rel).name != ROUTERS_FILE]


def build_env_modules(specs: list[Any], seed: int) -> list[Any]:
    """Instantiate env modules from names, ``{"type": ..., **config}`` dicts or instances."""
    if not specs:
        return []
    from agentlab.env.base import EnvBase
    from agentlab.env.registry import create_env

    modules: list[Any] = []
    for i, spec in enumerate(specs):
        if isinstance(spec, EnvBase):
            spec.init(seed + i)
            modules.append(spec)
            continue
        if isinstance(spec, str):
            name, config = spec, {}
        elif isinstance(spec, dict) and "type" in spec:
            config = {k: v for k, v in spec.items() if k not in _ROUTER_KEYS}
            name = spec["type"]
        else:
            raise ConfigError(f"env spec {spec!r}: use a name, {{'type': name, ...}} or EnvBase")
        module = create_env(name, seed=seed + i, **config)
        if isinstance(spec, dict) and "router" in spec:
            attach_router(module, spec["router"], spec.get("router_options"))
        modules.append(module)
    return modules


_ROUTER_KEYS = ("type", "router", "router_options")


def env_spec_of(module: EnvBase) -> dict[str, Any]:
    """The JSON spec that rebuilds ``module`` (type, class reference, config, seed, and its
    router when not direct)."""
    from agentlab.env.registry import env_spec

    spec = env_spec(module)
    router = router_config_of(module)
    if router["kind"] != "direct":
        spec["router"], spec["router_options"] = router["kind"], router["options"]
    return spec


def modules_from_specs(specs: list[dict[str, Any]]) -> list[Any]:
    """Rebuild modules from :func:`env_spec_of` specs (``init(seed)`` done, not restored)."""
    if not specs:
        return []
    from agentlab.env.registry import env_from_spec

    modules = []
    for s in specs:
        m = env_from_spec(s)
        if s.get("router"):
            attach_router(m, s["router"], s.get("router_options"))
        modules.append(m)
    return modules


class EnvHost:
    """The env modules of one run plus a tool → module routing table."""

    def __init__(self, modules: list[Any]) -> None:
        self.modules = modules
        self._by_tool: dict[str, Any] = {}
        # One direct router per module (validation, refusals, counters) plus the configured
        # language router per module for ask().
        self.routing = RouterSet(modules)
        for m in modules:
            for name in m.tool_specs():
                if name in self._by_tool:
                    raise ConfigError(
                        f"tool {name!r} is offered by two env modules "
                        f"({type(self._by_tool[name]).__name__}, {type(m).__name__})"
                    )
                self._by_tool[name] = m
        self._schemas = [s for m in modules for s in m.tool_schemas()]
        self.calls = 0
        self.errors = 0

    # --- what agents use ---------------------------------------------------------------

    def tools(self) -> list[dict[str, Any]]:
        return self._schemas

    def describe(self) -> str:
        return " ".join(m.describe() for m in self.modules)

    async def call(self, agent_id: str, name: str, arguments: dict[str, Any], tick: int) -> Any:
        module = self._by_tool.get(name)
        self.calls += 1
        if module is None:
            self.errors += 1
            raise UnknownNameError("tool", name, list(self._by_tool))
        result = await self.routing.call(module, name, arguments, agent_id)
        if not result.ok:
            self.errors += 1
            result.raise_for_error()
        return result.value

    async def ask(
        self, agent_id: str, text: str, tick: int, services: RunServices, module: str | None = None
    ) -> dict[str, Any]:
        """A natural-language request through the configured router (recorded in
        ``env_requests``); returns ``RouteResult.to_dict()`` (``ok``, ``observation``...).

        Args:
            services: the run's ``ServiceProxy`` (its LLM client and log sink serve the
                router's LLM calls and the request row).
            module: the module to ask (needed only when several have language routers).
        """
        return await self.routing.ask(agent_id, text, tick, services, module)

    async def run_skill_script(
        self, agent_id: str, code: str, path: str, allowed_tools: list[str], tick: int,
        services: RunServices,
    ) -> dict[str, Any]:  # fmt: skip
        """An Agent Skill's script in the sandbox of this host (:meth:`RouterSet.run_skill_script`);
        returns ``RouteResult.to_dict()``.

        Raises:
            UnsafeCodeError: the script was refused (recorded in ``env_requests``).
        """
        return await self.routing.run_skill_script(
            agent_id, code, path, allowed_tools, tick, services
        )

    def router_stats(self) -> dict[str, int]:
        """Summed router counters (calls, tool_calls, rejections, errors...)."""
        total: dict[str, int] = {}
        for r in self.routing.routers():
            for k, v in r.stats.to_dict().items():
                total[k] = total.get(k, 0) + v
        return total

    def take_tick_stats(self) -> dict[str, Any]:
        """Router counters since the last call (the ``routers`` column of ``timeline``)."""
        return self.routing.take_tick_stats()

    async def observe(self, agent_id: str, tick: int) -> str:
        """What ``agent_id`` sees now: each module's ``observe(agent_id)`` if it has one,
        else its ``describe(agent_id)`` (world text plus the agent's status line)."""
        parts: list[str] = []
        for m in self.modules:
            fn = getattr(m, "observe", None) or m.describe
            out = fn(agent_id)
            if inspect.isawaitable(out):
                out = await out
            if out:
                parts.append(out if isinstance(out, str) else str(out))
        return "\n".join(parts)

    # --- what the driver uses ----------------------------------------------------------

    async def step(self, tick: int) -> list[dict[str, Any]]:
        """Step every module after ``tick`` and return the drained events."""
        events: list[dict[str, Any]] = []
        for m in self.modules:
            out = m.step(tick)
            if inspect.isawaitable(out):
                await out
            events.extend(m.drain_events())
        return events

    def checkpoint(self, run_dir: str, tick: int) -> list[str]:
        """Write each module's state for ``tick`` under ``env/ticks/<tick>/``."""
        paths = []
        for i, m in enumerate(self.modules):
            rel = f"{ENV_CKPT_DIR}/{tick}/{i}.json"
            m.to_workspace(run_dir, path=rel, fsync=False)
            paths.append(rel)
        routers = self.routing.state_dict()
        if routers is not None:  # next to the modules' files, so it commits with them
            state = {"calls": self.calls, "errors": self.errors, "routers": routers}
            atomic_write_bytes(
                Path(run_dir) / ENV_CKPT_DIR / str(tick) / ROUTERS_FILE,
                json.dumps(state, sort_keys=True).encode(),
                fsync=False,
            )
        self.routing.flush()  # env_requests rows of this process, before the commit
        return paths

    def restore(self, run_dir: str, paths: list[str]) -> None:
        """Load the checkpoint files written by :meth:`checkpoint`."""
        for m, rel in zip(self.modules, paths, strict=True):
            if not m.restore(run_dir, path=rel):
                raise ConfigError(f"env checkpoint {Path(run_dir) / rel} is missing")
        routers = Path(run_dir) / Path(paths[0]).parent / ROUTERS_FILE if paths else None
        if routers is not None and routers.exists():
            state = json.loads(routers.read_bytes())
            self.calls, self.errors = state["calls"], state["errors"]
            self.routing.load_state_dict(state["routers"])

    def publish(self, run_dir: str, paths: list[str]) -> list[Path]:
        """Also write each module's default state file (human-readable current state);
        returns the files written.

        ``paths``: the tick checkpoint :meth:`checkpoint` has just written, one file per
        module, holding the same record: a module that writes itself as
        ``EnvBase.to_workspace`` does gets those bytes copied rather than its state encoded a
        second time (the state grows with the run: a 1,000-agent ``social_feed`` reached
        3.9 MB by tick 100, ~70 us of an agent-step to encode). A module with its own
        ``to_workspace`` writes itself.
        """
        from agentlab.env.base import EnvBase

        out = []
        for m, rel in zip(self.modules, paths, strict=True):
            if type(m).to_workspace is EnvBase.to_workspace:
                target = m.state_file(run_dir)
                atomic_write_bytes(target, (Path(run_dir) / rel).read_bytes(), fsync=False)
                out.append(target)
            else:
                out.append(Path(m.to_workspace(run_dir, fsync=False)))
        return out

    def ping(self) -> bool:
        return True


class LocalEnvHandle:
    """An in-process env handle (not picklable across processes on purpose)."""

    def __init__(self, host: EnvHost) -> None:
        self.host = host
        # Static, like the Ray handle's copy: dynamic state reaches agents via observe().
        self._description = host.describe()

    def tools(self) -> list[dict[str, Any]]:
        return self.host.tools()

    def describe(self) -> str:
        return self._description

    async def call(self, agent_id: str, name: str, arguments: dict[str, Any], tick: int) -> Any:
        return await self.host.call(agent_id, name, arguments, tick)

    async def ask(
        self, agent_id: str, text: str, tick: int, services: RunServices, module: str | None = None
    ) -> dict[str, Any]:
        """:meth:`EnvHost.ask` in this process."""
        return await self.host.ask(agent_id, text, tick, services, module)

    async def run_skill_script(self, *args: Any) -> dict[str, Any]:
        """:meth:`EnvHost.run_skill_script` in this process."""
        return await self.host.run_skill_script(*args)

    async def observe(self, agent_id: str, tick: int) -> str:
        return await self.host.observe(agent_id, tick)


class RayEnvHandle:
    """A picklable handle on an ``EnvHost`` living in a Ray actor."""

    def __init__(self, actor: Any, tools: list[dict[str, Any]], description: str) -> None:
        self.actor = actor
        self._tools = tools
        self._description = description

    def tools(self) -> list[dict[str, Any]]:
        return self._tools

    def describe(self) -> str:
        return self._description

    async def call(self, agent_id: str, name: str, arguments: dict[str, Any], tick: int) -> Any:
        ok, value = await self.actor.call.remote(agent_id, name, arguments, tick)
        if not ok:
            raise value
        return value

    async def ask(
        self, agent_id: str, text: str, tick: int, services: RunServices, module: str | None = None
    ) -> dict[str, Any]:
        """:meth:`EnvHost.ask` in the env actor (errors come back as values, then raise)."""
        ok, value = await self.actor.ask.remote(agent_id, text, tick, services, module)
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    async def run_skill_script(self, *args: Any) -> dict[str, Any]:
        """:meth:`EnvHost.run_skill_script` in the env actor (a refusal raises here)."""
        ok, value = await self.actor.run_skill_script.remote(*args)
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    async def observe(self, agent_id: str, tick: int) -> str:
        return await self.actor.observe.remote(agent_id, tick)  # type: ignore[no-any-return]
