"""What every page of the site reads, below the pages and the routing that builds them.

:class:`SiteState` (the runs under the root, kept open between pages, and the template
arguments every page shares), the link helpers :func:`href` and :func:`quote`, and the
file types a folder may serve. :class:`agentlab.view.site.Site` adds the address space
(which path is which page); the page modules take a ``SiteState``, so they do not import
the module that dispatches to them.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentlab.view.files import Entry, find_entries

__all__ = ["OPEN_RUNS", "RAW_TYPES", "SiteState", "href", "quote"]

#: the change marker of what the page being rendered shows, taken before its data is read
_SINCE: contextvars.ContextVar[str | None] = contextvars.ContextVar("since", default=None)

#: file types a paper or sweep point may serve from its own folder
RAW_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".jpg": "image/jpeg",
    ".csv": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".json": "application/json",
    ".jsonl": "text/plain; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
}


#: runs kept open between requests
OPEN_RUNS = 8


def quote(text: str) -> str:
    """A path for an ``href``: every segment percent-encoded (``<``, ``'``, spaces…)."""
    return urllib.parse.quote(text, safe="/")


def href(base: str, rel: str, page: str = "index.html") -> str:
    """The link from a page whose root prefix is ``base`` to ``page`` of run ``rel``."""
    return base + quote(f"r/{rel}/{page}" if rel else f"r/{page}")


class SiteState:
    """What every page of a site reads: the runs under ``root`` (kept open between pages),
    the prefix back to the root, the template arguments every page shares.

    Args:
        root: the folder browsed.
        live: pages follow their run (server-sent events); off for a bundle.
        bundle: pages are for a static copy (no absolute local path is shown anywhere).
    """

    def __init__(self, root: Path, *, live: bool = False, bundle: bool = False) -> None:
        self.root = root
        self.live = live
        self.bundle = bundle
        self._runs: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def open(self, e: Entry) -> Iterator[Any]:
        """The run of ``e``, open for reading; the last few stay open between pages (a
        reader only parses what was appended since, so following a run stays cheap)."""
        from agentlab.store import open_run

        key = str(e.path)
        with self._lock:
            run = self._runs.pop(key, None)
        if run is None:
            run = open_run(e.path)
        try:
            yield run
        finally:
            with self._lock:
                other = self._runs.pop(key, None)
                self._runs[key] = run
                evict = [
                    self._runs.popitem(last=False)[1] for _ in range(len(self._runs) - OPEN_RUNS)
                ]
            for old in [*evict, *([other] if other is not None and other is not run else [])]:
                old.close()

    @property
    def title(self) -> str:
        """The folder's name (never its absolute path)."""
        return self.root.resolve().name or "runs"

    def entries(self) -> dict[str, Entry]:
        """Every run under the root by its path from the root."""
        return {e.rel: e for e in find_entries(self.root)}

    def base(self, path: str) -> str:
        """The prefix from the page at ``path`` back to the site root."""
        return "../" * path.count("/")

    def render_args(self, path: str, rel: str | None) -> dict[str, Any]:
        """Template arguments every page shares."""
        base = self.base(path)
        live = None
        if self.live:
            query = {"since": _SINCE.get() or ""}
            if rel is not None:
                query["run"] = rel
            live = base + "_events?" + urllib.parse.urlencode(query)
        return {"root": base, "live": live}
