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
from agentlab.view.site import Page, Site

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


def build_site(root: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write every page of ``root`` into ``out``; returns the index path.

    Raises:
        ConfigError: ``root`` is not a directory, or a page links to one that is missing.
    """
    src, dst = Path(root), Path(out)
    if not src.is_dir():
        raise ConfigError(f"{str(src)!r} is not a directory")
    site = Site(src, bundle=True)
    dead = []
    for path, page in crawl(site.render):
        if page is None:
            dead.append(path)
            continue
        target = dst / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(page.body)
    if dead:
        raise ConfigError(f"the bundle has links to pages that do not exist: {dead[:5]}")
    return dst / "index.html"
