"""``agentlab view``: a run browser over a folder of runs, served or bundled as files.

- :func:`runs_rows` — one row per run, sweep and paper (the runs list; ``agentlab runs``
  prints the same rows with :func:`format_runs`);
- :func:`serve` — the local server (pages rendered on request, live follow by server-sent
  events, ``Host`` check and security headers);
- :func:`build_site` — the same pages as a static site (``--bundle``);
- :func:`render_page` — one page's HTML (tests, notebooks).

Modules: ``files`` (what is a run; safe paths; change markers), ``data`` (queries),
``charts``, ``site`` (paths and links), ``pages`` (the pages), ``server``, ``bundle``.
It reads run directories and calls analysis functions; it never calls an LLM or Ray.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import threading
from pathlib import Path
from typing import Any

from agentlab.view.bundle import build_site
from agentlab.view.data import runs_rows
from agentlab.view.server import serve

__all__ = ["build_site", "format_runs", "main", "render_page", "runs_rows", "serve"]


def render_page(root: str | os.PathLike[str], name: str, *, live: bool = False) -> str | None:
    """The HTML of page ``name`` of the site over ``root`` (``index.html``,
    ``r/<run>/index.html``, ...), or None when there is no such page."""
    from agentlab.view.site import Site

    page = Site(Path(root), live=live).render(name)
    return None if page is None else page.body.decode()


def format_runs(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`runs_rows` as an aligned text table (``agentlab runs``)."""
    import pandas as pd

    from agentlab.core.text_table import format_table

    if not rows:
        return "no runs"
    cols = ["run", "kind", "status", "created", "ticks", "steps", "llm_calls", "step_errors",
            "tool_errors", "llm_failures", "errors", "params"]  # fmt: skip
    df = pd.DataFrame(rows)
    df["created"] = df["created"].astype(str).str.slice(0, 19).str.replace("T", " ")
    df["params"] = [", ".join(f"{k}={v}" for k, v in p.items()) for p in df["params"]]
    table = str(format_table(df[cols], names={"run": 60}))
    if (df["kind"] == "experiment").any():  # (the run page labels them "runs")
        table += "\nan experiment's steps are its workflow runs, its step errors the failed runs"
    return table


def main(args: argparse.Namespace) -> int:
    """CLI: ``agentlab view [DIR] [--bundle OUT] [--host H] [--port N]``."""
    if args.bundle:
        index = build_site(args.dir, args.bundle, progress=sys.stderr.isatty())
        print(f"static site written: {index}")
        return 0
    server = _listen(args.dir, args.host, args.port)
    print(f"agentlab view: http://{args.host}:{server.server_address[1]}/ (Ctrl-C to stop)")
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        t.join()
    finally:
        server.shutdown()
        server.server_close()
    return 0


def _listen(root: str, host: str, port: int) -> Any:
    """:func:`serve` on ``host:port`` for the CLI; a port it cannot have is one line.

    Raises:
        ConfigError: the port is taken (a second ``agentlab view`` on the default 8700
            printed a 23-line traceback ending in ``OSError: [Errno 98]``), not ours to
            take, or the host is not an address of this machine; the message says
            which and what to pass instead.
    """
    from agentlab.errors import ConfigError

    try:
        return serve(root, host=host, port=port)
    except OSError as exc:
        other = "pick another with --port N, or --port 0 for any free port"
        if exc.errno == errno.EADDRINUSE:
            why = f"port {port} is in use (another agentlab view, or another server?): {other}"
        elif exc.errno == errno.EACCES:
            why = f"port {port} needs privileges this user lacks: {other}"
        else:  # (a --host that is no address of this machine)
            why = f"cannot listen on {host}:{port}: {exc.strerror or exc}; check --host"
        raise ConfigError(why) from None
