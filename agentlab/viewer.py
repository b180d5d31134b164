"""Moved to :mod:`agentlab.view` (a package by responsibility); kept for old imports."""

from agentlab.view import build_site, main, render_page, runs_rows, serve

__all__ = ["build_site", "main", "render_page", "runs_rows", "serve"]
