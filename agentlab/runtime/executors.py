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
from typing import TYPE_CHECKING, Any, Protocol

from agentlab.errors import ConfigError, UnknownNameError
from agentlab.runtime.batch import BatchResult, BatchSpec, step_agent_batch
from agentlab.runtime.config import ray_virtual_refusal, virtual_clock_refusal
from agentlab.runtime.envhost import ENV_CKPT_DIR, EnvHost, LocalEnvHandle, modules_from_specs
from agentlab.runtime.ray_executor import RayExecutor

if TYPE_CHECKING:
    from agentlab.runtime.services import RunServices

__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "RayExecutor", "make_executor"]


class Executor(Protocol):
    """Runs the batches of a tick and hosts the env: everything ``Society`` calls.

    Implemented by :class:`LocalExecutor` and :class:`RayExecutor` (also under the virtual
    clock, with its time server); mypy checks both against it (``make_executor`` returns
    them as ``Executor``).
    """

    name: str
    #: batch attempts lost to dead workers and run again since the driver last took them
    #: (one ``batch_failures`` row each; the driver clears the list once logged)
    lost: list[dict[str, Any]]

    def start_env(
        self, specs: list[Any], seed: int, run_dir: str, restore: list[str] | None
    ) -> Any:
        """Build (and optionally restore) the env; return the handle agents use."""
        ...

    async def run_batches(self, batches: list[BatchSpec], proxy: RunServices) -> list[BatchResult]:
        """Run every batch; results in batch order."""
        ...

    async def env_step(self, tick: int) -> list[dict[str, Any]]:
        """Step the env after ``tick``; return its drained events."""
        ...

    async def env_router_stats(self) -> dict[str, Any]:
        """The env routers' counters of the tick (``timeline.routers``; ``{}``: none)."""
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
        self._env_args: tuple[list[Any], str] | None = None
        self._env_tick: int | None = None  # None: holds the state start_env restored
        self._dirty = False  # a tick ran on the env since its last checkpoint
        #: always empty: no worker of an in-process executor can be lost
        self.lost: list[dict[str, Any]] = []

    def start_env(
        self, specs: list[Any], seed: int, run_dir: str, restore: list[str] | None
    ) -> LocalEnvHandle | None:
        if not specs:
            return None
        self._env_args = (specs, run_dir)
        self._env_tick, self._dirty = None, False
        return self._build_env(restore)

    def _build_env(self, restore: list[str] | None) -> LocalEnvHandle:
        assert self._env_args is not None
        specs, run_dir = self._env_args
        self.host = EnvHost(modules_from_specs(specs))
        if restore:
            self.host.restore(run_dir, restore)
        return LocalEnvHandle(self.host)

    async def run_batches(self, batches: list[BatchSpec], proxy: RunServices) -> list[BatchResult]:
        if not batches:
            return []
        committed = batches[0].committed
        if self.host is not None and (self._dirty or self._env_tick not in (None, committed)):
            # An earlier attempt of this tick failed after touching the env: start clean
            # from the committed checkpoint (the layout EnvHost.checkpoint writes).
            assert self._env_args is not None
            n = len(self._env_args[0])
            proxy.env = self._build_env([f"{ENV_CKPT_DIR}/{committed}/{i}.json" for i in range(n)])
            self._env_tick = committed
        self._dirty = self.host is not None
        sem = asyncio.Semaphore(self.max_batches)

        async def run(b: BatchSpec) -> BatchResult:
            async with sem:
                return await step_agent_batch(b, proxy)

        tasks = [asyncio.ensure_future(run(b)) for b in batches]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            # gather() leaves the siblings running: they would keep writing rows and
            # state after the caller gave the tick up. Stop them before re-raising.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def env_step(self, tick: int) -> list[dict[str, Any]]:
        return [] if self.host is None else await self.host.step(tick)

    async def env_router_stats(self) -> dict[str, Any]:
        """Router counters of the tick (``timeline.routers``)."""
        return {} if self.host is None else self.host.take_tick_stats()

    def env_checkpoint(self, run_dir: str, tick: int, publish: bool) -> list[str]:
        if self.host is None:
            return []
        paths = self.host.checkpoint(run_dir, tick)
        if publish:
            self.host.publish(run_dir, paths)
        self._env_tick, self._dirty = tick, False
        return paths

    def close(self) -> None:
        self.host = None


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
    """Virtual time needs the local executor's one event loop or the Ray time server."""
    if clock_name == "virtual" and executor.name not in ("local", "ray"):
        raise ConfigError(virtual_clock_refusal(executor.name))


def check_virtual(executor: str, meta: dict[str, Any]) -> None:
    """Refuse a virtual run (its ``SOCIETY.json`` ``meta``) on ``executor`` that could not
    be kept exact there (:func:`~agentlab.runtime.config.ray_virtual_refusal`)."""
    if executor == "ray":
        backoff = float((meta.get("retry") or {}).get("backoff_s", 0.0))
        why = ray_virtual_refusal(meta.get("llm"), meta.get("env") or [], backoff)
        if why:
            raise ConfigError(why)
    elif executor != "local":
        raise ConfigError(virtual_clock_refusal(executor))
