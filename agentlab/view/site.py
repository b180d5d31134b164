"""The site's address space: which path is which page, links between pages, rendering.

Paths (URL-decoded, relative to the site root; the same in the server and a bundle):

- ``index.html`` — every run, sweep and paper under the folder;
- ``r/<run>/index.html`` — one run's overview (a sweep's points, a paper's files);
- ``r/<run>/errors-<n>.html``, ``calls-<n>.html``, ``messages-<n>.html``,
  ``agents-<n>.html``, ``agent-<id>.html`` — paged parts of a run;
- ``r/<run>/topology-<t>-<n>.html``, ``xrun-<run id>.html`` — an experiment's topology
  and one of its runs (call graph, prompts and replies);
- ``r/<sweep>/point-<id>.html`` — one sweep point;
- ``f/<folder>/<file>`` — a paper's or a point's own files (its HTML export, tables,
  figures), served sandboxed;
- ``view.js``, ``plotly.min.js`` — the two scripts.

Links are relative, so a bundle opens from disk as the server's pages do.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from agentlab.view.files import (
    Entry,
    change_marker,
    find_entries,
    marker_token,
    resolve,
    tree_marker,
)

#: the change marker of what the page being rendered shows, taken before its data is read
_SINCE: contextvars.ContextVar[str | None] = contextvars.ContextVar("since", default=None)

__all__ = ["Page", "Site", "href"]

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


@dataclass
class Page:
    """A rendered page or file: body, content type, and whether it is a run folder's own
    file (served sandboxed)."""

    body: bytes
    ctype: str = "text/html; charset=utf-8"
    raw: bool = False


def quote(text: str) -> str:
    """A path for an ``href``: every segment percent-encoded (``<``, ``'``, spaces…)."""
    return urllib.parse.quote(text, safe="/")


def href(base: str, rel: str, page: str = "index.html") -> str:
    """The link from a page whose root prefix is ``base`` to ``page`` of run ``rel``."""
    return base + quote(f"r/{rel}/{page}" if rel else f"r/{page}")


@cache
def _static(name: str) -> bytes:
    if name == "plotly.min.js":
        from plotly.offline import get_plotlyjs

        return str(get_plotlyjs()).encode()
    from importlib.resources import files

    return files("agentlab.analysis").joinpath("templates", name).read_bytes()


class Site:
    """The pages of the runs under ``root``.

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

    def render(self, path: str) -> Page | None:
        """The page at ``path`` (URL-decoded, no leading slash), or None if there is none."""
        from agentlab.view import pages

        path = path.lstrip("/")
        if path in ("", "index.html"):
            if self.live:
                _SINCE.set(marker_token(tree_marker(self.root)))
            return Page(pages.index_page(self).encode())
        if path in ("view.js", "plotly.min.js"):
            return Page(_static(path), "text/javascript; charset=utf-8")
        if path.startswith("f/"):
            return self._raw(path[2:])
        legacy = re.match(r"^(?:run|sweep)-(.+)\.html$", path)
        if legacy:  # the old viewer's names (run-<a__b>.html): the run's overview
            slug = legacy.group(1)
            rel = next(
                (r for r in self.entries() if (r.replace("/", "__") or "_root") == slug), None
            )
            return (
                None
                if rel is None
                else self.render(f"r/{rel}/index.html" if rel else "r/index.html")
            )
        if not path.startswith("r/"):
            return None
        rel, _, name = path[2:].rpartition("/")
        entry = self.entries().get(rel)
        if entry is None:
            return None
        if self.live:
            _SINCE.set(marker_token(change_marker(entry.path)))
        html = pages.run_part(self, entry, name)
        return None if html is None else Page(html.encode())

    def _raw(self, rel: str) -> Page | None:
        owners = [e for e in self.entries().values() if e.kind in ("paper", "sweep")]
        if not any(rel.startswith(f"{e.rel}/" if e.rel else "") for e in owners):
            return None
        p = resolve(self.root, rel)
        ctype = RAW_TYPES.get(Path(rel).suffix.lower())
        if p is None or ctype is None or not p.is_file():
            return None
        return Page(p.read_bytes(), ctype, raw=True)

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
