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
