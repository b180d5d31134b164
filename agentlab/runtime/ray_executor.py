"""``RayExecutor``: batches as Ray tasks, the env in one Ray actor, failures survived.

No worker touches the run directory, so nodes need not share a filesystem: the driver
sends each batch task its agents' committed workspace bytes (a segment), the task returns
the new state versions, its log bytes and diagnostics (``runtime/staging.py``), and the
driver commits them when it accepts the result. The env actor gets and returns its
checkpoints as bytes (``runtime/ray_env.py``); people are asked through the run's human
desk, which the driver serves (``runtime/ray_human.py``). That makes failures safe to
retry:

* a worker or node dies mid-batch (``WorkerCrashedError``, ``NodeDiedError``...): the other
  tasks of the tick are cancelled with ``force=True`` and drained (best effort, bounded by
  ``drain_timeout_s``), the batches this tick already committed are cut back out of the
  log, the env actor is restarted from the committed checkpoint (the lost attempt's tool
  calls may have reached it) and the tick runs again, up to ``max_attempts`` times.
  Without an env the batches are independent, so only the lost batch runs again.
  A task that could not be confirmed stopped (a partitioned node) cannot hurt: it only
  ever writes into its own staging area and into the old, killed env actor.
* a batch task runs past ``batch_deadline_s`` (a hung worker, a partitioned node Ray
  never declares dead): it is force-cancelled and handled like a lost worker above; its
  staged writes are never committed however late it finishes.
* the env actor dies: :class:`~agentlab.errors.EnvActorDiedError`, nothing of the tick is
  committed; ``Society.open`` (or stepping again) restarts it from the checkpoint.

Each lost attempt is recorded in :attr:`RayExecutor.lost` (the driver logs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import signal
import sys
import time
import warnings
from collections import Counter, deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.errors import BatchDeadlineError, ConfigError, EnvActorDiedError, WorkerLostError
from agentlab.runtime.batch import BatchResult, BatchSpec
from agentlab.runtime.envhost import ENV_CKPT_DIR, RayEnvHandle
from agentlab.runtime.ray_env import EnvActor, EnvCheckpoint, read_files
from agentlab.runtime.ray_human import DeskServer, HumanDesk
from agentlab.runtime.staging import Promoted, StagedBatch, read_segment, run_staged_batch
from agentlab.store.atomic import atomic_write_bytes
from agentlab.store.packed_store import open_agent_store

if TYPE_CHECKING:
    from agentlab.runtime.services import RunServices

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


_REMOTE: dict[str, Any] = {}


def _reap(pid: int) -> None:
    """Kill a batch worker that ran past its deadline (runs on that worker's node)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def _remote(ray: Any) -> tuple[Any, Any, Any, Any]:
    if "task" not in _REMOTE:
        # max_retries=0: a re-execution by Ray would be an attempt the driver cannot fence.
        # SPREAD: batches carry their state with them, so no node is closer to the data
        # than another; without it Ray keeps most short batches on the driver's node.
        _REMOTE["task"] = ray.remote(num_cpus=1, max_retries=0, scheduling_strategy="SPREAD")(
            run_staged_batch
        )
        _REMOTE["actor"] = ray.remote(num_cpus=0, max_restarts=0)(EnvActor)
        _REMOTE["desk"] = ray.remote(num_cpus=0, max_restarts=0)(HumanDesk)
        _REMOTE["reap"] = ray.remote(num_cpus=0, max_retries=0)(_reap)
    return _REMOTE["task"], _REMOTE["actor"], _REMOTE["desk"], _REMOTE["reap"]


def _time_server(ray: Any) -> Any:
    if "time" not in _REMOTE:
        from agentlab.runtime.vclock_server import TimeServer

        # threaded: every batch of the tick blocks in exchange() until its next answers
        _REMOTE["time"] = ray.remote(num_cpus=0, max_restarts=0)(TimeServer)
    return _REMOTE["time"]


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
            cluster's CPU count); tasks cancelled but not confirmed ended count against it,
            since each may still hold its CPU.
        max_attempts: runs of a tick (or, without an env, of a batch) when workers die.
        drain_timeout_s: how long to wait for cancelled tasks to end before retrying.
        batch_deadline_s: how long one batch task may run (from its submission) before
            its attempt is abandoned: force-cancelled, its staged writes never committed,
            the batch (with an env: the tick) run again, counted like a lost worker
            (``BatchDeadlineError`` once ``max_attempts`` are spent). This is what ends
            a wait on a hung or partitioned node that Ray never declares dead. The
            abandoned task's worker is killed where it can be reached (see
            :meth:`_end`); one on a partitioned node keeps its CPU, so the tick goes on
            with one task fewer in flight. Measured from submission. Default
            ``AGENTLAB_RAY_BATCH_DEADLINE_S`` or 1800 s; ``None`` or ``0``: no deadline.
        env_node_id: the Ray node id the env actor must run on (hard affinity: if that
            node is gone, starting the env fails with ``EnvActorDiedError``); default the
            driver's node, as a preference. The actor needs no file of the run.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        max_workers: int | None = None,
        max_attempts: int = 3,
        drain_timeout_s: float = 30.0,
        batch_deadline_s: float | str | None = "default",
        env_node_id: str | None = None,
    ) -> None:
        from agentlab.runtime.ray_init import ensure_ray

        self.ray = ray = ensure_ray(address)
        env_max = os.environ.get("AGENTLAB_RAY_MAX_WORKERS")
        cpus = int(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
        self.max_workers = max_workers or (int(env_max) if env_max else max(1, cpus))
        self.max_attempts = max(1, int(max_attempts))
        self.drain_timeout_s = float(drain_timeout_s)
        self.batch_deadline_s = _deadline(batch_deadline_s)
        self.env_node_id = env_node_id
        self.actor: Any = None
        self.desk: Any = None  # the human desk actor (runtime/ray_human.py), made lazily
        #: committed batches per Ray node id (where the run's work went)
        self.batch_nodes: Counter[str] = Counter()
        # Cancelled tasks not confirmed ended: each may still hold a CPU (a stopped worker,
        # a partitioned node), so fewer new tasks are sent while they last.
        self._abandoned: list[Any] = []
        #: one dict per lost attempt: tick, batch, attempt, error_class, error, ts
        self.lost: list[dict[str, Any]] = []
        self._env_args: tuple[list[Any], int, str] | None = None
        self._env_tick: int | None = None  # None: holds the state start_env restored
        self._dirty = False  # a tick ran on the env since its last checkpoint
        self._promoted: Promoted | None = None
        self._lost_names = tuple(getattr(ray.exceptions, n) for n in _LOST_NAMES)
        # clock="virtual": the time server actor (its concurrency) and, during a tick,
        # (server, tick start) for the batch tasks (runtime/vclock_server.py)
        self._ts: tuple[Any, int] | None = None
        self._virtual: tuple[Any, float] | None = None
        #: clock="virtual": per tick its end, the time server's windows and answers
        self.vclock_ticks: list[dict[str, Any]] = []

    # --- env actor ---------------------------------------------------------------------

    def start_env(
        self, specs: list[Any], seed: int, run_dir: str, restore: list[str] | None
    ) -> RayEnvHandle | None:
        if not specs:
            return None
        self._env_args = (specs, seed, run_dir)
        self._env_tick, self._dirty = None, False
        return self._spawn_env(read_files(run_dir, restore) if restore else None)

    def _spawn_env(self, restore: dict[str, bytes] | None) -> RayEnvHandle:
        assert self._env_args is not None
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        _, actor_cls, _, _ = _remote(self.ray)
        options: dict[str, Any] = {}
        try:
            # The actor reads and writes no file of the run (its checkpoints travel as
            # bytes), so any node would do; the driver's is preferred because a worker
            # node that dies must not take the env with it.
            node = self.env_node_id or self.ray.get_runtime_context().get_node_id()
            # An explicit node is a requirement (hard), the driver's a preference.
            soft = self.env_node_id is None
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=soft)
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
        paths = [f"{ENV_CKPT_DIR}/{committed}/{i}.json" for i in range(n)]
        restore = read_files(self._env_args[2], paths)
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
        """Take the env actor's checkpoint bytes and rows, and write them into the run."""
        if self.actor is None:
            return []
        try:
            ckpt: EnvCheckpoint = self.ray.get(self.actor.checkpoint.remote(tick, publish))
        except self.ray.exceptions.RayActorError as exc:
            raise self._env_died("writing its checkpoint", tick, exc) from exc
        for rel, data in ckpt.files.items():
            target = Path(run_dir) / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(target, data, fsync=False)
        if ckpt.log:
            self._promoter(run_dir).commit_log(ckpt.log, ckpt.schema)
        self._env_tick, self._dirty = tick, False
        return ckpt.paths

    def _promoter(self, run_dir: str | os.PathLike[str]) -> Promoted:
        if self._promoted is None or self._promoted.run_dir != Path(run_dir):
            self._promoted = Promoted(run_dir)
        return self._promoted

    def close(self) -> None:
        self._drop_time_server()
        if self.actor is not None:
            try:  # its temp work dir: ray.kill skips the actor's __del__
                self.ray.get(self.actor.cleanup.remote(), timeout=10)
            except Exception:  # dead, or stuck: kill it anyway
                pass
        for name in ("actor", "desk"):
            handle = getattr(self, name)
            if handle is not None:
                try:
                    self.ray.kill(handle)
                except Exception:  # already dead
                    pass
                setattr(self, name, None)

    # --- batches -----------------------------------------------------------------------

    async def run_batches(self, batches: list[BatchSpec], proxy: RunServices) -> list[BatchResult]:
        if not batches:
            return []
        tick, committed = batches[0].tick, batches[0].committed
        virtual = getattr(proxy, "clock_name", "real") == "virtual"
        if virtual and len(batches) > self._slots():
            raise ConfigError(
                f"clock 'virtual' on executor 'ray' needs every batch in flight at once: "
                f"tick {tick} has {len(batches)} batches, {self._slots()} can run (max_workers "
                f"{self.max_workers}); raise batch_size or max_workers (nothing of the tick "
                "was run)"
            )
        promoted = self._promoter(proxy.run_dir)
        if self.actor is not None and (self._dirty or self._env_tick not in (None, committed)):
            # An earlier attempt of this tick failed after touching the env: start clean.
            await self._restart_env(proxy, committed)
        for attempt in range(1, self.max_attempts + 1):
            self._dirty = self.actor is not None
            promoted.begin()
            try:
                if virtual:
                    await self._begin_virtual(proxy, len(batches))
                results = await self._serving_humans(self._attempt(batches, proxy), proxy)
                if self.actor is not None:
                    await self._check_env(tick)
                if virtual:
                    await self._end_virtual(proxy)
                return results
            except _TickLost as lost:
                promoted.rollback()
                self._drop_time_server()
                last = attempt == self.max_attempts or self._env_args is None
                self._record(tick, lost.batch, attempt, lost.cause,
                             None if last else "the tick runs again from its commit")  # fmt: skip
                if last:
                    kind = (
                        BatchDeadlineError
                        if isinstance(lost.cause, BatchDeadlineError)
                        else WorkerLostError
                    )
                    raise kind(
                        f"tick {tick}: batch {lost.batch} lost its Ray worker on all "
                        f"{self.max_attempts} attempts (last: {type(lost.cause).__name__}: "
                        f"{lost.cause}); nothing of the tick was committed"
                    ) from lost.cause
                await self._restart_env(proxy, committed)
            except BaseException:
                promoted.rollback()
                self._drop_time_server()
                raise
            finally:
                self._virtual = None
        raise AssertionError("unreachable")

    async def _begin_virtual(self, proxy: Any, batches: int) -> None:
        """Start the tick on the time server with the driver's client state."""
        need = batches + 8  # each batch blocks one of its threads in exchange()
        if self._ts is None or self._ts[1] < need:
            self._drop_time_server()
            cls = _time_server(self.ray)
            handle = cls.options(max_concurrency=need).remote(proxy.llm.client.to_dict())
            self._ts = (handle, need)
        start = proxy.clock.now()
        state = proxy.llm.client.export_state()
        await self._ts[0].begin_tick.remote(start, state, batches)
        self._virtual = (self._ts[0], start)

    async def _end_virtual(self, proxy: Any) -> None:
        """What the time server learned becomes the driver's: its client state (the
        commit's ``llm``, the timeline's limit) and the tick's end time."""
        assert self._ts is not None
        out = await self._ts[0].end_tick.remote()
        proxy.llm.client.restore_state(out.pop("state"))
        proxy.clock.advance_to(out["end"])
        self.vclock_ticks.append(out)

    def _drop_time_server(self) -> None:
        # A tick given up leaves batches blocked in the server: a fresh one serves the next.
        if self._ts is not None:
            with contextlib.suppress(Exception):
                self.ray.kill(self._ts[0])
            self._ts = None

    async def _check_env(self, tick: int) -> None:
        # An env actor that died mid-tick turned every later tool call into an agent error;
        # such an attempt must not be committed.
        try:
            await self.actor.ping.remote()
        except self.ray.exceptions.RayActorError as exc:
            raise self._env_died("mid-tick", tick, exc) from exc

    async def _serving_humans(self, attempt: Any, proxy: Any) -> list[BatchResult]:
        """Run ``attempt`` while the driver serves the human desk (``ray_human.py``)."""
        if self.desk is None:
            _, _, desk_cls, _ = _remote(self.ray)
            self.desk = desk_cls.remote()
        server = asyncio.ensure_future(DeskServer(self.desk, proxy.run_dir).serve())
        try:
            return await attempt  # type: ignore[no-any-return]
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)

    async def _attempt(self, batches: list[BatchSpec], proxy: Any) -> list[BatchResult]:
        """One run of the tick; raises :class:`_TickLost` when it must start over."""
        ray = self.ray
        task, _, _, _ = _remote(ray)
        # The tasks' copy (no live resources) asks people through the desk, not the run.
        task_proxy = copy.copy(proxy)
        task_proxy.human_desk = self.desk
        proxy_ref = ray.put(task_proxy)
        promoted = self._promoter(proxy.run_dir)
        store = open_agent_store(proxy.run_dir)
        results: dict[int, BatchResult] = {}
        runs = [0] * len(batches)
        todo = deque(range(len(batches)))
        pending: dict[Any, int] = {}
        started: dict[Any, float] = {}
        tokens: dict[Any, str] = {}
        deadline = self.batch_deadline_s
        try:
            while todo or pending:
                while todo and len(pending) < self._slots():
                    i = todo.popleft()
                    runs[i] += 1
                    ids = [a.agent_id for a in batches[i].agents]
                    segment = await asyncio.to_thread(read_segment, store, ids)
                    token = f"{batches[i].tick}:{i}:{runs[i]}:{os.urandom(4).hex()}"
                    if self._virtual is not None:
                        server, start = self._virtual
                        ref = task.remote(batches[i], proxy_ref, segment, token, (server, i, start))
                    else:
                        ref = task.remote(batches[i], proxy_ref, segment, token)
                    pending[ref], started[ref], tokens[ref] = i, time.monotonic(), token
                wait_s = None
                if deadline is not None:
                    wait_s = max(
                        0.0, min(started[r] for r in pending) + deadline - time.monotonic()
                    )
                done, _ = await asyncio.to_thread(
                    ray.wait, list(pending), num_returns=1, timeout=wait_s
                )
                for ref in done:
                    i = pending.pop(ref)
                    started.pop(ref)
                    self.desk.forget.remote([tokens.pop(ref)])
                    try:
                        staged: StagedBatch = await ref
                    except self._lost_names as exc:
                        self._lost_batch(batches, i, runs[i], exc, todo)
                        continue
                    promoted.commit(staged)
                    self.batch_nodes[staged.node] += 1
                    results[i] = staged.result
                if deadline is not None:
                    now = time.monotonic()
                    for ref in [r for r in pending if now - started[r] >= deadline]:
                        i = pending.pop(ref)
                        started.pop(ref)
                        self._cancel(ref)  # its staging is never committed: harmless if late
                        await self._end(tokens.pop(ref))
                        self._abandoned.append(ref)
                        late = BatchDeadlineError(
                            f"tick {batches[i].tick}: batch {i} ran past batch_deadline_s="
                            f"{deadline:g} s (a hung or partitioned node?); the attempt was "
                            "abandoned and its staged writes dropped"
                        )
                        self._lost_batch(batches, i, runs[i], late, todo)
        except BaseException:
            self._drain(pending)
            raise
        return [results[i] for i in range(len(batches))]

    def _lost_batch(
        self, batches: list[BatchSpec], i: int, runs: int, exc: BaseException, todo: deque[int]
    ) -> None:
        """A batch attempt is lost: run it again (no env) or give the tick up."""
        if self.actor is not None or self._virtual is not None or runs >= self.max_attempts:
            raise _TickLost(i, exc) from exc  # (virtual: every batch of the tick waits on it)
        # No env: batches are independent; only this one runs again.
        self._record(batches[i].tick, i, runs, exc, "the batch runs again")
        todo.appendleft(i)

    async def _end(self, token: str) -> None:
        """End the worker process of a task past its deadline, where it can be reached.

        ``ray.cancel(force=True)`` asks the worker to exit; a stopped or wedged worker
        never serves that request, and Ray would keep handing its lease (and its CPU) to
        nobody else. The task reported its node and pid to the desk when it started: on
        the driver's node the driver kills it, on another node a zero-CPU task pinned
        there does. A partitioned node is not reached: its task keeps its CPU there.
        """
        try:
            where = await asyncio.wait_for(self.desk.where.remote(token), 10)
        except Exception:  # the desk is gone or slow: cancelling is all that is left
            return
        if where is None:  # never started (still queued): the cancel was enough
            return
        node, pid = where
        try:
            here = self.ray.get_runtime_context().get_node_id()
        except Exception:  # a Ray client driver has no node of its own
            here = None
        if node == here:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        strategy = NodeAffinitySchedulingStrategy(node, soft=False)
        _remote(self.ray)[3].options(scheduling_strategy=strategy).remote(pid)

    def _slots(self) -> int:
        """Tasks to keep in flight: ``max_workers`` less the abandoned ones still running."""
        if self._abandoned:
            _, self._abandoned = self.ray.wait(
                self._abandoned,
                num_returns=len(self._abandoned),
                timeout=0,
                fetch_local=False,
            )
        return max(1, self.max_workers - len(self._abandoned))

    def _cancel(self, ref: Any) -> None:
        try:
            self.ray.cancel(ref, force=True)
        except Exception:  # finished meanwhile, or its node is gone
            pass

    def _drain(self, pending: dict[Any, int]) -> None:
        """Force-cancel the tasks still running and wait (bounded) until they end."""
        refs = list(pending)
        if not refs:
            return
        for ref in refs:
            self._cancel(ref)
        _, left = self.ray.wait(
            refs, num_returns=len(refs), timeout=self.drain_timeout_s, fetch_local=False
        )
        self._abandoned.extend(left)
        if left:
            # Their writes stay in their staging areas and the killed env actor: harmless.
            warnings.warn(
                f"{len(left)} cancelled Ray batch task(s) did not confirm their end within "
                f"{self.drain_timeout_s:g} s; they cannot write into the run (staged)",
                stacklevel=2,
            )

    def _record(
        self, tick: int, batch: int, attempt: int, exc: BaseException, then: str | None
    ) -> None:
        """A lost batch attempt: a ``batch_failures`` row, and (``then``: what happens
        now) one line in place of Ray's report of a dead worker (``ray_init.py``)."""
        if then is not None:
            print(f"tick {tick}: batch {batch} lost its Ray worker on attempt {attempt} "
                  f"({type(exc).__name__}); {then} (recorded in batch_failures)",
                  file=sys.stderr)  # fmt: skip
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


def _deadline(value: float | str | None) -> float | None:
    """The batch deadline in seconds (``None``: none); see :class:`RayExecutor`."""
    if value == "default":
        value = os.environ.get("AGENTLAB_RAY_BATCH_DEADLINE_S", "1800")
    try:
        seconds = None if value is None else float(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"batch_deadline_s must be a number of seconds or None, got {value!r}"
        ) from None
    if seconds is not None and seconds < 0:
        raise ConfigError(f"batch_deadline_s must be >= 0 (0 or None: no deadline), got {value!r}")
    return seconds or None
