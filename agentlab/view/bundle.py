"""``agentlab view --bundle OUT``: every page as files, opened from disk with no server.

The bundle is what a crawl from ``index.html`` reaches: every link of every page is
followed (so a bundle has no dead link), each page written once under its own path, the
paper and point files it links copied, ``plotly.min.js`` and ``view.js`` once. Pages show
no absolute local path and no secret-looking parameter value (:func:`agentlab.view.data.redact`);
symbolic links inside the runs folder are never followed.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from agentlab.errors import ConfigError
from agentlab.view.site import Page, Site, error_page

__all__ = ["build_site", "crawl"]

_HREF = re.compile(r"""(?:href|src)="([^"#?]*)[^"]*\"""")


def links(path: str, body: bytes) -> list[str]:
    """The site paths a page at ``path`` links to (decoded, normalised)."""
    out = []
    here = PurePosixPath(path).parent
    for raw in _HREF.findall(body.decode("utf-8", "replace")):
        if not raw or raw.startswith(("http:", "https:", "data:", "mailto:", "javascript:", "/")):
            continue
        target = urllib.parse.unquote(raw.replace("&amp;", "&"))
        parts: list[str] = []
        for p in (here / target).parts:
            if p == "..":
                if parts:
                    parts.pop()
            elif p != ".":
                parts.append(p)
        out.append("/".join(parts))
    return out


def crawl(
    render: Callable[[str], Page | None], start: str = "index.html"
) -> Iterator[tuple[str, Page | None]]:
    """Every page reachable from ``start`` through ``render`` (breadth first), as
    ``(path, page)``; a missing page is yielded with ``None`` (a dead link)."""
    seen = {start}
    todo = [start]
    while todo:
        path = todo.pop(0)
        page = render(path)
        yield path, page
        if page is None or not page.ctype.startswith("text/html"):
            continue
        for target in links(path, page.body):
            if target not in seen:
                seen.add(target)
                todo.append(target)


def build_site(
    root: str | os.PathLike[str], out: str | os.PathLike[str], *, progress: bool = False
) -> Path:
    """Write every page of ``root`` into ``out``; returns the index path.

    ``progress``: a bar of the pages written (a folder of 330 small runs is ~3,600 pages,
    minutes; the CLI shows it on a terminal).

    A page that fails to render (a damaged run) is written as a page saying why, as the
    server answers it, and the crawl goes on: one run must not cost the folder its site.

    Raises:
        ConfigError: ``root`` is not a directory; or, after the rest is written, a page
            failed to render or links to one that is missing (both listed).
    """
    src, dst = Path(root), Path(out)
    if not src.is_dir():
        raise ConfigError(f"{str(src)!r} is not a directory")
    site = Site(src, bundle=True)
    dead: list[str] = []
    failed: list[str] = []

    def render(path: str) -> Page | None:
        try:
            return site.render(path)
        except Exception as exc:
            failed.append(f"{path} ({type(exc).__name__}: {exc})"[:300])
            home = "../" * path.count("/") + "index.html"
            why = f"could not show {path!r}: {type(exc).__name__}: {exc}"
            return Page(error_page("could not render this page", why, home))

    from agentlab.core.progress_bar import progress_bar

    bar = progress_bar(None, "bundle", "page", enabled=progress)
    for path, page in crawl(render):
        bar.update(1)
        if page is None:
            dead.append(path)
            continue
        target = dst / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(page.body)
    bar.close()
    if failed or dead:
        raise ConfigError(
            f"wrote the site to {dst}, but "
            + "; ".join(
                [f"{len(failed)} page(s) failed to render: {failed[:3]}"] * bool(failed)
                + [f"{len(dead)} link(s) lead to pages that do not exist: {dead[:5]}"] * bool(dead)
            )
        )
    return dst / "index.html"
