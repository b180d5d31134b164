"""ExperimentView: a topology experiment's runs as they finish, and a stop button.

``live(experiment)`` runs the experiment as a background task of the notebook's loop (the
cell returns, the kernel stays free): the conversation and IAT panels follow its log, a
tqdm bar counted its runs, and the only way to stop it was ``dash.task.cancel()`` typed in
another cell — the kernel's stop button interrupts a cell, and no cell is running. This
panel counts the runs (done of planned, failed), the LLM calls, tokens and failed calls
from the run log, says what the experiment is doing, and its *stop* button does what the
stop button does to an awaited ``exp.run()``: the run in flight is dropped (its calls cut), the
experiment is marked ``stopped`` and ``Experiment.open(dir).run()`` runs the rest.

Shown over an experiment's directory with no task in this kernel (``show(dir)``), it
reads the status ``run.json`` records and has no button.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

import traitlets as t

from agentlab.viz._base import LiveWidget, call_on_loop, load_css, load_esm, owner_loop
from agentlab.viz._static import card, esc, fmt_num, tiles_html

__all__ = ["ExperimentView"]

#: what each status lets the panel's button do
ENABLED = {"running": ("stop",)}
#: statuses ``run.json`` records for an experiment that has ended
RUN_ENDED = ("done", "stopped", "failed", "interrupted")


class ExperimentView(LiveWidget):
    """Runs done of planned, failed runs, LLM calls, tokens, failed calls; *stop*.

    Args:
        run: the experiment's run directory (or a store ``Run``).
        task: the experiment's background task (``Experiment.start()``): the panel's status
            and its *stop* button (``task.cancel()``); ``None``: the status ``run.json``
            records, no button.
        stop: what *stop* calls instead of ``task.cancel()`` (``live`` passes the
            experiment's ``stop(say=False)``: the panel says it stopped, the experiment
            prints no second line under the cell).
        **kwargs: see :class:`~agentlab.viz._base.LiveWidget`.
    """

    _esm = load_esm("experiment_view.js")
    _css = load_css()

    datasets = ("experiment_runs", "llm_calls")
    summary = t.Dict().tag(sync=True)
    status = t.Unicode("following").tag(sync=True)
    controls = t.Bool(False).tag(sync=True)
    enabled = t.List(t.Unicode()).tag(sync=True)
    state_line = t.Unicode("").tag(sync=True)
    error = t.Unicode("").tag(sync=True)

    def __init__(
        self,
        run: Any,
        *,
        task: asyncio.Future[Any] | None = None,
        stop: Callable[[], None] | None = None,
        **kwargs: Any,
    ):
        self.task = task
        self._stop = stop  # (the experiment's own stop, quiet: this panel says it)
        self._stopping = False
        self._loop = owner_loop()  # the task's loop: presses arrive on another thread
        self._runs = {"done": 0, "failed": 0}
        self._finished: set[Any] = set()  # run ids with an experiment_runs row
        #: calls, tokens, failed calls per run id: an ended experiment counts its finished
        #: runs' (a run a stop cut short is not in its results; a continuation cuts its rows)
        self._per_run: dict[Any, list[int]] = {}
        self._planned: int | None = None
        self._parallel = 1  # runs at a time (run.json)
        self._recorded, self._polled_at = "", -math.inf
        self._seen: tuple[Any, ...] = ()
        #: called (on the event loop) when the task ends: the dashboard refreshes its
        #: snapshot then, so an executed or saved notebook keeps the final state
        self.on_done: Callable[[], None] | None = None
        super().__init__(run, **kwargs)
        self.controls = task is not None
        if task is not None:
            task.add_done_callback(self._on_done)

    # --- reading the log ---------------------------------------------------------------

    def _ingest(self, dataset: str, rows: list[dict[str, Any]]) -> bool:
        if dataset == "experiment_runs":
            for r in rows:
                self._runs["done"] += 1
                self._runs["failed"] += r.get("status") != "ok"
                self._finished.add(r.get("run_id"))
        else:
            for r in rows:
                tally = self._per_run.setdefault(r.get("run_id"), [0, 0, 0])
                tally[0] += 1
                tally[1] += int(r.get("prompt_tokens") or 0) + int(r.get("completion_tokens") or 0)
                tally[2] += r.get("outcome") != "ok"
        return bool(rows)

    def _calls(self, status: str) -> dict[str, int]:
        """LLM calls, tokens and failed calls: of every run while it runs, of the finished
        runs once it has ended (as ``exp.results.calls_df()``)."""
        ended = status in RUN_ENDED
        runs = [t for k, t in self._per_run.items() if not ended or k in self._finished]
        return {"calls": sum(t[0] for t in runs), "tokens": sum(t[1] for t in runs),
                "failed": sum(t[2] for t in runs)}  # fmt: skip

    def _poll_run(self, every_s: float = 1.0) -> None:
        """``run.json``, at most every ``every_s``: the runs it plans (topologies x runs,
        written when the experiment starts) and the status it records."""
        now = time.monotonic()
        if now - self._polled_at < every_s and self._planned is not None:
            return  # (until run.json names the plan, every frame looks: it is written first)
        self._polled_at = now
        from agentlab.store.manifest import read_manifest

        try:
            doc = read_manifest(self.run_dir)
        except Exception:  # not written yet, or torn: the counts still show
            return
        cfg = doc.get("config") or {}
        try:
            self._planned = len(cfg["topologies"]) * int(cfg["runs"])
            self._parallel = int(cfg.get("parallel_runs") or 1)
        except (KeyError, TypeError, ValueError):
            pass
        self._recorded = str(doc.get("status") or "")

    def _status(self) -> str:
        task = self.task
        if task is None:
            self._poll_run()
            if self._recorded in RUN_ENDED:
                return self._recorded
            return "following" if self._follower.running else "static"
        if not task.done():
            return "stopping" if self._stopping else "running"
        if task.cancelled():
            return "stopped"
        exc = task.exception()
        if exc is not None:
            self.error = f"{type(exc).__name__}: {exc}"
            return "failed"
        return str(getattr(task.result(), "status", "") or "done")

    def _state_line(self, status: str) -> str:
        done, planned = self._runs["done"], self._planned
        of = f"{done} of {planned}" if planned is not None else f"{done}"
        n = self._parallel
        flight = "the run in flight is" if n == 1 else f"the runs in flight ({n} at a time) are"
        lines = {
            "running": f"running: {of} runs finished; stop ends it ({flight} dropped)",
            "stopping": f"stopping: {flight} cut short ({of} runs finished)",
            "stopped": f"stopped after {of} runs; Experiment.open({self.run_dir!r}).run() "
            "runs the rest",
            "done": f"done: {of} runs",
            "failed": f"failed after {of} runs" + (
                " (the error below)" if self.error else " (its error is in run.json)"),
            "interrupted": f"interrupted after {of} runs: its writer ended without marking "
            f"the run ended (a crash or a kill); Experiment.open({self.run_dir!r}).run() "
            "runs the rest",
            "following": f"following the run log ({of} runs finished)",
            "static": f"snapshot of the run log ({of} runs finished)",
        }  # fmt: skip
        return lines.get(status, status)

    def _frame(self) -> dict[str, Any]:
        self._poll_run()
        status = self._status()
        calls = self._calls(status)
        return {
            "summary": {
                "runs_done": self._runs["done"],
                "runs_planned": self._planned,
                "runs_failed": self._runs["failed"],
                "llm_calls": calls["calls"],
                "tokens": calls["tokens"],
                "failed_calls": calls["failed"],
            },
            "status": status,
            "enabled": list(ENABLED.get(status, ())) if self.task is not None else [],
            "state_line": self._state_line(status),
        }

    def _watch(self) -> bool:
        # the status changes between rows (a stop pressed, the task ending, run.json)
        seen = (self._status(), self._planned)
        changed = seen != self._seen
        self._seen = seen
        return changed

    def _on_done(self, _task: asyncio.Future[Any]) -> None:
        self._polled_at = -math.inf  # (run.json has the final status now)
        self._watch()
        self.refresh()  # the last rows and the final status, now
        self.update_static()
        if self.on_done is not None:
            self.on_done()

    # --- the stop button ---------------------------------------------------------------

    def _on_front_msg(self, msg: dict[str, Any]) -> None:
        if msg.get("type") == "control" and msg.get("action") == "stop":
            call_on_loop(self._loop, self.stop_run)

    def stop_run(self) -> None:
        """What *stop* does: cancel the experiment's task, which ends it at once, the run
        in flight dropped (as the kernel's stop button ends an awaited ``exp.run()``)."""
        task = self.task
        if task is None or task.done() or self._stopping:
            return
        self._stopping = True
        if self._stop is not None:
            self._stop()
        else:
            task.cancel()
        self._follower.coalescer.mark()

    # --- static form -------------------------------------------------------------------

    def _tiles(self) -> list[tuple[str, str]]:
        planned = "–" if self._planned is None else fmt_num(self._planned)
        calls = self._calls(self._status())
        return [
            (f"{fmt_num(self._runs['done'])} / {planned}", "runs done / planned"),
            (fmt_num(self._runs["failed"]), "failed runs"),
            (fmt_num(calls["calls"]), "LLM calls"),
            (fmt_num(calls["tokens"]), "tokens"),
            (fmt_num(calls["failed"]), "failed calls"),
        ]

    def _text(self) -> str:
        tiles = ", ".join(f"{label} {value}" for value, label in self._tiles())
        return f"ExperimentView {self.run_dir}: {self._status()}; {tiles}"

    def _static_html(self) -> str:
        self._polled_at = -math.inf  # (the snapshot reads run.json afresh)
        status = self._status()
        line = f'<div style="color:#555">{esc(self._state_line(status))}</div>'
        err = f'<div style="color:#c00">{esc(self.error)}</div>' if self.error else ""
        body = line + tiles_html(self._tiles()) + err
        return card("experiment", "Experiment", f"{status} · {self.run_dir}", body)
