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

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from agentlab.view.files import (
    change_marker,
    marker_token,
    resolve,
    tree_marker,
)
from agentlab.view.site_state import _SINCE, OPEN_RUNS, RAW_TYPES, SiteState, href, quote

__all__ = ["OPEN_RUNS", "RAW_TYPES", "Page", "Site", "SiteState", "href", "quote"]


@dataclass
class Page:
    """A rendered page or file: body, content type, and whether it is a run folder's own
    file (served sandboxed)."""

    body: bytes
    ctype: str = "text/html; charset=utf-8"
    raw: bool = False


def error_page(title: str, message: str, home: str) -> bytes:
    """A bare page saying what went wrong (escaped), with a link to the runs list: the
    server's 404 / 500 answers and a bundle's page that could not be rendered."""
    import html

    return (
        "<!doctype html><meta charset=utf-8><title>agentlab view</title>"
        f"<h1>{html.escape(title)}</h1><pre>{html.escape(message)}</pre>"
        f'<p><a href="{html.escape(home)}">all runs</a></p>'
    ).encode()


@cache
def _static(name: str) -> bytes:
    if name == "plotly.min.js":
        from plotly.offline import get_plotlyjs

        return str(get_plotlyjs()).encode()
    from importlib.resources import files

    return files("agentlab.analysis").joinpath("templates", name).read_bytes()


class Site(SiteState):
    """The pages of the runs under ``root``: which path is which page (see the module).

    Args:
        root: the folder browsed.
        live: pages follow their run (server-sent events); off for a bundle.
        bundle: pages are for a static copy (no absolute local path is shown anywhere).
    """

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
