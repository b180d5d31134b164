"""The base class of the live widgets: locating the ES modules and wiring a Follower.

A subclass declares the datasets it follows, folds rows into its model in ``_ingest`` and
returns the traits of one frame from ``_frame``. Frames are sent from the follower thread
inside ``hold_sync`` so one frame is one comm message.

Every widget also has a *static form* (``_static_html``): its mimebundle carries a
self-contained HTML/SVG snapshot next to the live view, and a readable ``text/plain``.
Displayed with a display id, the snapshot is refreshed in place when the widget stops
(``stop()``) and, by a society view, once per run end (``SocietyView._after_run``), so a
notebook executed by papermill/nbconvert and saved keeps the final state, which any
renderer shows without a kernel.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable
from functools import cache
from html import escape
from pathlib import Path
from typing import Any, ClassVar

import anywidget
import traitlets as t

from agentlab.viz._follow import Follower, make_source, run_path

__all__ = [
    "VIEW_CLASS",
    "LiveWidget",
    "StaticForm",
    "call_on_loop",
    "load_css",
    "load_esm",
    "outdated_note",
    "owner_loop",
    "widgets_dir",
]


@cache
def widgets_dir() -> Path:
    """The folder with the ES modules: the repo's ``widgets/`` (editable install) or the
    wheel's ``agentlab/_widgets`` (force-included by pyproject)."""
    here = Path(__file__).resolve().parent.parent  # .../agentlab
    for cand in (here.parent / "widgets", here / "_widgets"):
        if (cand / "_common.js").is_file():
            return cand
    from agentlab.errors import StoreError

    raise StoreError(f"widget front-end files not found next to {here}; reinstall agentlab")


#: vendored chart library (widgets/vendor/README.md): prepended to modules that chart
CHART_JS = "vendor/uPlot.iife.min.js"
CHART_CSS = "vendor/uPlot.min.css"


def load_esm(name: str, *, charts: bool = False) -> str:
    """The ES module ``name`` with the shared helpers (and, with ``charts``, the vendored
    uPlot library) prepended: one self-contained module, because anywidget loads modules
    from blobs, so imports between them (or from a CDN, offline) cannot work."""
    d = widgets_dir()
    parts = [(d / CHART_JS).read_text()] if charts else []
    parts += [(d / "_common.js").read_text(), (d / name).read_text()]
    return "\n".join(parts)


def load_css() -> str:
    """The shared stylesheet (uPlot's included)."""
    d = widgets_dir()
    return (d / CHART_CSS).read_text() + "\n" + (d / "agentlab.css").read_text()


def owner_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread (the kernel's, when a cell builds a widget)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def call_on_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[[], Any]) -> None:
    """Run ``fn`` on ``loop``'s thread and wake that loop.

    JupyterLab ≥ 4.4 sends comm messages over a kernel *subshell* (setting
    ``commsOverSubshells``), and ipykernel 7 handles them in that subshell's own thread and
    event loop. A button handler that sets an ``asyncio.Event`` of the society's run loop
    from there neither wakes the kernel's loop (it sleeps until something else, such as
    running another cell, wakes it) nor is thread-safe; a task it creates lands on the
    subshell's loop. ``call_soon_threadsafe`` queues ``fn`` on the kernel's loop and
    writes to its self-pipe, so the loop wakes now. Called on the loop's own thread (the
    classic notebook, or tests), ``fn`` runs at once.
    """
    if loop is None or loop.is_closed():
        fn()
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        fn()
    else:
        loop.call_soon_threadsafe(fn)


#: the DOM class of every agentlab view (its panels and the dashboard's box): a copy restored
#: from a saved notebook, with no kernel object behind it, shows agentlab's own "saved view"
#: mark (widgets/_common.js, ``watchSaved``) instead of ipywidgets' red broken-link icon on
#: each of them (four above one dashboard)
VIEW_CLASS = "al-view"


def outdated_note(run_dir: str) -> str:
    """What a view says when the log it read was rewritten under it (:class:`RunSource`)."""
    return (f"The run log in {run_dir} was rewritten after this view read it (the run "
            "replaced with exist_ok='replace', continued or resumed): the view stopped "
            "there and may count rows no longer in the log. "
            f"agentlab.show({run_dir!r}) draws the run as it is now.")  # fmt: skip


class StaticForm:
    """Mixin: a mimebundle with a live view *and* a static snapshot, refreshed in place.

    Subclasses implement ``_static_html`` (the snapshot) and ``_text`` (the plain-text
    form), and are widgets (``_repr_mimebundle_`` of ipywidgets gives the live view).
    """

    _display_id: str | None = None

    def _static_html(self) -> str:
        raise NotImplementedError

    def _text(self) -> str:
        raise NotImplementedError

    def _live_bundle(self) -> dict[str, Any]:
        got = super()._repr_mimebundle_()  # type: ignore[misc]
        # anywidget returns (data, metadata), ipywidgets the data dict alone
        data = got[0] if isinstance(got, tuple) else got
        return dict(data or {})

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """Live widget view + ``text/html`` snapshot + readable ``text/plain``."""
        data = self._live_bundle()
        note = getattr(self, "outdated", "")  # (the log rewritten under it: said first)
        html = self._static_html()
        data["text/html"] = f'<div style="color:#a60">{escape(note)}</div>{html}' if note else html
        data["text/plain"] = f"{note}\n{self._text()}" if note else self._text()
        return data

    def _ipython_display_(self) -> None:
        from IPython.display import display

        if self._display_id is None:
            self._display_id = uuid.uuid4().hex
        display(self._repr_mimebundle_(), raw=True, display_id=self._display_id)

    def update_static(self) -> None:
        """Replace the displayed snapshot by the current state (a no-op if not displayed)."""
        if self._display_id is None:
            return
        from agentlab.core.kernel_display import update_everywhere

        # (also as the cell running now: a run ending in a later cell, see kernel_display)
        update_everywhere(self._repr_mimebundle_(), self._display_id)


class LiveWidget(StaticForm, anywidget.AnyWidget):  # type: ignore[misc]
    """Follows datasets of one run and pushes coalesced frames (≤ ``max_fps``).

    Args:
        run: run directory, store ``Run`` or ``Society``.
        follow: keep following in a background thread; ``False`` loads the current history
            once (a static view of a finished run).
        max_fps: frame cap.
        poll_interval: seconds between looks at the log.
        ready: read nothing while it returns False (``live`` of a run it starts itself:
            the directory may hold the run that one replaces until it starts).
    """

    run_dir = t.Unicode("").tag(sync=True)
    following = t.Bool(False).tag(sync=True)
    frame = t.Int(0).tag(sync=True)
    rows_seen = t.Int(0).tag(sync=True)

    datasets: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        run: Any,
        *,
        follow: bool = True,
        max_fps: float = 20.0,
        poll_interval: float = 0.05,
        ready: Callable[[], bool] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.add_class(VIEW_CLASS)  # (widgets/agentlab.css: a saved copy's marks are ours)
        self._run = run
        self.run_dir = os.fspath(run_path(run))
        #: what to say when the log was rewritten under this view ("" until then) and
        #: who to tell (a dashboard shows it above its panels)
        self.outdated = ""
        self.on_outdated: Callable[[str], None] | None = None
        self._home_loop = owner_loop()
        self._follower = Follower(
            make_source(run),
            self.datasets,
            self._ingest,
            self._emit_frame,
            max_fps=max_fps,
            poll_interval=poll_interval,
            watch=self._watch,
            on_rewritten=self._on_rewritten,
            ready=ready,
        )
        self.on_msg(self._dispatch_msg)
        if follow:
            self.start()
        else:
            self.refresh()

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Follow the log in a background thread (history first, then live rows)."""
        self._follower.start()
        self.following = True

    def stop(self) -> None:
        """Stop following (the last frame stays on screen and in the saved notebook)."""
        self._follower.stop()
        self.refresh()
        self.following = False
        self.update_static()

    def refresh(self) -> None:
        """Read what is new and send a frame now (also usable without the thread)."""
        self._follower.step(force=True)

    def close(self) -> None:
        """Stop the thread and close the comm."""
        follower = getattr(self, "_follower", None)  # None if __init__ raised early
        if follower is not None:
            follower.stop()
        super().close()

    def _on_rewritten(self) -> None:
        """The follower saw the log rewritten under it (the follower thread): stop there and
        say so; a dashboard says it once above its panels."""
        self.outdated = outdated_note(self.run_dir)
        self.following = False
        if self.on_outdated is not None:
            self.on_outdated(self.outdated)
        else:
            call_on_loop(self._home_loop, self.update_static)

    # --- subclass hooks ----------------------------------------------------------------

    def _ingest(self, dataset: str, rows: list[dict[str, Any]]) -> bool:
        raise NotImplementedError

    def _frame(self) -> dict[str, Any]:
        raise NotImplementedError

    def _on_front_msg(self, msg: dict[str, Any]) -> None:
        """Handle a custom message from the browser (buttons, answers, span lookups)."""

    def _watch(self) -> bool:
        """Called on every poll; True when something outside the log changed."""
        return False

    def _text(self) -> str:
        return f"{type(self).__name__}({self.run_dir!r})"

    # --- plumbing ----------------------------------------------------------------------

    def _emit_frame(self) -> None:
        traits = self._frame()
        with self.hold_sync():
            for k, v in traits.items():
                self.set_trait(k, v)
            self.rows_seen = self._follower.rows_seen
            self.frame = self.frame + 1

    def _dispatch_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict):
            with self._follower.lock:
                self._on_front_msg(content)
            # every press is answered, whatever it changed: a view that hears nothing back
            # (a saved copy in a reopened notebook, a kernel gone or busy) says so
            # (widgets/_common.js, sender)
            self.send({"type": "ack", "of": str(content.get("type"))})
