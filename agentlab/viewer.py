"""Moved to :mod:`agentlab.view` (a package by responsibility); kept for old imports."""

from __future__ import annotations

import os

from agentlab.view import build_site, main, render_page, runs_rows, serve

__all__ = ["build_site", "main", "render_page", "runs_rows", "serve"]


def _index(root: str | os.PathLike[str], live: object = None) -> str:
    """The index page's HTML (what the old ``_index`` rendered)."""
    return render_page(root, "index.html") or ""
