"""``Experiment``: topologies × runs of the AgentVerse workflow, recorded to a run directory.

```python
exp = Experiment(topologies=["sequential", "star", "full_mesh"], agents=4, runs=200,
                 llm="sim/vllm-3b", seed=0, clock="virtual")
res = await exp.run()          # or exp.run_sync() in a script
res.calls_df(); res.runs_df(); res.messages_df(); res.server_metrics_df()
```
Runs execute one after another (``parallel_runs=1``) so each run's calls form one arrival
process, as in the paper. Under the virtual clock with a ``sim/`` model a study with
multi-second latencies finishes in seconds, and the same seed gives the same records.
"""

from __future__ import annotations

import asyncio
import dataclasses
import operator
import random
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentlab.core.blocking import refuse_in_running_loop, require_running_loop
from agentlab.core.clock import Clock, clock_from_name
from agentlab.errors import ConfigError, RunsFailedError, UnknownNameError
from agentlab.messaging import gather_limited
from agentlab.runtime.gc_tuning import GCTuning
from agentlab.topology.protocols import PROTOCOLS
from agentlab.topology.recorder import sample_metrics
from agentlab.topology.run_failures import FailureWatch, check_rule
from agentlab.topology.tasks import load_tasks
from agentlab.topology.workflow import RunContext, WorkflowConfig, run_workflow

if TYPE_CHECKING:
    import pandas as pd

    from agentlab.llm import LLMClient
    from agentlab.store.lifecycle import RunStatus
    from agentlab.store.run import Run

__all__ = ["Experiment", "ExperimentResults"]


class ExperimentResults:
    """An experiment's run directory read back as DataFrames (the run log is the only copy).

    Args:
        run_dir: the experiment's run directory.
        status: ``"running"``, ``"done"``, ``"stopped"`` (interrupted) or ``"failed"``
            (the run lifecycle, ``agentlab/store/lifecycle.py``).
    """

    def __init__(self, run_dir: Path, status: str = "ok") -> None:
        self.run_dir = Path(run_dir)
        self.status = status
        #: runs finished so far (the rows themselves are in the run log)
        self.runs_done = 0
        self._run: Any = None

    @property
    def run(self) -> Run:
        """The :class:`agentlab.store.Run` of the run directory (opened on first use)."""
        if self._run is None:
            from agentlab.store import open_run

            self._run = open_run(self.run_dir)
        return self._run

    def _df(self, dataset: str) -> Any:
        return self.run._std(dataset)

    def calls_df(self) -> pd.DataFrame:
        """One row per LLM call (``llm_calls``) of a finished run: timing, tokens, outcome,
        flattened labels. The calls of a run cut short by a stop (or still in flight) are
        left out: a stopped study's table counted that run, with its few calls, among the
        runs (its rows go when the experiment is continued)."""
        return self.run.of_finished_runs(self.run.llm_calls_df())

    def attempts_df(self) -> pd.DataFrame:
        """One row per LLM attempt (``llm_attempts``) with its kind."""
        return self.run.llm_attempts_df()

    def messages_df(self) -> pd.DataFrame:
        """One row per delivered message of a finished run (sender, receivers, hub, tick,
        run_id, bytes); as :meth:`calls_df`."""
        return self.run.of_finished_runs(self.run.messages_df())

    def runs_df(self) -> pd.DataFrame:
        """One row per run: topology, task, iterations, rounds, score, calls, tokens."""
        df = self._df("experiment_runs")
        calls = self.run.llm_calls_df()  # (the join keeps the finished runs')
        if len(df) and len(calls):
            agg = calls.groupby("run_id").agg(
                calls=("request_id", "size"),
                prompt_tokens=("prompt_tokens", "sum"),
                completion_tokens=("completion_tokens", "sum"),
            )
            df = df.join(agg, on="run_id")
        return df

    def server_metrics_df(self) -> pd.DataFrame:
        """Backend metrics sampled in clock time (running, waiting, tokens/s...)."""
        return self._df("server_metrics")

    def process_metrics_df(self) -> pd.DataFrame:
        """Process CPU and RSS sampled during the experiment."""
        return self._df("process_metrics")

    def __repr__(self) -> str:
        return f"ExperimentResults({str(self.run_dir)!r}, status={self.status!r})"


class Experiment:
    """A coordination-topology traffic study.

    Args:
        topologies: names from ``agentlab.topology.PROTOCOLS``.
        agents: experts per run (N).
        runs: runs per topology.
        tasks: task dicts (``id``, ``prompt``, optional ``category``); default the
            ``topology_tasks`` dataset.
        llm: a model string (``"sim/vllm-3b"``, any litellm model) or an ``LLMClient``.
        seed: root seed (simulator seed and task order).
        clock: ``"virtual"`` (simulated backends only) or ``"real"``, or a clock object.
        out: run directory; a temporary directory when ``None``.
        parallel_runs: runs in flight at once (1 keeps runs' arrival processes separate).
        metrics_interval: server-metrics sampling period in clock seconds.
        progress: show a tqdm bar (notebook-aware).
        max_error_share: the stop rule, judged after each finished run over the last five
            (``run_failures.py``): the experiment stops when none of them succeeded (LLM
            failures that survived the client's retries), or more than this share of them
            failed; ``None``: never stops. Stopped so, ``run()`` raises
            :class:`~agentlab.errors.RunsFailedError`; the failed runs since the last
            success are not kept, and continuing it runs them again.
        exist_ok: when ``out`` already holds a run: ``False`` (default) refuses,
            ``True`` continues it when it is this experiment (its finished runs are kept,
            the rest run: re-running the cell after a crash; another experiment is
            refused, naming what differs), ``"replace"`` takes the run's
            writer lock, then deletes the old run (refused with ``RunLockedError``
            naming the holder while another process writes it).
        **workflow: :class:`~agentlab.topology.workflow.WorkflowConfig` fields (``rounds``,
            ``max_parallel``, ``style``, ``early_stop``, ``consensus_rates``,
            ``pass_rates``, ``threshold``, ``max_iterations``, ...).
    """

    def __init__(
        self,
        topologies: Sequence[str] = ("sequential", "star", "full_mesh"),
        agents: int = 4,
        runs: int = 10,
        tasks: Sequence[dict[str, Any]] | None = None,
        llm: str | LLMClient = "sim/vllm-3b",
        seed: int = 0,
        clock: str | Clock = "virtual",
        out: str | Path | None = None,
        parallel_runs: int = 1,
        metrics_interval: float = 1.0,
        progress: bool = True,
        exist_ok: bool | Literal["replace"] = False,
        max_error_share: float | None = 1.0,
        **workflow: Any,
    ) -> None:
        if isinstance(topologies, str):  # topologies="star": one topology, not five letters
            topologies = [topologies]
        if not topologies:
            raise ConfigError(f"no topologies to run; give some of {', '.join(PROTOCOLS)}")
        for t in topologies:
            if t not in PROTOCOLS:
                raise UnknownNameError("topology", t, list(PROTOCOLS))
        try:  # (a numpy integer from a DataFrame row too)
            seed = operator.index(seed)
        except TypeError:
            raise ConfigError(f"seed must be an integer, got {seed!r}") from None
        unknown = sorted(set(workflow) - {f.name for f in dataclasses.fields(WorkflowConfig)})
        if unknown:
            options = ", ".join(
                f.name for f in dataclasses.fields(WorkflowConfig) if f.name != "agents"
            )
            raise ConfigError(f"Experiment got unknown option(s) {', '.join(unknown)}; its "
                              f"workflow options are {options}")  # fmt: skip
        if exist_ok not in (True, False, "replace"):
            raise ConfigError(f"exist_ok must be False, True or 'replace', got {exist_ok!r}")
        self.exist_ok = exist_ok
        try:
            self.max_error_share = check_rule(max_error_share)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if runs < 1 or parallel_runs < 1 or metrics_interval <= 0:
            raise ConfigError(
                f"need runs>=1, parallel_runs>=1, metrics_interval>0; got {runs}, "
                f"{parallel_runs}, {metrics_interval}"
            )
        self.topologies = list(topologies)
        self.cfg = WorkflowConfig(agents=agents, **workflow)
        self.runs = runs
        self.tasks = load_tasks(tasks)
        self._tasks_given = tasks is not None
        self._continuing = False  # Experiment.open: run() continues the run directory
        self._task: asyncio.Task[ExperimentResults] | None = None  # start()'s
        self._say_stop = True  # stop(say=False): its caller (a panel) says so itself
        self.llm = llm
        self.seed = seed
        self.clock_spec = clock
        self.out = Path(out) if out is not None else None
        self.parallel_runs = parallel_runs
        self.metrics_interval = metrics_interval
        self.progress = progress
        self.run_dir: Path | None = None
        self._results: ExperimentResults | None = None

    @property
    def results(self) -> ExperimentResults:
        """DataFrames of the last (possibly interrupted) run; of an experiment opened with
        :meth:`open` and not run since, what its directory holds (its finished runs)."""
        if self._results is None:
            if self._continuing and self.out is not None:
                return self._results_on_disk(self.out)
            raise ConfigError("no results yet: call `await exp.run()` (or exp.run_sync()) first")
        return self._results

    @staticmethod
    def _results_on_disk(run_dir: Path) -> ExperimentResults:
        from agentlab.store.manifest import read_manifest
        from agentlab.topology.continuation import read_commit

        res = ExperimentResults(run_dir, str(read_manifest(run_dir).get("status", "stopped")))
        res.runs_done = int((read_commit(run_dir) or {}).get("runs_done", 0))
        return res

    def config(self) -> dict[str, Any]:
        """The experiment's configuration (stored in ``run.json``)."""
        llm: Any = self.llm if isinstance(self.llm, str) else getattr(self.llm, "to_dict", dict)()
        clock = self.clock_spec if isinstance(self.clock_spec, str) else repr(self.clock_spec)
        return {
            "topologies": self.topologies, "runs": self.runs, "llm": llm, "seed": self.seed,
            "clock": clock, "parallel_runs": self.parallel_runs, "tasks": len(self.tasks),
            "metrics_interval": self.metrics_interval, "workflow": self.cfg.to_dict(),
            "max_error_share": self.max_error_share,
            "model": llm if isinstance(llm, str) else llm.get("model"),
            # the default tasks are the dataset's; given ones are kept (Experiment.open)
            "tasks_given": self._tasks_given,
            **({"task_list": self.tasks} if self._tasks_given else {}),
        }  # fmt: skip

    @classmethod
    def open(
        cls,
        out: str | Path,
        *,
        progress: bool = True,
        clock: str | Clock | None = None,
        tasks: Sequence[dict[str, Any]] | None = None,
    ) -> Experiment:
        """The experiment in ``out`` (from its ``run.json``), to continue: its
        :meth:`run` keeps the runs that finished, cuts the rows of those in flight when
        it was interrupted (stopped, a crash, a kill) and runs the rest. On the virtual
        clock with ``parallel_runs=1`` the result is the uninterrupted run's (see
        ``continuation.py``).

        Raises:
            ConfigError: not an experiment, or one that cannot be continued (a clock
                object or given tasks it did not keep: pass ``clock=`` / ``tasks=``).
        """
        from agentlab.topology.continuation import experiment_args

        exp = cls(**experiment_args(out, clock=clock, tasks=tasks), progress=progress,
                  exist_ok=True)  # fmt: skip
        exp._continuing = True
        return exp

    def _client(self, clock: Clock) -> Any:
        from agentlab.llm import client_on_clock

        return client_on_clock(self.llm, clock, seed=self.seed)

    def _plan(self) -> list[tuple[str, int, dict[str, Any]]]:
        rng = random.Random(self.seed)
        plan = []
        for topo in self.topologies:
            order = list(self.tasks)
            rng.shuffle(order)
            plan += [(topo, k, order[k % len(order)]) for k in range(self.runs)]
        return plan

    async def run(self) -> ExperimentResults:
        """Run every (topology, run) and write the run directory; returns the results.

        Interrupting (the stop button, Ctrl-C, cancelling the task) stops cleanly: one
        line says how far it got, the results of the finished runs come back (and stay in
        ``exp.results``), and ``run.json`` says ``status="stopped"``;
        ``Experiment.open(out).run()`` runs the rest (after a crash or a kill too).

        Raises:
            ConfigError: this object has run before. A second run would repeat its runs
                (the same seed gives the same runs under the same ids) and pool their calls
                with the first run's in one traffic record: build a new ``Experiment``.
        """
        if self._results is not None:
            done, total = self._results.runs_done, len(self.topologies) * self.runs
            raise ConfigError(
                f"this Experiment already ran into {self.run_dir} ({done} of {total} runs, "
                f"status {self._results.status!r}); its results stay in exp.results. A second "
                "run() would repeat the same runs under the same ids and pool their calls "
                "with the first run's traffic. To run it again, build a new Experiment "
                "(exist_ok='replace' writes over that directory; another out= keeps both)"
            )
        run_dir = self.out or Path(tempfile.mkdtemp(prefix="agentlab-topology-"))
        lock = self._take(run_dir)
        try:
            if self.exist_ok is True and not self._continuing:  # the same experiment: go on
                from agentlab.topology.continuation import continues

                self._continuing = continues(run_dir, self.config())
            commit = None
            if self._continuing:  # Experiment.open, exist_ok=True: back to the last finished run
                from agentlab.topology.continuation import cut_to_commit, read_commit

                commit = read_commit(run_dir)
                cut_to_commit(run_dir, commit)
            clock = self._clock(commit)
            client = self._client(clock)
            if commit is not None and commit.get("llm") is not None and clock.is_virtual:
                client.restore_state(commit["llm"])  # what the next run's timings depend on
            return await self._run(run_dir, clock, client, commit)
        finally:
            lock.release()

    def _clock(self, commit: dict[str, Any] | None) -> Clock:
        """The clock; continuing on a virtual clock: at the last commit's time."""
        if not isinstance(self.clock_spec, str):
            return self.clock_spec
        if commit is not None and self.clock_spec == "virtual":
            from agentlab.core.clock import VirtualClock

            return VirtualClock(start=float(commit["ts"]))
        return clock_from_name(self.clock_spec)

    def start(self, *, progress: bool | None = None) -> asyncio.Task[ExperimentResults]:
        """:meth:`run` as a background task of the running loop (a notebook's), returned
        at once: ``agentlab.live(exp)`` starts it so and follows ``out`` (a temporary
        directory when none was given); ``await`` the task for the results,
        ``task.cancel()`` stops it as the stop button stops an awaited run.
        ``progress``: its progress bar (``None``: as built; ``live`` passes ``False``, its
        panel counting the runs)."""
        if self._results is not None or self._task is not None:
            raise ConfigError(f"this Experiment already ran into {self.run_dir or self.out}: "
                              "build a new one, or continue it with Experiment.open(out)")  # fmt: skip
        loop = require_running_loop(
            "start() (and live()) runs the experiment as a background task of a running event "
            "loop (a notebook's); in a script use exp.run_sync(), then agentlab.show(out)"
        )
        if self.out is None:
            self.out = Path(tempfile.mkdtemp(prefix="agentlab-topology-"))
        if progress is not None:
            self.progress = progress
        self._task = loop.create_task(self.run())
        self._task.add_done_callback(_say_failure)
        return self._task

    def stop(self, *, say: bool = True) -> None:
        """End a run :meth:`start` began, as the kernel's stop button ends an awaited
        :meth:`run`: at once, the run in flight dropped (status ``stopped``;
        ``Experiment.open(out).run()`` runs it with the rest). Returns at once; await the
        task for the results. ``say=False``: no line of its own under the cell (the
        experiment panel of ``live``, whose *stop* this is, says it)."""
        task = self._task
        if task is None or task.done():
            return
        self._say_stop = say
        task.cancel()

    def _take(self, run_dir: Path) -> Any:
        """The run's writer lock, then what ``exist_ok`` says about an existing run."""
        from agentlab.store.lifecycle import claim_run_dir

        return claim_run_dir(run_dir, self.exist_ok, what="Experiment",
                             keep_means="to continue it: the same experiment's finished runs "
                             "are kept")  # fmt: skip

    async def _run(
        self, run_dir: Path, clock: Clock, client: Any, commit: dict[str, Any] | None
    ) -> ExperimentResults:
        self.run_dir = run_dir
        from agentlab.runtime.services import RunServices
        from agentlab.store import catalog, write_manifest
        from agentlab.store.lifecycle import mark_status

        write_manifest(run_dir, kind="topology_experiment", config=self.config(), seed=self.seed)
        services = RunServices(
            run_dir, client, seed=self.seed, clock="virtual" if clock.is_virtual else "real"
        )
        services.bind_clock(clock)
        replay = services.replay
        catalog.register(
            replay, ("llm_calls", "llm_attempts", "messages", "experiment_runs"), module=__name__
        )
        rclient = services.llm
        results = self._results = ExperimentResults(run_dir, "running")
        done: list[str] = list(commit["done"]) if commit is not None else []
        results.runs_done = len(done)
        last = [commit]  # the latest commit (its marks continue into the next)
        state: dict[str, Any] = {"topology": None}
        sampler = asyncio.ensure_future(
            sample_metrics(
                client,
                clock,
                replay,
                state,
                self.metrics_interval,
                first_at=(commit or {}).get("next_sample"),
            )
        )
        total = len(self.topologies) * self.runs
        bar = _progress(total, self.progress)
        if bar is not None and done:
            bar.update(len(done))
        simulated = str(getattr(client, "model", "")).startswith("sim/")
        watch = FailureWatch(self.max_error_share, total, commit)
        start = clock.now()  # (where a continuation of no kept run starts its clock)

        def job(topo: str, k: int, task: dict[str, Any]) -> Any:
            async def one() -> None:
                state["topology"] = topo
                run_id = _run_id(topo, k)
                tracer = services.trace  # one trace per repetition: experiment.run → stage → call
                ctx = RunContext(rclient, self.cfg, topo, run_id, task, clock,
                                 services.message_sink(run_id), simulated, tracer=tracer)  # fmt: skip
                with tracer.trace_span("experiment.run", **{
                        "agentlab.run_id": run_id, "agentlab.topology": topo,
                        "agentlab.task_id": task["id"]}) as span:  # fmt: skip
                    row = await run_workflow(ctx)
                    span.set_attributes(**{"agentlab.status": row["status"]})
                replay.append("experiment_runs", {**row, "schema_version": 1})
                results.runs_done += 1
                done.append(run_id)
                from agentlab.topology.continuation import write_commit

                services.flush()  # (a commit names only runs whose every row is on disk)
                alone = self.parallel_runs == 1  # the log holds exactly the finished runs
                learned = client.export_state() if alone and clock.is_virtual else None
                last[0] = write_commit(
                    run_dir,
                    last[0],
                    done,
                    clock.now(),
                    learned,
                    next_sample=state.get("next_sample"),
                    interleaved=not alone,
                )
                if bar is not None:
                    bar.update(1)
                why = watch.finished(row, last[0])
                if why is not None:
                    self._stop_failing(run_dir, watch, why, start, results.runs_done, total)

            return one

        status: RunStatus = "stopped"  # interrupted (Ctrl-C, cancelled cell) unless below
        error: str | None = None
        interrupted = False
        gc_tuning = GCTuning()  # (as a society's run: the heap frozen, gen-1 threshold 100)
        try:
            finished = set(done)
            todo = [p for p in self._plan() if _run_id(p[0], p[1]) not in finished]
            await gather_limited([job(*p) for p in todo], self.parallel_runs)
            status = "done"
        except (KeyboardInterrupt, asyncio.CancelledError):
            # the kernel's stop button / Ctrl-C: as Society.run, one line and the results
            interrupted = True
        except Exception as exc:
            status, error = "failed", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            gc_tuning.restore()
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            if bar is not None:
                bar.close()
            services.flush()
            results.status = status
            mark_status(run_dir, status, error=error)
        if interrupted:
            if self._say_stop:  # (a panel's stop: the panel says it, once)
                print(f"experiment stopped after {results.runs_done} of {total} runs; their "
                      "results are returned (and in exp.results); Experiment.open("
                      f"{str(run_dir)!r}).run() runs the rest", file=sys.stderr)  # fmt: skip
            from agentlab.runtime.society_tick import uncancel

            uncancel()
        return results

    def _stop_failing(
        self, run_dir: Path, watch: FailureWatch, why: str, start: float, done: int, total: int
    ) -> None:
        """Raise :class:`RunsFailedError` for the stop rule, the commit back before the
        failed runs since the last success (``run_failures.py``)."""
        from agentlab.topology.continuation import restore_commit

        restore_commit(run_dir, watch.keep, start, interleaved=self.parallel_runs != 1)
        again = (f" The {watch.streak} failed run(s) since the last that succeeded are not "
                 f"kept: fix the cause, then Experiment.open({str(run_dir)!r}).run() runs "
                 "them with the rest.")  # fmt: skip
        raise RunsFailedError(
            f"{run_dir}: the experiment stopped after {done} of {total} runs: {why}.{again} "
            "Experiment(..., max_error_share=None) never stops for failed runs"
        )

    def __repr__(self) -> str:
        r = self._results
        state = "not run" if r is None else f"{r.status}, {r.runs_done} runs done"
        llm = self.llm if isinstance(self.llm, str) else getattr(self.llm, "model", self.llm)
        return (
            f"Experiment(topologies={self.topologies!r}, agents={self.cfg.agents}, "
            f"runs={self.runs}, llm={str(llm)!r}, out={str(self.out) if self.out else None!r}: "
            f"{state})"
        )

    def run_sync(self) -> ExperimentResults:
        """:meth:`run` for scripts; refuses inside a running loop (use ``await`` there).

        Ctrl-C returns the partial results with a warning instead of a traceback.
        """
        refuse_in_running_loop("an event loop is running (Jupyter?): use `await exp.run()`")
        try:
            return asyncio.run(self.run())
        except KeyboardInterrupt:
            warnings.warn("experiment interrupted; returning partial results", stacklevel=2)
            return self.results


def _say_failure(task: asyncio.Task[ExperimentResults]) -> None:
    """A background run's failure, said under the cell that started it: ``live(exp)`` draws
    no status, and an exception nobody awaits was only logged when the task was collected
    (if ever). Awaiting the task still raises it."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        print(f"experiment failed: {type(exc).__name__}: {exc}", file=sys.stderr)


def _run_id(topology: str, k: int) -> str:
    """A workflow run's id: ``star-0007`` (its rows' ``run_id``, a commit's ``done``)."""
    return f"{topology}-{k:04d}"


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from agentlab.core.progress_bar import progress_bar

    return progress_bar(total, "topology runs", "run")
