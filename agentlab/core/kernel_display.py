"""Replacing a displayed output in place so that every front end sees the new one.

An output shown with a display id (a live view's snapshot, a progress bar's last line) is
replaced with ``update_display``. ipykernel 7 keeps a message's parent in a context
variable, so an update sent from a background task or its done callback goes out as the
cell that *started* the task (``live(soc, ticks)``), long finished. nbclient (papermill,
nbconvert, nbmake) reads only the messages of the cell it is running, so the update was
lost and the executed notebook kept the first form ("idle · ready: press start"), which its
exports show. :func:`update_everywhere` sends it once more as the running cell; nbclient
replaces every output with that display id, in any cell. (ipykernel 6 has one global
parent, the running cell already: one message.)

A run can also end *between* cells: nbclient has finished the starting cell and not yet
sent the next, so no cell is running to send it as, and the executed notebook kept the
first form (``tests/viz/test_executed_snapshot.py`` failed so under load; a 2 s pause
between the cells fails it every time). Such an update is kept and sent again as the next
cell that runs (IPython's ``pre_run_cell`` event), the latest one per display id.
JupyterLab applies the first message whatever its cell: the second changes nothing there.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

__all__ = ["update_everywhere"]


def update_everywhere(bundle: dict[str, Any], display_id: str) -> None:
    """``update_display(bundle, raw=True, display_id=...)``, as the current context and,
    where that is another cell, as the cell the kernel is running now."""
    from IPython.display import update_display

    update_display(bundle, raw=True, display_id=display_id)
    with _as_running_cell() as other:
        if other:
            update_display(bundle, raw=True, display_id=display_id)
            return
    _send_at_next_cell(bundle, display_id)


#: updates sent when no other cell was running: sent again as the next cell that runs
_PENDING: dict[str, dict[str, Any]] = {}


def _send_at_next_cell(bundle: dict[str, Any], display_id: str) -> None:
    try:
        from IPython import get_ipython

        ip = get_ipython()
    except ImportError:
        return
    events = getattr(ip, "events", None)
    if events is None:  # (not in IPython: nothing reads display ids)
        return
    if not _PENDING and _resend not in events.callbacks.get("pre_run_cell", []):
        events.register("pre_run_cell", _resend)
    _PENDING[display_id] = bundle


def _resend(*_info: Any) -> None:
    """``pre_run_cell``: the kept updates, as the cell starting now (its parent)."""
    from IPython.display import update_display

    pending = list(_PENDING.items())
    _PENDING.clear()
    for display_id, bundle in pending:
        update_display(bundle, raw=True, display_id=display_id)


@contextlib.contextmanager
def _as_running_cell() -> Iterator[bool]:
    """Publish as the cell the kernel is running now; yields False when that is already so
    (or outside an ipykernel 7 kernel)."""
    try:
        from IPython import get_ipython

        pub = getattr(get_ipython(), "display_pub", None)
    except ImportError:
        pub = None
    var = getattr(pub, "_parent_header", None)
    running = getattr(pub, "_parent_header_global", None)
    if not isinstance(var, contextvars.ContextVar) or not isinstance(running, dict):
        yield False
        return
    mine = var.get({})
    if not running or running.get("msg_id") == (mine or {}).get("msg_id"):
        yield False
        return
    token = var.set(running)
    try:
        yield True
    finally:
        var.reset(token)
