"""Cell boundaries as the live views see them: whether a cell runs, and a hook at each end.

A live society view refreshes its static snapshot once per run end (``SocietyView``,
``_after_run``). A run the view did not start (``await society.run()`` in a later cell, a
kernel interrupt's stop) ends inside some cell, and nbclient (papermill, nbconvert, nbmake)
keeps only what arrives as the cell it is running, before that cell's reply: the view's
follower thread sees the end up to a poll later, often after the cell has finished, so
IPython's ``post_run_cell`` event (on the kernel's thread, as that cell, before its reply)
is where such an end is caught. A run that ends while no cell runs (a background run
between two cells) is sent at once, for JupyterLab, and again at the next cell's
``pre_run_cell``, for nbclient (as ``core/kernel_display.py`` does for the runs a view
starts).

Outside IPython nothing is registered and :func:`cell_running` is ``None``.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

__all__ = ["cell_running", "follow_cells", "forget_cells"]


class CellAware(Protocol):
    """What a view does at the cell boundaries."""

    def _cell_starts(self) -> None:
        """A cell starts (``pre_run_cell``, as that cell)."""

    def _cell_ends(self) -> None:
        """A cell has run (``post_run_cell``, as that cell, before its reply)."""


#: the views to tell (weak: a view dropped by the notebook is not kept alive by a hook)
_VIEWS: weakref.WeakSet[Any] = weakref.WeakSet()
#: whether a cell is running (``None``: not in IPython, or no cell seen yet)
_RUNNING: list[bool | None] = [None]


def cell_running() -> bool | None:
    """Whether the kernel runs a cell now; ``None`` when that is not known (no IPython)."""
    return _RUNNING[0]


def follow_cells(view: CellAware) -> None:
    """Tell ``view`` when a cell starts and ends (registers the IPython hooks once)."""
    try:
        from IPython import get_ipython

        ip = get_ipython()
    except ImportError:
        return
    events = getattr(ip, "events", None)
    if events is None:  # (not in IPython: no cells)
        return
    if _pre not in events.callbacks.get("pre_run_cell", []):
        events.register("pre_run_cell", _pre)
        events.register("post_run_cell", _post)
        # the cell building the view is running now (its pre_run_cell came before the hook)
        _RUNNING[0] = True
    _VIEWS.add(view)


def forget_cells(view: CellAware) -> None:
    """Stop telling ``view`` (it was closed)."""
    _VIEWS.discard(view)


def _each(method: str) -> None:
    for view in list(_VIEWS):
        try:
            getattr(view, method)()
        except Exception:  # a view's hiccup must never fail the user's cell
            continue


def _pre(*_info: Any) -> None:
    _RUNNING[0] = True
    _each("_cell_starts")


def _post(*_result: Any) -> None:
    try:
        _each("_cell_ends")
    finally:
        _RUNNING[0] = False
