"""``Society``: agents in workspaces advancing in atomic ticks, local or on Ray.

The walk of one tick ``t`` (``committed = t - 1``)::

    split agent ids into batches -> executor runs step_agent_batch per batch
        (each agent: load state <= committed, step, write the version of t; rows flushed)
    -> env.step(t), drain events -> clock advances -> env checkpoint env/ticks/<t>/
    -> timeline row, flush -> marks = log_marks(run, previous marks)
    -> [keep_checkpoints: checkpoints/<t>/]
    -> SOCIETY_STEP.json {tick: t, ts, offsets, marks, env checkpoint, totals, llm}
       (atomic rename = commit; ``llm``: the client's learned state, virtual clock only)

A run directory has one writer (``WRITER.lock``, see ``store/writer_lock.py``). Resume
(``Society.open``) takes it, cuts the log back to the committed rows (verified against the
marks), restores the env from the committed checkpoint and the LLM client from ``llm``,
and agents read their committed version (see ``agentlab/agents/workspace.py``). A kill -9
anywhere therefore replays the interrupted tick from scratch: no duplicate rows, no gaps,
no agent stepped twice — and under the virtual clock the same timings.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import warnings
import weakref
from pathlib import Path
from typing import Any, Literal

from agentlab.agents.base import AgentBase
from agentlab.agents.registry import portable_classes
from agentlab.core.blocking import require_running_loop
from agentlab.core.clock import Clock, RealClock, VirtualClock
from agentlab.core.ids import validate_agent_id
from agentlab.errors import ConfigError
from agentlab.runtime.batch import AgentSpecs, BatchSpec, RetryPolicy
from agentlab.runtime.config import llm_span_rate
from agentlab.runtime.executors import Executor, check_clock, check_virtual, make_executor
from agentlab.runtime.fork import fork_society
from agentlab.runtime.gc_tuning import GCTuning
from agentlab.runtime.progress import TickProgress
from agentlab.runtime.services import RunServices
from agentlab.runtime.society_build import create_society, mark_store, open_society
from agentlab.runtime.society_files import SOCIETY_SCHEMA_VERSION
from agentlab.runtime.society_tick import (
    check_tick_counts,
    client_calls,
    discard_unfinished_tick,
    run_tick,
    take_writer_lock,
    tick_progress,
    uncancel,
)
from agentlab.runtime.stop_rule import DEFAULT_MAX_ERROR_SHARE
from agentlab.runtime.worker_loop import run_in_worker_loop
from agentlab.store.agent_store import AgentStore
from agentlab.store.atomic import read_json
from agentlab.store.lifecycle import RunStatus, mark_status, read_status
from agentlab.store.packed_store import open_agent_store
from agentlab.store.writer_lock import WriterLock

__all__ = ["SOCIETY_SCHEMA_VERSION", "Society"]

DEFAULT_BATCH_SIZE = 256


def _batch_size(value: int | None) -> int:
    size = value or int(os.environ.get("AGENTLAB_BATCH_SIZE", DEFAULT_BATCH_SIZE))
    if size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {size}")
    return size


class Society:
    """A run directory holding a society; build with :meth:`create` or :meth:`open`."""

    def __init__(
        self,
        run_dir: Path,
        meta: dict[str, Any],
        step_state: dict[str, Any],
        *,
        executor: str | Executor | None = None,
        batch_size: int | None = None,
        progress: bool = True,
        executor_options: dict[str, Any] | None = None,
        lock: WriterLock | None = None,
        read_only: bool = False,
    ) -> None:
        self.run_dir = run_dir
        self.read_only = read_only
        self._lock = lock or (WriterLock(run_dir) if read_only else WriterLock(run_dir).acquire())
        # A Society dropped without close() frees the run for other processes.
        weakref.finalize(self, self._lock.release)
        self.meta = meta
        self.seed = int(meta["seed"])
        # ids checked once per open: the batch hot path then trusts them (Workspace.of_known).
        # Held in tuples of str, which the cyclic GC stops tracking (see batch.AgentSpecs):
        # per-agent objects (or lists of them) made every full collection dearer with N.
        # (the pairs first, then the outer tuple: a collection untracks it only when it
        # meets it after its items, i.e. allocated after them)
        pairs = meta["agents"] = tuple([(a, t) for a, t in meta["agents"]])
        self._specs = AgentSpecs([validate_agent_id(a) for a, _ in pairs], [t for _, t in pairs])
        self.batch_size = _batch_size(batch_size or meta.get("batch_size"))
        self.retry = RetryPolicy(**meta.get("retry", {}))
        self.tick_seconds = float(meta.get("tick_seconds", 0.0))
        self.keep_checkpoints = bool(meta.get("keep_checkpoints", False))
        self.progress = progress and os.environ.get("AGENTLAB_PROGRESS", "1") != "0"
        self.clock: Clock = (
            VirtualClock(start=float(step_state["ts"]))
            if meta.get("clock") == "virtual"
            else RealClock()
        )
        chosen = executor or meta.get("executor", "local")
        if isinstance(chosen, str) and meta.get("clock") == "virtual":
            check_virtual(chosen, meta)  # before the executor starts anything
        self.executor = make_executor(chosen, **(executor_options or {}))
        check_clock(self.executor, meta.get("clock", "real"))
        if meta.get("clock") == "virtual":
            check_virtual(self.executor.name, meta)
        self._step = step_state
        self._stop = False
        self._close_after_run = False  # close() came while run() ran: run() closes at its end
        self._start_task: asyncio.Task[dict[str, Any]] | None = None  # start()'s task
        self._failed = False  # the last step() raised before committing
        # status: idle -> running <-> paused -> (stopped | done); see run()/pause()/resume()
        self._status = "idle"
        me = weakref.ref(self)  # weak: the process-wide lock table must not keep us alive
        self._lock.busy = lambda: (s := me()) is not None and s._status in ("running", "paused")
        self._progress: dict[str, Any] = {}
        self._resume = asyncio.Event()
        self._resume.set()
        self.last: dict[str, Any] = {}
        self._started_env = False
        self.proxy = RunServices(
            run_dir,
            meta["llm"],
            None,
            seed=self.seed,
            run_id=meta.get("run_id", ""),
            clock=meta.get("clock", "real"),
            # kept in the run: a resume (or a Ray worker) traces the same calls whatever
            # its environment says; runs of older versions had none (AGENTLAB_LLM_SPANS)
            llm_spans=llm_span_rate(meta["llm_spans"]) if "llm_spans" in meta else None,
        )
        self.proxy.bind_clock(self.clock)
        if self._llm_state_kept() and step_state.get("llm") is not None and not read_only:
            # The next tick's timings depend on what the limiter and the simulated server
            # had learned by the commit: restore it, so resume == uninterrupted run.
            self.proxy.llm.client.restore_state(step_state["llm"])

    # --- building ----------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        agents: Any = 10,
        env: list[Any] | tuple[Any, ...] = (),
        llm: str | dict[str, Any] | Any = "sim/instant",
        seed: int = 0,
        executor: str | Executor = "local",
        batch_size: int | None = None,
        clock: str = "real",
        retry: RetryPolicy | None = None,
        tick_seconds: float = 0.0,
        progress: bool = True,
        executor_options: dict[str, Any] | None = None,
        keep_checkpoints: bool = False,
        store: str = "auto",
        llm_spans: str | None = None,
        exist_ok: bool | Literal["replace"] = False,
        max_error_share: float | None = DEFAULT_MAX_ERROR_SHARE,
    ) -> Society:
        """Write a new society into ``path`` and return it (tick 0 committed).

        Args:
            path: the run directory (must not hold a society yet, unless ``exist_ok``).
            agents: an int (that many ``llm`` persona agents), ``{type: n}``, or a list of
                ``{"type", "id"?, "n"?, "config"?}`` dicts / ``(type, id, config)`` tuples.
            env: env modules: names (``"social_feed"``), ``{"type": ..., **config}`` or
                ``EnvBase`` instances.
            llm: a model string (``"sim/instant"``), an ``LLMClient`` or its ``to_dict()``;
                an unseeded simulator gets ``seed``.
            seed: root seed (per-agent RNGs derive from ``(seed, agent_id, tick)``).
            executor: ``"local"`` (default), ``"ray"`` or an executor object.
            batch_size: agents per batch task (default 256 or ``AGENTLAB_BATCH_SIZE``).
            clock: ``"real"`` or ``"virtual"`` (local executor, or Ray where its time server
                keeps it exact: ``config.ray_virtual_refusal``).
            retry: the failed-step retry policy.
            tick_seconds: clock time that passes at the end of every tick.
            progress: show a per-tick progress bar.
            keep_checkpoints: keep every tick's commit record, env checkpoint and agent
                states under ``checkpoints/<t>/`` so :meth:`fork` can start from any
                tick (default: only the last commit is kept; it can always be forked).
            executor_options: e.g. ``{"address": "ray://..."}`` or ``{"max_workers": 4}``.
            store: ``"directory"`` (a folder per agent), ``"packed"`` (one SQLite file,
                ``agentlab.store.packed_store``) or ``"auto"`` (default: packed from
                ``PACKED_THRESHOLD`` agents up, see ``store/README.md``); later opens
                detect which.
            llm_spans: which LLM calls also get an ``llm.call`` span: ``"all"`` (the
                default, or ``AGENTLAB_LLM_SPANS``), ``"none"`` or ``"sample:<rate>"``
                (e.g. ``"sample:0.01"``), chosen by a hash of the seed, agent, tick and
                call number. Kept in the run (a resume traces the same calls); the
                ``llm_calls`` rows and every other dataset are the same whatever it is.
            exist_ok: what to do when ``path`` already holds a run. ``False`` (default):
                refuse. ``True``: open the existing society (:meth:`open`; the other
                arguments are ignored). ``"replace"``: take the run's writer lock first,
                then delete the old run and create this one; while another process (or
                a running ``Society`` object of this one) writes the run, it is refused
                with ``RunLockedError`` naming the holder and nothing is removed. This is
                the notebook way to start over (never ``shutil.rmtree`` a run).
            max_error_share: the stop rule (``runtime/stop_rule.py``), kept in the run: a
                tick in which no agent step succeeded, or more than this share of agents
                failed every attempt, is not committed and raises ``TickFailedError``
                (``run()`` marks the run ``failed``). Default 1.0: stop only when every
                step failed; ``None``: never stop.
        """
        return create_society(
            cls, cls.open, path, agents, env, llm, seed, executor, batch_size, clock, retry,
            tick_seconds, progress, executor_options, keep_checkpoints, store, llm_spans,
            exist_ok, max_error_share,
        )  # fmt: skip

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        executor: str | Executor | None = None,
        batch_size: int | None = None,
        progress: bool = True,
        executor_options: dict[str, Any] | None = None,
        read_only: bool = False,
    ) -> Society:
        """Reopen a society at its last committed tick (this is also *resume*).

        Log rows written after the committed tick are cut off, the env is restored from
        the committed checkpoint, and agents load their committed state version. This
        takes the run's writer lock (``RunLockedError`` if another process writes it).

        ``read_only=True`` only reads: no lock, nothing cut, :meth:`step` refused — to look
        at agents and the env (:meth:`agent`, :meth:`agent_states`, :meth:`env_state`) of
        a run another process is writing. For the log, use ``agentlab.open_run``.
        """
        return open_society(
            cls, path, executor=executor, batch_size=batch_size, progress=progress,
            executor_options=executor_options, read_only=read_only,
        )  # fmt: skip

    def fork(
        self,
        out: str | os.PathLike[str],
        *,
        at_tick: int | None = None,
        progress: bool = True,
        **changes: Any,
    ) -> Society:
        """A new run in ``out`` that starts from committed tick ``at_tick`` of this one.

        ``changes`` are new values for ``llm``, ``seed``, ``retry``, ``tick_seconds``,
        ``batch_size``, ``executor``, ``executor_options`` or ``keep_checkpoints``; with
        none, the fork continues exactly as this run does. The last committed tick can
        always be forked, earlier ones if this run keeps checkpoints
        (``keep_checkpoints=True``). See ``agentlab/runtime/fork.py``.
        """
        self.proxy.flush()
        return fork_society(
            self.run_dir, out, build=Society, at_tick=at_tick, progress=progress, **changes
        )

    @staticmethod
    def fork_run(
        parent: str | os.PathLike[str],
        out: str | os.PathLike[str],
        *,
        at_tick: int | None = None,
        progress: bool = True,
        **changes: Any,
    ) -> Society:
        """:meth:`fork` of a run directory without opening it (it may be in use)."""
        return fork_society(parent, out, build=Society, at_tick=at_tick, progress=progress,
                            **changes)  # fmt: skip

    # --- state -------------------------------------------------------------------------
    @property
    def tick(self) -> int:
        """The last committed tick (0 right after create)."""
        return int(self._step["tick"])

    @property
    def agent_specs(self) -> AgentSpecs:
        """Every agent's :class:`AgentSpec` (id and type), in batch order."""
        return self._specs

    @property
    def agent_ids(self) -> list[str]:
        """Ids of every agent, in batch order."""
        return list(self._specs.ids)

    @property
    def store(self) -> AgentStore:
        """The agent store of the run (``<run>/agents``)."""
        return open_agent_store(self.run_dir)

    def agent(self, agent_id: str) -> AgentBase:
        """The agent as of the committed tick (a detached copy; stepping it has no effect)."""
        return AgentBase.from_workspace((self.store, agent_id), committed_tick=self.tick)

    def agent_states(self) -> dict[str, Any]:
        """``{agent_id: state}`` as of the committed tick."""
        return {a: self.agent(a).get_state() for a in self.agent_ids}

    def _ensure_writer(self) -> None:
        if not self._lock.held:
            take_writer_lock(self)

    def _llm_state_kept(self) -> bool:
        # Only under the virtual clock is the client's state a function of the committed
        # history: the driver's client runs every call (local executor) or holds what the
        # Ray time server learned in the tick; under the real clock timings are not
        # reproducible anyway.
        return self.meta.get("clock") == "virtual"

    def _ensure_env(self) -> None:
        if self._started_env:
            return
        self.proxy.env = self.executor.start_env(
            self.meta.get("env", []), self.seed, str(self.run_dir), self._step.get("env") or None
        )
        self._started_env = True

    def env_state(self) -> list[dict[str, Any]]:
        """The committed env checkpoint documents (one per module)."""
        return [read_json(self.run_dir / rel) for rel in self._step.get("env", [])]

    # --- running -----------------------------------------------------------------------

    def _batches(self, tick: int, parent: dict[str, str] | None = None) -> list[BatchSpec]:
        specs = self._specs
        classes = portable_classes(set(specs.types))
        size = self.batch_size
        return [
            BatchSpec(tick, tick - 1, specs[i : i + size], classes, self.retry, parent)
            for i in range(0, len(specs), size)
        ]

    async def step(self, *, publish: bool = True) -> dict[str, Any]:
        """Run and commit one tick; returns its ``timeline`` row."""
        self._ensure_writer()
        self._ensure_env()
        self._discard_unfinished_tick()  # a tick that raised or was stopped: back first
        self._failed = True
        tick = self.tick + 1
        t0 = time.perf_counter()
        self._progress = {"tick": tick, "started": time.time(), "calls0": client_calls(self.proxy)}
        tracer = self.proxy.trace
        # One trace per tick (store README: "Trace shape"), unless step() runs in a span.
        attrs: dict[str, Any] = {"agentlab.tick": tick, "agentlab.agents": len(self.agent_specs),
                                 "agentlab.run_id": self.proxy.run_id}  # fmt: skip
        span = tracer.start_span("society.tick", **attrs)
        token = tracer.activate(span)  # env steps and routers' calls of this tick go under it
        try:
            return await run_tick(self, tick, span, t0, tracer, publish)
        finally:
            tracer.deactivate(token)

    async def run(
        self, ticks: int | None = None, *, until: int | None = None, progress: bool | None = None
    ) -> dict[str, Any]:
        """Run ``ticks`` more ticks, until tick ``until`` is committed, or (neither given)
        until :meth:`stop`.

        :meth:`pause` holds the loop between ticks (after the tick in progress commits)
        until :meth:`resume`; :meth:`stop` ends it after the tick in progress. Calling
        ``run`` again continues from the last committed tick. Returns totals of this call.
        ``progress=False``: no tick bar this call (a live view's panel shows the ticks).
        """
        if ticks is not None and until is not None:
            raise ConfigError("give at most one of ticks=N or until=T")
        check_tick_counts(ticks=ticks, until=until)
        started = self._pending_start() and asyncio.current_task() is self._start_task
        self._refuse_a_second_run(started)
        if ticks is not None:
            target: float = self.tick + int(ticks)
        elif until is not None:
            target = int(until)
            if target < self.tick:  # (until=T is "up to tick T": T itself is a no-op)
                warnings.warn(
                    f"until={target}: the society is at tick {self.tick} already, so nothing "
                    "runs (until=T runs up to tick T; ticks=N runs N more)",
                    stacklevel=2,
                )
        else:
            target = float("inf")
        self._stop = started and self._stop  # a stop() before a start()ed run began holds,
        if not started:  # and so does a pause() (start() cleared both)
            self._resume.set()
        self._start_task = None  # (a start()'s run has begun: close() now stops it)
        self._status = "running"
        self._mark("running")
        todo = None if target == float("inf") else max(0, int(target) - self.tick)
        bar = TickProgress(todo, enabled=self.progress and progress is not False)
        out: dict[str, Any] = {"ticks": 0, "steps": 0, "llm_calls": 0, "errors": 0, "tokens": 0}
        t0 = time.perf_counter()
        error: BaseException | None = None
        interrupted = False
        gc_tuning = GCTuning()
        try:
            while self.tick < target and not self._stop:
                if not self._resume.is_set():
                    self._status = "paused"
                    self._mark("paused")
                    await self._resume.wait()
                    if self._stop:
                        break
                    self._status = "running"
                    self._mark("running")
                row = await self.step(publish=self.tick + 1 == target)
                for k in ("steps", "llm_calls", "errors", "tokens"):
                    out[k] += row[k]
                out["ticks"] += 1
                bar.update(row)
        except (KeyboardInterrupt, asyncio.CancelledError):
            # the stop button / Ctrl-C: the tick in progress is discarded (below, or by
            # close() / the next step()), the committed run intact; one line, no traceback
            interrupted = True
        except BaseException as exc:
            error = exc
            raise
        finally:
            gc_tuning.restore()
            bar.close()
            self._status = "stopped" if self.tick < target else "done"
            if error is not None:
                self._mark("failed", error=f"{type(error).__name__}: {error}")
            else:
                self._mark(self._status)  # type: ignore[arg-type]
            if self._close_after_run:
                self._close_after_run = False
                self.close()
        if interrupted:
            if self.executor.name == "local":  # now (Ray workers may still write: close())
                self._discard_unfinished_tick()
            print(
                f"stopped after tick {self.tick}; tick {self.tick + 1} was discarded; "
                f"running again continues from tick {self.tick + 1}",
                file=sys.stderr,
            )
            uncancel()
        out["wall_s"] = time.perf_counter() - t0
        out["tick"] = self.tick
        out["steps_per_s"] = out["steps"] / out["wall_s"] if out["wall_s"] else 0.0
        out["status"] = self._status
        return out

    def start(
        self, ticks: int | None = None, *, until: int | None = None, progress: bool | None = None
    ) -> asyncio.Task[dict[str, Any]]:
        """:meth:`run` as a background task of the running loop (a notebook's), returned
        at once (what a live view's *start* does; ``await`` it for the totals). A
        :meth:`close` before the task begins (in the same cell) lets it run, then closes."""
        self._refuse_a_second_run(False)
        check_tick_counts(ticks=ticks, until=until)
        loop = require_running_loop(
            "start() (and a live view) runs the society as a background task of a running"
            " event loop (a notebook's); in a script use society.run_sync(ticks) or "
            "`await society.run(ticks)`, then agentlab.show(run_dir)"
        )
        self._stop = False
        self._resume.set()
        task = loop.create_task(self.run(ticks, until=until, progress=progress))
        self._start_task = task
        task.add_done_callback(self._start_ended)
        return task

    def _refuse_a_second_run(self, started: bool) -> None:
        if self._status in ("running", "paused"):
            raise ConfigError(f"this society is already {self._status}; stop() it first")
        if self._pending_start() and not started:
            raise ConfigError("this society has a run starting (start(), a live view's "
                              "start): await it first (stop() ends it before its first tick)")  # fmt: skip

    def _pending_start(self) -> bool:
        """A :meth:`start` task whose :meth:`run` has not begun yet."""
        return self._start_task is not None and not self._start_task.done()

    def _start_ended(self, task: asyncio.Task[dict[str, Any]]) -> None:
        if self._start_task is task:
            self._start_task = None
        if self._close_after_run:  # cancelled before its run began: close() is still owed
            self._close_after_run = False
            self.close()

    def _mark(self, status: RunStatus, *, error: str | None = None) -> None:
        """Write the lifecycle status into ``run.json`` while this object is the writer."""
        if self.read_only or not self._lock.held:
            return
        try:
            mark_status(self.run_dir, status, error=error)
        except OSError as exc:  # the status is a report; never lose a tick over it
            warnings.warn(f"{self.run_dir}: could not write status {status!r}: {exc}",
                          stacklevel=3)  # fmt: skip

    def run_sync(self, ticks: int | None = None, *, until: int | None = None) -> dict[str, Any]:
        """:meth:`run` for scripts; inside a running loop (Jupyter) it runs in a worker
        thread, and the kernel's interrupt stops it as it stops an awaited :meth:`run`
        (after the committed tick; this call's totals come back, status ``stopped``)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(ticks, until=until))
        return run_in_worker_loop(self.run(ticks, until=until))

    @property
    def status(self) -> str:
        """``idle`` (never run here), ``running``, ``paused``, ``stopped`` or ``done``
        (this object's loop; ``run.json`` holds the run's, see ``store/lifecycle.py``)."""
        return self._status

    @property
    def paused(self) -> bool:
        """True while :meth:`pause` holds the run loop (or will, after the current tick)."""
        return not self._resume.is_set() and self._status in ("running", "paused")

    def tick_progress(self) -> dict[str, Any]:
        """The tick in progress as seen from this process, for live views: ``tick`` (the
        one being run), ``started`` (epoch seconds), ``llm_calls`` finished and
        ``in_flight`` in this process since it started (0 with the Ray executor, whose
        calls run in workers), ``clock`` (the society clock now)."""
        return tick_progress(self)

    def pause(self) -> None:
        """Hold the run loop after the tick in progress commits, until :meth:`resume` (a
        run :meth:`start` ed that has not begun: before its first tick)."""
        self._resume.clear()

    def resume(self) -> None:
        """Let a paused run loop go on with the next tick."""
        self._resume.set()

    def stop(self) -> None:
        """End the run loop after the tick in progress (the run stays resumable); a run
        :meth:`start` ed that has not begun ends before its first tick."""
        self._stop = True
        self._resume.set()

    def _discard_unfinished_tick(self) -> None:
        """After a tick that began and never committed (raised, or stopped): back to the
        commit, as reopening the run would (``society_tick.discard_unfinished_tick``)."""
        if self._failed and self._lock.held and not self.read_only:
            discard_unfinished_tick(self)

    def close(self) -> None:
        """Flush the log, mark the run ``done`` (``stopped`` if the last :meth:`run` was
        stopped or interrupted) and release the executor's resources and the lock; rows of
        a tick that never committed are cut (they would be at the next resume).

        While :meth:`run` runs (a live view's run, a task's) it is stopped after the tick in
        progress commits and the society closes then: closing under it cut the store of
        the tick it was running, changed that tick's outcome and let it go on unlocked. A
        run :meth:`start` ed in the same cell (``live(soc, ticks=5)``; ``with`` a society)
        has not begun: it runs its ticks, then the society closes."""
        if self._status in ("running", "paused"):
            self._close_after_run = True
            self.stop()
            print(f"{self.run_dir}: a run is in progress; it stops after tick {self.tick + 1} "
                  "commits, then the society closes", file=sys.stderr)  # fmt: skip
            return
        if self._pending_start():  # started in this cell: it has not run a tick yet
            self._close_after_run = True
            print(
                f"{self.run_dir}: the run started in this cell runs first (stop() or the "
                "stop button ends it sooner), then the society closes",
                file=sys.stderr,
            )
            return
        self.proxy.flush()
        self.executor.close()
        self._discard_unfinished_tick()  # every writer is closed now
        self._started_env = False
        mark_store(self.proxy._live.get("store"), None, close=True)  # SQLite closed
        if self._lock.held and read_status(self.run_dir) in ("running", "paused"):
            self._mark("stopped" if self._status == "stopped" else "done")
        self._lock.release()

    def __enter__(self) -> Society:
        return self

    def __exit__(self, *exc: object) -> None:
        """``with Society.create(...) as soc:`` closes it at the block's end (as close())."""
        self.close()

    def __repr__(self) -> str:
        return (f"Society({str(self.run_dir)!r}, agents={len(self.agent_specs)}, "
                f"tick={self.tick}, executor={self.executor.name!r})")  # fmt: skip
