"""``show(run)`` and ``live(society)``: the panels a run has, composed in one box.

Which panels: a society run gets the society panel, its conversation and the IAT
histogram; a topology experiment its experiment panel (runs done, a stop button under
``live``), its conversation and the IAT histogram by topology; an
``AgentSystem`` run its threads; the human-input panel only where the run has human
requests. ``panels=`` overrides the choice. The box's mimebundle carries the live view
and a static HTML snapshot of every panel (see :class:`~agentlab.viz._base.StaticForm`).
"""

from __future__ import annotations

import asyncio
import html
import json
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentlab.viz._base import VIEW_CLASS, StaticForm, call_on_loop, owner_loop
from agentlab.viz._follow import run_path
from agentlab.viz.conversation import ConversationView
from agentlab.viz.experiment_view import ExperimentView
from agentlab.viz.human_input import HumanInput
from agentlab.viz.iat import IATHistogram
from agentlab.viz.society_view import Controllable, SocietyView

__all__ = ["PANELS", "Dashboard", "live", "panels_for", "show"]

#: every panel name, in display order
PANELS = ("society", "experiment", "human", "conversation", "threads", "iat")


def _kind(run_dir: Path) -> str | None:
    try:
        doc = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return None
    kind = doc.get("kind") if isinstance(doc, dict) else None
    return str(kind) if kind else None


def panels_for(run: Any) -> tuple[str, ...]:
    """The panels that fit what ``run`` contains (its manifest kind and datasets).

    A run directory with nothing in it yet (a run about to start) gets the conversation
    and IAT panels, which every kind of run writes.
    """
    d = run_path(run)
    have = {p.name for p in (d / "replay").iterdir()} if (d / "replay").is_dir() else set()
    kind = _kind(d)
    out: list[str] = []
    if kind == "society" or "timeline" in have or isinstance(run, Controllable):
        out.append("society")
    if kind == "topology_experiment" or "experiment_runs" in have:
        out.append("experiment")
    if "human_requests" in have:
        out.append("human")
    if "thread_events" in have and "messages" not in have:
        out.append("threads")
    else:
        out.append("conversation")
    out.append("iat")
    return tuple(p for p in PANELS if p in out)


class Dashboard(StaticForm):
    """The composed widgets; displays as one ``VBox``; ``stop()`` stops them all.

    Attributes:
        society, experiment, conversation, iat, human: the parts (``None`` when not
            shown).
        parts: the shown widgets, in order.
        box: the ``ipywidgets.VBox`` that is displayed.
        task: the background run task (``live``: the society's or the experiment's),
            else ``None``.
    """

    def __init__(
        self,
        run: Any,
        *,
        society: Controllable | None = None,
        ticks: int | None = None,
        group_by: str | None = "auto",
        follow: bool = True,
        max_fps: float = 20.0,
        panels: tuple[str, ...] | list[str] | None = None,
        starting: bool = False,
        task: asyncio.Future[Any] | None = None,
        stop: Callable[[], None] | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        import ipywidgets

        self._run, self._follow, self._max_fps = run, follow, max_fps
        self._given = (tuple(panels) if panels is not None else None, group_by)
        #: a view of a directory (show: no society to drive, no task) follows the run that
        #: replaces or continues the one it read; one driving a run stops and says so
        self._drives = society is not None or task is not None
        self.outdated = ""  # (the log rewritten under the panels: what the line above says)
        self.redrawn = 0  # times a view of a directory drew the run there anew
        self._outdated_lock = threading.Lock()
        self._home_loop = owner_loop()
        self._make_parts(society=society, ticks=ticks, task=task, stop=stop, ready=ready)
        # (``starting``: live() of a run it starts there itself: nothing to say meanwhile)
        self._waiting = None if starting else _waiting_note(run_path(run), follow, self.parts)
        shown = [self._waiting] if self._waiting is not None else []
        self.box = ipywidgets.VBox([*shown, *self.parts])
        self.box.add_class(VIEW_CLASS)
        self._display_id = None
        self._run_task: asyncio.Future[Any] | None = task  # live(experiment)'s

    def _make_parts(self, **given: Any) -> None:
        """Build the panels (``given``: the society, ticks, task, stop and ready that the
        society and experiment panels and the followers take)."""
        run, society = self._run, given["society"]
        panels, group_by = self._given
        chosen = panels if panels is not None else panels_for(society or run)
        if group_by == "auto":  # society calls carry no topology: one histogram
            group_by = None if "society" in chosen else "topology"
        bad = [p for p in chosen if p not in PANELS]
        if bad:
            from agentlab.errors import ConfigError

            raise ConfigError(f"unknown panels {bad!r}; valid: {', '.join(PANELS)}")
        kw: dict[str, Any] = {"follow": self._follow, "max_fps": self._max_fps,
                              "ready": given["ready"]}  # fmt: skip
        self.society = (
            SocietyView(run, society=society, ticks=given["ticks"], **kw)
            if "society" in chosen
            else None
        )
        self.experiment = (
            ExperimentView(run, task=given["task"], stop=given["stop"], **kw)
            if "experiment" in chosen
            else None
        )
        self.human = HumanInput(run, **kw) if "human" in chosen else None
        conv: ConversationView | None = None
        if "conversation" in chosen:
            conv = ConversationView(run, **kw)
        elif "threads" in chosen:
            conv = ConversationView(run, dataset="thread_events", **kw)
        self.conversation = conv
        self.iat = IATHistogram(run, group_by=group_by, **kw) if "iat" in chosen else None
        self.panels = chosen
        self.parts: list[Any] = [
            w
            for w in (self.society, self.experiment, self.human, self.conversation, self.iat)
            if w is not None
        ]
        for part in (self.society, self.experiment):  # the end of a run started here
            if part is not None:
                part.on_done = self._finished
        for w in self.parts:
            w.on_outdated = self._outdated

    @property
    def task(self) -> asyncio.Future[Any] | None:
        """The background run task started by *start*, by ``live(society, ticks)`` or by
        ``live(experiment)``."""
        if self._run_task is not None:
            return self._run_task
        return None if self.society is None else self.society.task

    def start(self) -> asyncio.Future[Any]:
        """Run the society in the background, as the *start* button does."""
        if self.society is None:
            from agentlab.errors import ConfigError

            raise ConfigError("this dashboard has no society panel; use live(society)")
        return self.society.start_run()

    def stop(self) -> None:
        """Stop following (last frames stay visible; the static snapshot is refreshed)."""
        for w in self.parts:
            w.stop()
        self.update_static()

    def _outdated(self, note: str) -> None:
        """A panel saw the log rewritten under it (on its follower thread): the run was
        replaced, continued or resumed. Every panel stops reading. A view of a directory
        (``show``) then draws the run there anew, as ``show`` again would; one driving a run
        (``live``: its buttons and task are the old run's) keeps what it read and says so
        in a line above the panels (``_base.outdated_note``)."""
        with self._outdated_lock:
            if self.outdated:
                return
            self.outdated = note
        for w in self.parts:
            w._follower.halt()
            w.outdated, w.following = note, False
        # (on the kernel's loop, as the cell that built the dashboard: not mid-__init__)
        call_on_loop(self._home_loop, self._say_outdated if self._drives else self._redraw)

    def _say_outdated(self) -> None:
        """The line above the panels of a view driving a run whose log was rewritten."""
        import ipywidgets

        line = ipywidgets.HTML(f'<div style="color:#a60">{html.escape(self.outdated)}</div>')
        self.box.children = (line, *self.box.children)
        self.update_static()

    def _redraw(self) -> None:
        """New panels over the run now in the directory, in place of those that read the
        one before (their counts cannot be taken back row by row)."""
        old = self.parts
        self._make_parts(society=None, ticks=None, task=None, stop=None, ready=None)
        shown = [w for w in self.box.children if w is self._waiting]
        self.box.children = (*shown, *self.parts)
        for w in old:
            w.close()
        self.outdated = ""
        self.redrawn += 1
        self.update_static()

    def _finished(self) -> None:
        if self._run_task is not None and self._run_task.done():
            # live(experiment)'s run has ended and an Experiment runs once: nothing more of
            # it will be written. A continuation (Experiment.open(out).run()) rewrites the
            # rows of the runs this view saw cut and runs them again; still following, the
            # view counted them twice and said "stopped after 200 of 200 runs".
            self.stop()
            return
        self.update_static()

    # --- static form -------------------------------------------------------------------

    def _live_bundle(self) -> dict[str, Any]:
        got = self.box._repr_mimebundle_()
        data = got[0] if isinstance(got, tuple) else got
        return dict(data or {})

    def _static_html(self) -> str:
        for w in self.parts:
            w.refresh()  # read what is new so the snapshot is the current state
        inner = "".join(w._static_html() for w in self.parts)
        if self._waiting_shown():
            inner = self._waiting.value + inner  # type: ignore[union-attr]
        return f'<div data-agentlab-static="dashboard" id="al-{uuid.uuid4().hex[:8]}">{inner}</div>'

    def _text(self) -> str:
        text = "\n".join(w._text() for w in self.parts)
        if self._waiting_shown():
            text = f"waiting for a run at {self.parts[0].run_dir!r}\n{text}"
        return text

    def _waiting_shown(self) -> bool:
        """Whether the "waiting for a run" line is up (``show`` of a directory with no run)."""
        return self._waiting is not None and self._waiting.layout.display != "none"

    def __repr__(self) -> str:
        return f"Dashboard(panels={list(self.panels)!r})"


@runtime_checkable
class Startable(Protocol):
    """What ``live`` drives of an ``Experiment`` (viz does not import topology)."""

    out: Any

    def start(self, *, progress: bool | None = None) -> asyncio.Future[Any]:
        """Its run as a task of the running loop, returned (``progress``: its bar)."""
        ...

    def stop(self, *, say: bool = True) -> None:
        """End the run :meth:`start` began (``say=False``: no line of its own)."""
        ...


def _waiting_note(path: Path, follow: bool, parts: list[Any]) -> Any:
    """A line above the panels while ``path`` holds no run yet: ``show("runs/typo")``
    followed an empty directory with empty panels, which a mistyped path and a run about to
    start there look alike in. The line names the directory and goes when a run appears
    (the first panel's follower looks on each poll); no stderr line, which the common
    ``show(out)`` before the run starts would print as well. ``None``: a run is there."""
    import ipywidgets

    from agentlab.store.summary import is_run

    if not follow or not parts or is_run(path):
        return None
    where = html.escape(str(path))
    note = ipywidgets.HTML(
        f'<div class="agentlab-waiting" style="color:#666;font-size:12px;margin:2px 0 4px">'
        f"waiting for a run at <code>{where}</code>: nothing there yet (a run started "
        "there shows here as it writes; check the path if none is coming)</div>"
    )
    follower = parts[0]._follower
    before = follower.watch

    def watch() -> bool:
        if note.layout.display != "none" and is_run(path):
            note.layout.display = "none"  # (once: the run is there for good)
        return before() if before is not None else False

    follower.watch = watch
    return note


def show(
    run: Any,
    *,
    group_by: str | None = "auto",
    follow: bool = True,
    panels: tuple[str, ...] | list[str] | None = None,
) -> Dashboard:
    """Dashboard over a run directory (running, finished, or written by another process).

    Args:
        run: run directory path or store ``Run``.
        group_by: column splitting the IAT histogram (``"auto"``: ``topology``, or one
            histogram for a society run).
        follow: keep following new rows (``False`` for a static view of a finished run).
        panels: panel names (see :data:`PANELS`); default: what the run contains.

    Raises:
        ConfigError: ``run`` is a sweep or a paper (they hold runs: the message names
            some), a file, or, with ``follow=False``, no directory at all.
    """
    _check_showable(run_path(run), follow)
    return Dashboard(run, group_by=group_by, follow=follow, panels=panels)


def _check_showable(path: Path, follow: bool) -> None:
    """Refuse what would show empty panels and say what to open instead: ``show`` of a
    sweep drew "0 messages" and "0 LLM calls" over one that held four runs."""
    from agentlab.errors import ConfigError
    from agentlab.store.manifest import read_manifest
    from agentlab.store.summary import children_of

    if path.is_file():  # ("show(run_dir / 'run.json')": a file is never a run's directory)
        raise ConfigError(f"{str(path)!r} is a file, not a run directory: show its folder,"
                          f" agentlab.show({str(path.parent)!r})")  # fmt: skip
    if not path.is_dir():
        if not follow:  # (following, it waits for a run another process will write)
            raise ConfigError(f"no run directory at {str(path)!r}")
        return
    kind = read_manifest(path).get("kind")
    if kind not in ("sweep", "paper"):
        return
    inner = children_of(path)  # (the runs its report and its page list)
    hint = (f"; show one of its {len(inner)} runs, e.g. agentlab.show({str(inner[0])!r})"
            if inner else "; it holds no run to show")  # fmt: skip
    table = "agentlab.open_sweep(path).df() is its table of points" if kind == "sweep" else (
        "its HTML is the paper")  # fmt: skip
    raise ConfigError(f"{str(path)!r} is a {kind}, not a run: {table}, `agentlab view` "
                      f"browses it{hint}")  # fmt: skip


def live(
    society: Controllable,
    ticks: int | None = None,
    *,
    group_by: str | None = "auto",
    start: bool | None = None,
    panels: tuple[str, ...] | list[str] | None = None,
) -> Dashboard:
    """Dashboard on a society with start / pause / resume / stop buttons.

    The cell returns at once (the run is a background task on the kernel's loop), so the
    kernel stays free for button presses and human answers.

    An ``Experiment`` (``agentlab.topology``) runs as a background task too, its log
    followed (its experiment panel, the conversation, the IAT histogram by topology) as
    the runs finish; the panel's *stop* (or ``dash.task.cancel()``) stops it, dropping the
    run in flight (as the stop button stops an awaited ``exp.run()``), ``await dash.task``
    gives its results.

    Args:
        society: a ``Society`` (or an ``Experiment``).
        ticks: ticks each *start* runs; ``None`` runs until *stop* (a society only).
        group_by: column splitting the IAT histogram (``"auto"``: one histogram).
        start: start running now (default: when ``ticks`` is given); otherwise the run
            starts when *start* is pressed (or ``dash.start()`` is called).
        panels: panel names; default: what the run contains.
    """
    if not isinstance(society, Controllable) and isinstance(society, Startable):
        return _live_experiment(society, ticks, group_by, panels)
    if not isinstance(society, Controllable):
        from agentlab.errors import ConfigError

        raise ConfigError(
            f"live() needs a Society (with status/pause/resume/stop), got {society!r}"
        )
    dash = Dashboard(society, society=society, ticks=ticks, group_by=group_by, panels=panels)
    if start if start is not None else ticks is not None:
        dash.start()
    return dash


def _live_experiment(exp: Startable, ticks: int | None, group_by: str | None,
                     panels: Any) -> Dashboard:  # fmt: skip
    """``live(experiment)``: ``exp.start()`` (its run as a task of the running loop) and a
    dashboard following the run directory it writes."""
    if ticks is not None:
        from agentlab.errors import ConfigError

        raise ConfigError("ticks= is a society's; an Experiment runs its topologies x runs")
    # no bar under the panels: the experiment panel counts the runs (as live(society)'s
    # society panel counts the ticks, with no tick bar)
    task = exp.start(progress=False)
    # (the panels read once the run has claimed its directory: with exist_ok="replace" it
    # holds the run this one replaces until then, which they counted, then saw replaced)
    return Dashboard(exp.out, group_by=group_by, starting=True, task=task,
                     stop=lambda: exp.stop(say=False),
                     ready=lambda: getattr(exp, "run_dir", None) is not None or task.done(),
                     panels=panels or ("experiment", "conversation", "iat"))  # fmt: skip
