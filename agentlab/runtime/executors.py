"""Executors: where the batches of a tick run and where the env lives.

* :class:`LocalExecutor` — batches are coroutines in the caller's event loop (bounded
  concurrency), the env is an in-process :class:`EnvHost`. Works with ``VirtualClock``.
* :class:`RayExecutor` — batches are Ray tasks (one CPU each, at most ``max_workers`` in
  flight; default the cluster's CPUs or ``AGENTLAB_RAY_MAX_WORKERS``), the env is one Ray
  actor that agents reach through a picklable handle. ``address=`` joins a cluster.

Both return the same results for the same seed: per-agent randomness derives from
``(seed, agent_id, tick)``, never from execution order.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Protocol

from agentlab.errors import ConfigError, UnknownNameError
from agentlab.runtime.batch import BatchResult, BatchSpec, run_batch_blocking, step_agent_batch
from agentlab.runtime.envhost import EnvHost, LocalEnvHandle, RayEnvHandle, modules_from_specs

__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "RayExecutor", "make_executor"]


class Executor(Protocol):
    """Runs the batches of a tick and hosts the env."""

    name: str

    def start_env(
        self, specs: list[Any], seed: int, run_dir: str, restore: list[str] | None
    ) -> Any:
        """Build (and optionally restore) the env; return the handle agents use."""
        ...

    async def run_batches(self, batches: list[BatchSpec], proxy: Any) -> list[BatchResult]:
        """Run every batch; results in batch order."""
        ...

    async def env_step(self, tick: int) -> list[dict[str, Any]]:
        """Step the env after ``tick``; return its drained events."""
        ...

    def env_checkpoint(self, run_dir: str, tick: int, publish: bool) -> list[str]:
        """Write the env state of ``tick``; return the checkpoint paths."""
        ...

    def close(self) -> None:
        """Release resources (the env actor)."""
        ...


class LocalExecutor:
    """Asyncio in-process executor.

    Args:
        max_batches: batches in flight at once (``AGENTLAB_LOCAL_MAX_BATCHES``, default 8):
            enough concurrency to keep a simulated server busy without loading every
            agent of a 100k society into memory at once.
    """

    name = "local"

    def __init__(self, max_batches: int | None = None) -> None:
        self.max_batches = max_batches or int(os.environ.get("AGENTLAB_LOCAL_MAX_BATCHES", 8))
        self.host: EnvHost | None = None

    def start_env(
        self, specs: list[Any], seed: int, run_dir: str, restore: list[str] | None
    ) -> LocalEnvHandle | None:
        if not specs:
            return None
        self.host = EnvHost(modules_from_specs(specs))
        if restore:
            self.host.restore(run_dir, restore)
        return LocalEnvHandle(self.host)

    async def run_batches(self, batches: list[BatchSpec], proxy: Any) -> list[BatchResult]:
        sem = asyncio.Semaphore(self.max_batches)

        async def run(b: BatchSpec) -> BatchResult:
            async with sem:
                return await step_agent_batch(b, proxy)

        return list(await asyncio.gather(*(run(b) for b in batches)))

    async def env_step(self, tick: int) -> list[dict[str, Any]]:
        return [] if self.host is None else await self.host.step(tick)

    def env_checkpoint(self, run_dir: str, tick: int, publish: bool) -> list[str]:
        if self.host is None:
            return []
        paths = self.host.checkpoint(run_dir, tick)
        if publish:
            self.host.publish(run_dir)
        return paths

    def close(self) -> None:
        self.host = None


class _EnvActor:
    """Body of the Ray env actor: an :class:`EnvHost` built inside the actor."""

    def __init__(self, specs: list[Any], seed: int, run_dir: str, restore: list[str] | None):
        self.host = EnvHost(modules_from_specs(specs))
        if restore:
            self.host.restore(run_dir, restore)

    def info(self) -> tuple[list[dict[str, Any]], str]:
        return self.host.tools(), self.host.describe()

    async def call(
        self, agent_id: str, name: str, arguments: dict[str, Any], tick: int
    ) -> tuple[bool, Any]:
        # Errors come back as values: a raised error would reach the agent wrapped in a
        # RayTaskError whose message (with a traceback) differs from the local executor's.
        try:
            return True, await self.host.call(agent_id, name, arguments, tick)
        except Exception as exc:
            return False, exc

    async def observe(self, agent_id: str, tick: int) -> str:
        return await self.host.observe(agent_id, tick)

    async def step(self, tick: int) -> list[dict[str, Any]]:
        return await self.host.step(tick)

    def checkpoint(self, run_dir: str, tick: int, publish: bool) -> list[str]:
        paths = self.host.checkpoint(run_dir, tick)
        if publish:
            self.host.publish(run_dir)
        return paths


_REMOTE: dict[str, Any] = {}


def _remote(ray: Any) -> tuple[Any, Any]:
    if "task" not in _REMOTE:
        _REMOTE["task"] = ray.remote(num_cpus=1, max_retries=0)(run_batch_blocking)
        _REMOTE["actor"] = ray.remote(num_cpus=0)(_EnvActor)
    return _REMOTE["task"], _REMOTE["actor"]


class RayExecutor:
    """Ray executor (see the module docstring).

    Args:
        address: a cluster address for ``ray.init`` (``None``: reuse the running Ray or
            start a local one).
        max_workers: batch tasks in flight (default ``AGENTLAB_RAY_MAX_WORKERS`` or the
            cluster's CPU count).
    """

    name = "ray"

    def __init__(self, address: str | None = None, max_workers: int | None = None) -> None:
        from agentlab.runtime.ray_init import ensure_ray

        self.ray = ray = ensure_ray(address)
        env_max = os.environ.get("AGENTLAB_RAY_MAX_WORKERS")
        cpus = int(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
        self.max_workers = max_workers or (int(env_max) if env_max else max(1, cpus))
        self.actor: Any = None

    def start_env(
        self, specs: list[Any], seed: int, run_dir: str, restore: list[str] | None
    ) -> RayEnvHandle | None:
        if not specs:
            return None
        _, actor_cls = _remote(self.ray)
        self.actor = actor_cls.remote(specs, seed, run_dir, restore)
        tools, description = self.ray.get(self.actor.info.remote())
        return RayEnvHandle(self.actor, tools, description)

    async def run_batches(self, batches: list[BatchSpec], proxy: Any) -> list[BatchResult]:
        task, _ = _remote(self.ray)
        proxy_ref = self.ray.put(proxy)
        results: dict[int, BatchResult] = {}
        pending: dict[Any, int] = {}
        todo = list(enumerate(batches))
        while todo or pending:
            while todo and len(pending) < self.max_workers:
                i, b = todo.pop(0)
                pending[task.remote(b, proxy_ref)] = i
            done, _ = await asyncio.to_thread(
                self.ray.wait, list(pending), num_returns=1, timeout=None
            )
            for ref in done:
                results[pending.pop(ref)] = await ref
        return [results[i] for i in range(len(batches))]

    async def env_step(self, tick: int) -> list[dict[str, Any]]:
        if self.actor is None:
            return []
        return await self.actor.step.remote(tick)  # type: ignore[no-any-return]

    def env_checkpoint(self, run_dir: str, tick: int, publish: bool) -> list[str]:
        if self.actor is None:
            return []
        return self.ray.get(self.actor.checkpoint.remote(run_dir, tick, publish))  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.actor is not None:
            self.ray.kill(self.actor)
            self.actor = None


EXECUTORS = ("local", "ray")


def make_executor(name: str | Executor, **options: Any) -> Executor:
    """``"local"`` / ``"ray"`` (with options such as ``address=``) or an executor object."""
    if not isinstance(name, str):
        return name
    if name == "local":
        return LocalExecutor(**options)
    if name == "ray":
        return RayExecutor(**options)
    raise UnknownNameError("executor", name, list(EXECUTORS))


def check_clock(executor: Executor, clock_name: str) -> None:
    """Virtual time needs every waiter in one event loop: local executor only."""
    if clock_name == "virtual" and executor.name != "local":
        raise ConfigError(
            f"clock 'virtual' needs executor 'local', got {executor.name!r}; use clock='real'"
        )
