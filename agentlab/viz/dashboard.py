"""``show(run)`` and ``live(society)``: the four widgets composed in one box."""

from __future__ import annotations

import asyncio
from typing import Any

from agentlab.viz.conversation import ConversationView
from agentlab.viz.human_input import HumanInput
from agentlab.viz.iat import IATHistogram
from agentlab.viz.society_view import SocietyView

__all__ = ["Dashboard", "live", "show"]


class Dashboard:
    """The composed widgets; displays as one ``VBox``; ``stop()`` stops them all.

    Attributes:
        society, conversation, iat, human: the parts.
        box: the ``ipywidgets.VBox`` that is displayed.
    """

    def __init__(
        self,
        run: Any,
        *,
        society: Any = None,
        ticks: int | None = None,
        group_by: str | None = "topology",
        follow: bool = True,
        max_fps: float = 20.0,
    ) -> None:
        import ipywidgets

        kw: dict[str, Any] = {"follow": follow, "max_fps": max_fps}
        self.society = SocietyView(run, society=society, ticks=ticks, **kw)
        self.conversation = ConversationView(run, **kw)
        self.iat = IATHistogram(run, group_by=group_by, **kw)
        self.human = HumanInput(run, **kw)
        self.parts = [self.society, self.human, self.conversation, self.iat]
        self.box = ipywidgets.VBox(self.parts)
        self.task: asyncio.Future[Any] | None = None

    def stop(self) -> None:
        """Stop following (last frames stay visible)."""
        for w in self.parts:
            w.stop()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.box._repr_mimebundle_(**kwargs)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)


def show(run: Any, *, group_by: str | None = "topology", follow: bool = True) -> Dashboard:
    """Dashboard over a run directory (running, finished, or written by another process).

    Args:
        run: run directory path or store ``Run``.
        group_by: column splitting the IAT histogram.
        follow: keep following new rows (``False`` for a static view of a finished run).
    """
    return Dashboard(run, group_by=group_by, follow=follow)


def live(society: Any, ticks: int | None = None, *, group_by: str | None = "topology") -> Dashboard:
    """Dashboard on a society, with start/pause/stop; starts ``society.run(ticks)`` in the
    background when ``ticks`` is given (the cell returns at once, so the kernel stays free
    to receive button presses and human answers).

    Args:
        society: a ``Society`` (anything with ``run_dir``/``path`` and ``run(ticks=...)``).
        ticks: ticks to run now in a background task (``None``: wait for *start*).
        group_by: column splitting the IAT histogram.
    """
    dash = Dashboard(society, society=society, ticks=ticks, group_by=group_by)
    if ticks:
        dash.task = asyncio.ensure_future(society.run(ticks=ticks))
        dash.society.attach_task(dash.task)
    return dash
