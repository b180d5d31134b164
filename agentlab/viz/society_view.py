"""SocietyView: the society's vital signs per committed tick, with charts and controls.

It follows the ``timeline`` dataset (one row per committed tick). The numbers per tick go
to the browser as float64 binary buffers (snapshot + delta, see ``_follow.Journal``); the
headline figures travel as a small JSON dict. Rates are per second of the society's clock
that the tick's work took (:meth:`SocietyModel.tick_seconds`): its own wall time under the
real clock, its simulated time under the virtual clock; the time between ticks when nothing
ran (paused, stopped, a resume the next day) is no tick's. Start / pause / resume / stop
drive the attached ``Society`` through its control surface (``status``, ``pause()``,
``resume()``, ``stop()``, ``run()``), which acts between ticks; the tick in progress is
shown from ``Society.tick_progress()``. The static snapshot is refreshed once per run end,
whoever started the run (:meth:`SocietyView._after_run`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import traitlets as t

from agentlab.viz._base import LiveWidget, call_on_loop, load_css, load_esm, owner_loop
from agentlab.viz._cells import cell_running, follow_cells, forget_cells
from agentlab.viz._society_model import (
    NO_TICKS,
    RATES_EMPTY,
    SERIES_COLUMNS,
    STATIC_CHARTS,
    SocietyModel,
    decode_series,
    empty_states,
)
from agentlab.viz._static import card, esc, fmt_num, line_chart_svg, svg_img, tiles_html

__all__ = [
    "NO_TICKS",
    "RATES_EMPTY",
    "SERIES_COLUMNS",
    "Controllable",
    "SocietyModel",
    "SocietyView",
    "decode_series",
    "empty_states",
]


@runtime_checkable
class Controllable(Protocol):
    """The control surface of :class:`agentlab.runtime.Society` the view drives (viz
    does not import runtime: layers import downward only)."""

    @property
    def status(self) -> str:
        """``idle``, ``running``, ``paused``, ``stopped`` or ``done``."""
        ...

    @property
    def paused(self) -> bool:
        """True while a pause holds (or will hold, after the tick in progress)."""
        ...

    @property
    def tick(self) -> int:
        """The last committed tick."""
        ...

    def pause(self) -> None:
        """Hold the run loop between ticks."""

    def resume(self) -> None:
        """Let a paused run loop go on."""

    def stop(self) -> None:
        """End the run loop after the tick in progress."""

    def start(self, ticks: int | None = None, *, progress: bool | None = None) -> Any:
        """Run ``ticks`` more ticks (``None``: until ``stop()``) as a task of the running
        loop, returned; ``progress``: its own tick bar (the view turns it off: its panel
        shows the ticks)."""

    def tick_progress(self) -> dict[str, Any]:
        """The tick in progress so far (see ``Society.tick_progress``)."""
        ...


#: which buttons are enabled in each society status
ENABLED = {
    "idle": ("start",),
    "stopped": ("start",),
    "done": ("start",),
    "failed": ("start",),
    "running": ("pause", "stop"),
    "pausing": ("resume", "stop"),
    "stopping": (),
    "paused": ("resume", "stop"),
}


#: the run statuses (``store.lifecycle``) a view with no society shows as they are
RUN_ENDED = ("done", "stopped", "failed", "interrupted")

#: ``SocietyView._snapped`` while the view is being built (no run end is new yet)
_UNSET = object()


class SocietyView(LiveWidget):
    """Tick, agents, agent-steps/s, LLM calls/s, tokens, errors, AIMD limit, in-flight.

    Args:
        run: run directory, store ``Run`` or ``Society``.
        society: the ``Society`` to drive from the start / pause / resume / stop buttons.
        ticks: ticks each *start* runs (``None``: run until *stop*).
        **kwargs: see :class:`~agentlab.viz._base.LiveWidget`.
    """

    _esm = load_esm("society_view.js", charts=True)
    _css = load_css()

    datasets = ("timeline",)
    summary = t.Dict().tag(sync=True)
    series_columns = t.List(t.Unicode(), default_value=list(SERIES_COLUMNS)).tag(sync=True)
    series_base = t.Bytes(b"").tag(sync=True)
    series_delta = t.Bytes(b"").tag(sync=True)
    controls = t.Bool(False).tag(sync=True)
    enabled = t.List(t.Unicode()).tag(sync=True)
    status = t.Unicode("following").tag(sync=True)
    progress = t.Dict().tag(sync=True)
    last_action = t.Unicode("").tag(sync=True)
    error = t.Unicode("").tag(sync=True)
    state_line = t.Unicode("").tag(sync=True)
    #: what each chart says while it has no point (:func:`empty_states`)
    chart_empty = t.List(t.Unicode(), default_value=empty_states(0)).tag(sync=True)
    #: the run's errors in the one vocabulary (``ErrorCounts.describe()`` of
    #: ``agentlab.store.summary.summarize_run``: what ``report`` and ``runs`` print)
    errors_line = t.Unicode("").tag(sync=True)

    def __init__(
        self,
        run: Any,
        *,
        society: Controllable | None = None,
        ticks: int | None = None,
        **kwargs: Any,
    ) -> None:
        if society is not None and not isinstance(society, Controllable):
            from agentlab.errors import ConfigError

            raise ConfigError(
                f"society={society!r} has no control surface (status, pause, resume, stop, "
                "run, tick_progress); pass an agentlab.Society or leave it out"
            )
        self._model = SocietyModel()
        self._society = society
        self._ticks = ticks
        self.task: asyncio.Future[Any] | None = None
        # the kernel's loop: the run task lives there, and button presses (which arrive on
        # a subshell thread in JupyterLab) are handed to it (see _base.call_on_loop)
        self._loop = owner_loop()
        # the run's summary, re-read at most once a second (_poll_run): its error counts,
        # and, for a view with no society here, the status run.json records
        self._polled_at, self._errors_text, self._run_ended = -math.inf, "", ""
        self._seen: tuple[Any, ...] = ()
        # the tick a stop pressed here ends the run after (None: none pressed). The run
        # loop stops only once the tick in progress commits, many seconds on a real
        # clock; till then the view said "running" with pause and stop on, as if the press
        # was lost. Society has no public word for a pending stop, so the view keeps it
        self._stop_after: int | None = None
        #: called (on the event loop) when a run of the society ends, whoever started it
        self.on_done: Callable[[], None] | None = None
        #: the run end the snapshot was last refreshed for (``_after_run``); ``_UNSET``
        #: while building, and ``_resend``: sent while no cell ran, again at the next cell
        self._snapped: Any = _UNSET
        self._resend = self._in_after_run = False
        super().__init__(run, **kwargs)
        self.controls = society is not None
        with self._follower.lock:  # (the follower thread reads run.json too)
            self._snapped = self._end_key()  # (what it shows now is in the first snapshot)
        follow_cells(self)

    def _ingest(self, dataset: str, rows: list[dict[str, Any]]) -> bool:
        if not self._model.ticks:  # the rates' clock: known before the first rows
            self._model.virtual = self._virtual_clock()
        return self._model.ingest(rows)

    def _virtual_clock(self) -> bool:
        """Whether the society runs on the virtual clock: its clock's word, else what its
        ``run.json`` config says (a run written elsewhere)."""
        clock = getattr(self._society, "clock", None)
        if clock is not None:
            return bool(getattr(clock, "is_virtual", False))
        from agentlab.store.manifest import read_manifest

        config = read_manifest(self.run_dir).get("config")
        return isinstance(config, dict) and config.get("clock") == "virtual"

    def _frame(self) -> dict[str, Any]:
        traits = self._model.frame()
        traits["chart_empty"] = empty_states(self._model.ticks)
        status = self._status()
        traits["status"] = status
        # (buttons off once the directory holds another run: they would drive the old one)
        drives = self._society is not None and not self.outdated
        traits["enabled"] = list(ENABLED.get(status, ())) if drives else []
        traits["progress"] = self._progress(status)
        traits["state_line"] = self._state_line(status, traits["progress"])
        self._poll_run()
        traits["errors_line"] = self._errors_text  # an unchanged trait is not re-sent
        return traits

    def _poll_run(self, every_s: float = 1.0) -> None:
        """Re-read the run's summary at most every ``every_s``: one ``run.json`` read and
        one writer-lock probe serve both the error counts (as ``report`` prints them; the
        log is read only from where the last call stopped) and the recorded status."""
        now = time.monotonic()
        if now - self._polled_at < every_s:
            return
        self._polled_at = now
        from agentlab.store.summary import summarize_run

        try:
            summary = summarize_run(self.run_dir)
        except Exception:  # not a run (yet), a torn manifest: the tiles still show
            self._errors_text = ""
            return
        self._errors_text = summary.errors.describe()
        # a bare log (no run.json with a status) is "interrupted" by rule only: a log
        # being written elsewhere, so the view keeps following it
        if summary.status_recorded:
            self._run_ended = summary.status

    def _state_line(self, status: str, progress: dict[str, Any]) -> str:
        """One sentence: what the society is doing and what the buttons will do."""
        tick = self._tick()
        n = "–" if tick is None else f"{int(tick)}"
        if self.outdated:  # (the line above the panels says why; the buttons are off)
            return f"tick {n} of this view's run; its directory now holds another: buttons off"
        if self._society is None and status in RUN_ENDED:
            # a run written elsewhere (or before this kernel): what its run.json says
            return {
                "done": f"done: tick {n} committed (read from the run log)",
                "stopped": f"stopped after tick {n} (read from the run log)",
                "failed": f"failed after tick {n} (read from the run log)",
                "interrupted": f"interrupted after tick {n}: its writer ended without "
                "marking the run ended (a crash or a kill); resume it from its directory",
            }[status]
        lines = {
            "idle": "ready: press start to run",
            "running": f"running tick {progress.get('tick', '–')} (tick {n} committed); "
            "pause and stop act after the tick in progress",
            "pausing": f"pausing: tick {progress.get('tick', '–')} finishes first, then the "
            "run holds",
            "stopping": f"stopping: tick {progress.get('tick', '–')} finishes first, then the "
            "run stops (start continues it)",
            "paused": f"paused after tick {n}: press resume or stop (a cell awaiting "
            "dash.task waits until then)",
            # (the tick start runs next, as the stop's own line says: "continues from tick
            # n + 1"; "from tick n" read as tick n run again)
            "stopped": f"stopped after tick {n}: start continues with tick "
            f"{'–' if tick is None else int(tick) + 1}",
            "done": f"done: tick {n} committed; start runs more ticks",
            "failed": f"failed after tick {n}: {self.error}",
            "following": f"following the run log (tick {n})",
            "static": f"snapshot of the run log (tick {n})",
        }
        return lines.get(status, status)

    def _status(self) -> str:
        soc = self._society
        if soc is None:
            ended = self._run_status()
            if ended is not None:
                return ended
            return "following" if self._follower.running else "static"
        status = soc.status
        task = self.task
        if (
            status in ("stopped", "done")
            and task is not None
            and task.done()
            and not task.cancelled()
            and task.exception() is not None
        ):
            return "failed"
        if self._stopping(status):
            return "stopping"  # stop pressed: ends once the tick in progress commits
        if status == "running" and soc.paused:
            return "pausing"  # pause requested: holds once the tick in progress commits
        return status

    def _stopping(self, status: str) -> bool:
        """A stop pressed here has not ended the run yet. Bounded by its tick too: a run
        a cell starts right after the stopped one (before the follower saw it end) is not
        the one stopped."""
        soc = self._society
        after = self._stop_after
        return (
            soc is not None and after is not None and status == "running" and soc.tick < after
        )  # fmt: skip

    def _run_status(self) -> str | None:
        """The run's status when ``run.json`` says it has ended (``done``, ``stopped``,
        ``failed``, ``interrupted``: a live status whose writer is gone), else ``None``: a
        view with no society in this kernel says "done", not "following", once the run
        is over."""
        self._poll_run()
        return self._run_ended if self._run_ended in RUN_ENDED else None

    def _progress(self, status: str) -> dict[str, Any]:
        soc = self._society
        if soc is None or status not in ("running", "pausing", "stopping"):
            return {}
        p = dict(soc.tick_progress())
        started = p.get("started")
        if isinstance(started, int | float):
            p["elapsed_s"] = max(0.0, time.time() - started)
        return {k: v for k, v in p.items() if isinstance(v, int | float | str | None)}

    def _watch(self) -> bool:
        # status, and the tick in progress, change between the rows of the log
        soc = self._society
        if soc is None:  # a run followed from its log: its end is in run.json, not a row
            ticks = self._model.ticks
            if self._seen and self._seen[1] != ticks:
                # new ticks: their run's status now, not up to a second old (a run that
                # began and ended between two looks would read "done" all along)
                self._polled_at = -math.inf
            ended = (self._run_status(), ticks)
            changed = ended != self._seen
            self._seen = ended
            if changed and ended[0] is not None:
                call_on_loop(self._home_loop, self._after_run)
            return changed
        if soc.status not in ("running", "paused"):
            self._stop_after = None  # (the stopped run has ended: the next is not stopping)
        p = soc.tick_progress() if soc.status == "running" else {}
        seen = (soc.status, soc.paused, soc.tick, p.get("tick"), p.get("llm_calls"),
                p.get("in_flight"), self._stop_after)  # fmt: skip
        task = self.task
        if task is not None and task.done() and not self.error:
            exc = None if task.cancelled() else task.exception()
            if exc is not None:
                self.error = f"{type(exc).__name__}: {exc}"
        changed = seen != self._seen
        self._seen = seen
        if changed and soc.status in RUN_ENDED:  # a run ended (whoever started it)
            call_on_loop(self._loop, self._after_run)
        return changed

    def start_run(self) -> asyncio.Future[Any]:
        """Start ``society.run(ticks)`` in the background (what *start* does:
        ``Society.start``, which refuses a society already running); the task is kept as
        :attr:`task`. Requires a running event loop (Jupyter has one)."""
        soc = self._require_society()
        self.error = ""
        self._stop_after = None
        # no tick bar under the panel: the panel shows the ticks and the tick in progress
        # (a notebook showed both, the bar a second progress display of the same run)
        self.task = soc.start(self._ticks, progress=False)
        self.task.add_done_callback(self._on_done)
        self._follower.coalescer.mark()
        return self.task

    def _on_done(self, _task: asyncio.Future[Any]) -> None:
        # the run loop ended (done, stopped or failed): one last frame now, on the loop
        self._watch()
        self.refresh()
        self._after_run()

    # --- the static snapshot at each run end -------------------------------------------

    def _end_key(self) -> tuple[str, Any] | None:
        """``(status, tick)`` once the society's run has ended (``None`` while one runs or
        none has): a new key is a run end the snapshot has not shown."""
        status = self._status()
        if status not in RUN_ENDED:
            return None
        return status, self._tick()

    def _tick(self) -> Any:
        """The last committed tick: the society's, else the log's last row (None: none)."""
        if self._society is not None:
            return self._society.tick
        tick = self._model.last.get("tick")  # (NaN: a row without one, as summary() says)
        return None if tick is None or math.isnan(tick) else tick

    def _after_run(self) -> None:
        """On the kernel's loop: refresh the static snapshot if a run ended since it was
        last refreshed. Once per run end (and on ``stop()``), never per tick: an update
        replaces the output, and JupyterLab then draws the widget view anew.

        Called when a run this view started ends (its task's done callback), when the
        follower sees the society's status end (a run started by ``society.run()`` in a
        cell, a kernel interrupt's stop, a run written elsewhere), and after every cell
        (``_cells``), which catches a run that ended inside the cell before nbclient reads
        the cell's reply. Sent while no cell runs, it goes out again as the next cell.
        """
        if self._snapped is _UNSET or self._in_after_run:
            return  # (building; or called again from the refresh below, by the follower)
        if self.task is not None and not self.task.done():
            return  # (a run started here ends in its task's done callback, as its cell)
        key = self._end_key()
        if key is None or key == self._snapped:
            return
        self._in_after_run = True
        try:
            self.refresh()  # (the last rows: the tick and the status of the same moment)
        finally:
            self._in_after_run = False
        self._snapped = self._end_key() or key
        self._resend = cell_running() is False
        self._publish()

    def _publish(self) -> None:
        self.update_static()
        if self.on_done is not None:  # (a dashboard: its snapshot holds this one)
            self.on_done()

    def _cell_starts(self) -> None:
        """A cell starts: a snapshot sent while no cell ran goes out again, as this cell
        (nbclient reads only the messages of the cell it runs)."""
        if self._resend:
            self._resend = False
            self._publish()

    def _cell_ends(self) -> None:
        """A cell has run: a run that ended inside it is sent as it, before its reply."""
        if self.following:  # (stop(): the view stopped following, its snapshot with it)
            self._after_run()

    def close(self) -> None:
        """Stop the thread, close the comm and hear no more cells."""
        forget_cells(self)
        super().close()

    def _require_society(self) -> Controllable:
        if self._society is None:
            from agentlab.errors import ConfigError

            raise ConfigError("this view has no society attached; use live(society)")
        return self._society

    def _on_front_msg(self, msg: dict[str, Any]) -> None:
        if msg.get("type") != "control" or self._society is None:
            return
        action = str(msg.get("action"))
        if action not in ("start", "pause", "resume", "stop"):
            return
        # on the kernel's loop, which this wakes (the message may arrive on another thread)
        call_on_loop(self._loop, lambda: self.control(action))

    def control(self, action: str) -> None:
        """Do what a button does (``start``, ``pause``, ``resume``, ``stop``), on the
        society's loop; a press the current status does not allow is ignored (the page can
        lag the kernel)."""
        soc = self._require_society()
        status = self._status()
        if action not in ENABLED.get(status, ()):
            return
        if action == "start":
            self.start_run()
        elif action == "pause":
            soc.pause()
        elif action == "resume":
            soc.resume()
        elif action == "stop":
            if soc.status == "running":  # (a paused run ends at once)
                self._stop_after = soc.tick + 1  # the tick in progress
            soc.stop()
        self.last_action = action
        self._follower.coalescer.mark()

    # --- static form -------------------------------------------------------------------

    def _text(self) -> str:
        s = self.summary or {}
        return (
            f"SocietyView {self.run_dir}: {self.status}, tick {fmt_num(s.get('tick'))}, "
            f"{fmt_num(s.get('agents'))} agents, {fmt_num(s.get('total_steps'))} steps, "
            f"{fmt_num(s.get('total_llm_calls'))} LLM calls, "
            f"{fmt_num(s.get('total_tokens'))} tokens, {fmt_num(s.get('total_errors'))} step errors"
        )

    def _static_html(self) -> str:
        s = self._model.summary()
        tiles = tiles_html(
            [
                (fmt_num(s.get("tick")), "tick"),
                (fmt_num(s.get("agents")), "agents"),
                (fmt_num(s.get("total_steps")), "agent-steps"),
                (fmt_num(s.get("total_llm_calls")), "LLM calls"),
                (fmt_num(s.get("total_tokens")), "tokens"),
                (fmt_num(s.get("total_errors")), "step errors"),
                (fmt_num(s.get("mean_calls_per_s")), "LLM calls/s (clock)"),
                (fmt_num(s.get("clock_s")), "clock s in ticks"),
            ]
        )
        rows = list(self._model.journal.items)
        col = {c: i for i, c in enumerate(SERIES_COLUMNS)}
        ticks = [r[col["tick"]] for r in rows]
        charts = "".join(
            svg_img(
                line_chart_svg(
                    {label: (ticks, [r[col[key]] for r in rows]) for key, label in series},
                    x_label="tick",
                    y_label=y_label,
                    integer_x=True,
                    empty=empty,
                ),
                alt,
            )
            for (alt, y_label, series, _), empty in zip(
                STATIC_CHARTS, empty_states(self._model.ticks), strict=True
            )
        )
        status = self._status() if self._society is not None else "finished"
        err = f'<div style="color:#c00">{esc(self.error)}</div>' if self.error else ""
        self._polled_at = -math.inf
        self._poll_run()
        errs = self._errors_text
        line = f'<div style="color:#555">{esc(self._state_line(status, {}))}'
        line += f"<br>errors: {esc(errs)}</div>" if errs else "</div>"
        body = f'{line}{tiles}<div style="display:flex;flex-wrap:wrap">{charts}</div>{err}'
        return card("society", "Society", f"{status} · {self.run_dir}", body)
