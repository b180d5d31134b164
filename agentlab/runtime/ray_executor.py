"""``RayExecutor``: batches as Ray tasks, the env in one Ray actor, failures survived.

Every batch task is *staged* (``runtime/staging.py``): it writes nothing into the run
directory and returns its log bytes and state writes, which the driver commits when it
accepts the result. That makes failures safe to retry:

* a worker or node dies mid-batch (``WorkerCrashedError``, ``NodeDiedError``...): the other
  tasks of the tick are cancelled with ``force=True`` and drained (best effort, bounded by
  ``drain_timeout_s``), the batches this tick already committed are cut back out of the
  log, the env actor is restarted from the committed checkpoint (the lost attempt's tool
  calls may have reached it) and the tick runs again, up to ``max_attempts`` times.
  Without an env the batches are independent, so only the lost batch runs again.
  A task that could not be confirmed stopped (a partitioned node) cannot hurt: it only
  ever writes into its own staging area and into the old, killed env actor.
* the env actor dies: :class:`~agentlab.errors.EnvActorDiedError`, nothing of the tick is
  committed; ``Society.open`` (or stepping again) restarts it from the checkpoint.

Each lost attempt is recorded in :attr:`RayExecutor.lost` (the driver logs it).
"""

from __future__ import annotations

import asyncio
import os
import time
import warnings
from collections import deque
from pathlib import Path
from typing import Any

from agentlab.errors import EnvActorDiedError, WorkerLostError
from agentlab.runtime.batch import BatchResult, BatchSpec
from agentlab.runtime.envhost import ENV_CKPT_DIR, EnvHost, RayEnvHandle, modules_from_specs
from agentlab.runtime.staging import Promoted, StagedBatch, run_staged_batch

__all__ = ["RayExecutor"]

#: Ray errors that mean "the process running the task is gone", not "the task failed"
_LOST_NAMES = (
    "WorkerCrashedError",
    "NodeDiedError",
    "TaskCancelledError",
    "ObjectLostError",
    "LocalRayletDiedError",
    "OutOfMemoryError",
)


class _EnvActor:
    """Body of the Ray env actor: an :class:`EnvHost` built inside the actor."""

    def __init__(
        self, specs: list[Any], seed: int, run_dir: str, restore: list[str] | None
    ) -> None:
        self.host = EnvHost(modules_from_specs(specs))
        if restore:
            self.host.restore(run_dir, restore)

    def info(self) -> tuple[list[dict[str, Any]], str]:
        return self.host.tools(), self.host.describe()

    def ping(self) -> int:
        return os.getpid()

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

    async def ask(
        self, agent_id: str, text: str, tick: int, services: Any, module: str | None
    ) -> tuple[bool, Any]:
        try:  # errors as values, as call() does
            return True, await self.host.ask(agent_id, text, tick, services, module)
        except Exception as exc:
            return False, exc

    def take_tick_stats(self) -> dict[str, Any]:
        return self.host.take_tick_stats()

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
        # max_retries=0: a re-execution by Ray would be an attempt the driver cannot fence.
        _REMOTE["task"] = ray.remote(num_cpus=1, max_retries=0)(run_staged_batch)
        _REMOTE["actor"] = ray.remote(num_cpus=0, max_restarts=0)(_EnvActor)
    return _REMOTE["task"], _REMOTE["actor"]


class _TickLost(Exception):
    def __init__(self, batch: int, cause: BaseException) -> None:
        super().__init__(f"batch {batch}: {type(cause).__name__}: {cause}")
        self.batch, self.cause = batch, cause


class RayExecutor:
    """Ray executor (see the module docstring).

    Args:
        address: a cluster address for ``ray.init`` (``None``: reuse the running Ray or
            start a local one).
        max_workers: batch tasks in flight (default ``AGENTLAB_RAY_MAX_WORKERS`` or the
            cluster's CPU count).
        max_attempts: runs of a tick (or, without an env, of a batch) when workers die.
        drain_timeout_s: how long to wait for cancelled tasks to end before retrying.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        max_workers: int | None = None,
        max_attempts: int = 3,
        drain_timeout_s: float = 30.0,
    ) -> None:
        from agentlab.runtime.ray_init import ensure_ray

        self.ray = ray = ensure_ray(address)
        env_max = os.environ.get("AGENTLAB_RAY_MAX_WORKERS")
        cpus = int(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
        self.max_workers = max_workers or (int(env_max) if env_max else max(1, cpus))
        self.max_attempts = max(1, int(max_attempts))
        self.drain_timeout_s = float(drain_timeout_s)
        self.actor: Any = None
        #: one dict per lost attempt: tick, batch, attempt, error_class, error, ts
        self.lost: list[dict[str, Any]] = []
        self._env_args: tuple[list[Any], int, str] | None = None
        self._env_tick: int | None = None  # None: holds the state start_env restored
        self._dirty = False  # a tick ran on the env since its last checkpoint
        self._promoted: Promoted | None = None
        self._lost_names = tuple(getattr(ray.exceptions, n) for n in _LOST_NAMES)

    # --- env actor ---------------------------------------------------------------------

    def start_env(
        self, specs: list[Any], seed: int, run_dir: str, restore: list[str] | None
    ) -> RayEnvHandle | None:
        if not specs:
            return None
        self._env_args = (specs, seed, run_dir)
        self._env_tick, self._dirty = None, False
        return self._spawn_env(restore)

    def _spawn_env(self, restore: list[str] | None) -> RayEnvHandle:
        assert self._env_args is not None
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        _, actor_cls = _remote(self.ray)
        options: dict[str, Any] = {}
        try:
            # On the driver's node: a worker node that dies must not take the env with it.
            node = self.ray.get_runtime_context().get_node_id()
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=True)
        except Exception:  # a Ray client driver has no node of its own: Ray decides
            pass
        self.actor = actor_cls.options(**options).remote(*self._env_args, restore)
        try:
            tools, description = self.ray.get(self.actor.info.remote())
        except self.ray.exceptions.RayActorError as exc:
            raise self._env_died("starting", None, exc) from exc
        return RayEnvHandle(self.actor, tools, description)

    def _env_died(self, when: str, tick: int | None, exc: BaseException) -> EnvActorDiedError:
        run = self._env_args[2] if self._env_args else "the run"
        at = f" during tick {tick}" if tick is not None else ""
        reason = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")[:300]
        return EnvActorDiedError(
            f"the env actor {self._actor_id()} died {when}{at} ({type(exc).__name__}: "
            f"{reason}); "
            f"nothing of the tick was committed. Resume with Society.open({run!r}) or step "
            "again: the env restarts from its last committed checkpoint"
        )

    def _actor_id(self) -> str:
        try:
            return str(self.actor._actor_id.hex())
        except AttributeError:
            return "?"

    async def _restart_env(self, proxy: Any, committed: int) -> None:
        assert self._env_args is not None
        old, self.actor = self.actor, None
        if old is not None:
            try:
                self.ray.kill(old, no_restart=True)
            except Exception:  # already dead
                pass
        n = len(self._env_args[0])
        # The layout EnvHost.checkpoint and Society.create write.
        restore = [f"{ENV_CKPT_DIR}/{committed}/{i}.json" for i in range(n)]
        for attempt in range(1, 4):
            try:
                proxy.env = await asyncio.to_thread(self._spawn_env, restore)
                break
            except EnvActorDiedError:
                # A node leaving the cluster can take a creation in flight with it.
                if attempt == 3:
                    raise
                await asyncio.sleep(1.0 * attempt)
        self._env_tick, self._dirty = committed, False

    async def env_step(self, tick: int) -> list[dict[str, Any]]:
        if self.actor is None:
            return []
        try:
            return await self.actor.step.remote(tick)  # type: ignore[no-any-return]
        except self.ray.exceptions.RayActorError as exc:
            raise self._env_died("in env.step", tick, exc) from exc

    async def env_router_stats(self) -> dict[str, Any]:
        """Router counters of the tick, from the env actor (``timeline.routers``)."""
        if self.actor is None:
            return {}
        try:
            return await self.actor.take_tick_stats.remote()  # type: ignore[no-any-return]
        except self.ray.exceptions.RayActorError as exc:
            raise self._env_died("reading router counters", None, exc) from exc

    def env_checkpoint(self, run_dir: str, tick: int, publish: bool) -> list[str]:
        if self.actor is None:
            return []
        try:
            paths: list[str] = self.ray.get(self.actor.checkpoint.remote(run_dir, tick, publish))
        except self.ray.exceptions.RayActorError as exc:
            raise self._env_died("writing its checkpoint", tick, exc) from exc
        self._env_tick, self._dirty = tick, False
        return paths

    def close(self) -> None:
        if self.actor is not None:
            try:
                self.ray.kill(self.actor)
            except Exception:  # already dead
                pass
            self.actor = None

    # --- batches -----------------------------------------------------------------------

    async def run_batches(self, batches: list[BatchSpec], proxy: Any) -> list[BatchResult]:
        if not batches:
            return []
        tick, committed = batches[0].tick, batches[0].committed
        if self._promoted is None or self._promoted.run_dir != Path(proxy.run_dir):
            self._promoted = Promoted(proxy.run_dir)
        promoted = self._promoted
        if self.actor is not None and (self._dirty or self._env_tick not in (None, committed)):
            # An earlier attempt of this tick failed after touching the env: start clean.
            await self._restart_env(proxy, committed)
        for attempt in range(1, self.max_attempts + 1):
            self._dirty = self.actor is not None
            promoted.begin()
            try:
                results = await self._attempt(batches, proxy)
                if self.actor is not None:
                    await self._check_env(tick)
                return results
            except _TickLost as lost:
                promoted.rollback()
                self._record(tick, lost.batch, attempt, lost.cause)
                if attempt == self.max_attempts or self._env_args is None:
                    raise WorkerLostError(
                        f"tick {tick}: batch {lost.batch} lost its Ray worker on all "
                        f"{self.max_attempts} attempts (last: {type(lost.cause).__name__}: "
                        f"{lost.cause}); nothing of the tick was committed"
                    ) from lost.cause
                await self._restart_env(proxy, committed)
            except BaseException:
                promoted.rollback()
                raise
        raise AssertionError("unreachable")

    async def _check_env(self, tick: int) -> None:
        # An env actor that died mid-tick turned every later tool call into an agent error;
        # such an attempt must not be committed.
        try:
            await self.actor.ping.remote()
        except self.ray.exceptions.RayActorError as exc:
            raise self._env_died("mid-tick", tick, exc) from exc

    async def _attempt(self, batches: list[BatchSpec], proxy: Any) -> list[BatchResult]:
        """One run of the tick; raises :class:`_TickLost` when it must start over."""
        ray = self.ray
        task, _ = _remote(ray)
        proxy_ref = ray.put(proxy)
        assert self._promoted is not None
        results: dict[int, BatchResult] = {}
        runs = [0] * len(batches)
        todo = deque(range(len(batches)))
        pending: dict[Any, int] = {}
        try:
            while todo or pending:
                while todo and len(pending) < self.max_workers:
                    i = todo.popleft()
                    runs[i] += 1
                    pending[task.remote(batches[i], proxy_ref)] = i
                done, _ = await asyncio.to_thread(
                    ray.wait, list(pending), num_returns=1, timeout=None
                )
                for ref in done:
                    i = pending.pop(ref)
                    try:
                        staged: StagedBatch = await ref
                    except self._lost_names as exc:
                        if self.actor is not None or runs[i] >= self.max_attempts:
                            raise _TickLost(i, exc) from exc
                        # No env: batches are independent; only this one runs again.
                        self._record(batches[i].tick, i, runs[i], exc)
                        todo.appendleft(i)
                        continue
                    self._promoted.commit(staged)
                    results[i] = staged.result
        except BaseException:
            self._drain(pending)
            raise
        return [results[i] for i in range(len(batches))]

    def _drain(self, pending: dict[Any, int]) -> None:
        """Force-cancel the tasks still running and wait (bounded) until they end."""
        refs = list(pending)
        if not refs:
            return
        for ref in refs:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # finished meanwhile, or its node is gone
                pass
        _, left = self.ray.wait(
            refs, num_returns=len(refs), timeout=self.drain_timeout_s, fetch_local=False
        )
        if left:
            # Their writes stay in their staging areas and the killed env actor: harmless.
            warnings.warn(
                f"{len(left)} cancelled Ray batch task(s) did not confirm their end within "
                f"{self.drain_timeout_s:g} s; they cannot write into the run (staged)",
                stacklevel=2,
            )

    def _record(self, tick: int, batch: int, attempt: int, exc: BaseException) -> None:
        self.lost.append(
            {
                "tick": tick,
                "batch": batch,
                "attempt": attempt,
                "error_class": type(exc).__name__,
                "error": str(exc)[:500],
                "ts": time.time(),
            }
        )
