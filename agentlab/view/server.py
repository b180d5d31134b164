"""``agentlab view``'s HTTP server: renders pages on request, follows runs, refuses
what a local browser page should not get.

- **Host check**: a request whose ``Host`` is not the address the server listens on (or
  ``localhost`` / ``127.0.0.1`` / ``[::1]``) gets 421 — a DNS-rebinding page on another
  site cannot read the runs. Listening on every interface (``0.0.0.0``) prints a warning
  and accepts any host.
- **Headers**: a Content-Security-Policy (scripts and data from this server only, no
  framing), ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``; a run
  folder's own files (a paper's HTML export) are served sandboxed.
- **Follow**: ``/_events[?run=REL]`` is a server-sent-event stream that writes one
  ``change`` event when the run's change marker moves (a committed tick, a finished
  experiment run, a status) and nothing otherwise: an open page makes no request while
  the run is idle. A burst of moves (one ``run_sync``: status, commit, status) is one
  event, sent once the marker has held still for ``SETTLE_S``.
- A page that fails to render answers 500 with the error, escaped, not an empty reply.
"""

from __future__ import annotations

import http.server
import os
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

from agentlab.errors import ConfigError
from agentlab.view.files import change_marker, marker_token, resolve, tree_marker
from agentlab.view.site import Site, error_page

__all__ = ["POLL_S", "serve"]

#: how often the server looks at a followed run's change marker (a few ``stat`` calls)
POLL_S = 0.5
#: an idle event stream sends a comment this often, so a dead client is noticed
KEEPALIVE_S = 15.0
#: one ``run_sync`` moves the marker several times (status ``running``, the tick's commit,
#: status ``done``), spread over more than one poll on a loaded machine: the stream waits
#: until the marker holds still for this long (at most ``SETTLE_MAX_S``) and sends one event
SETTLE_S = 1.0
SETTLE_MAX_S = 3.0

CSP = (
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'none'"
)
#: a run folder's own file (a paper's HTML): its scripts run in an opaque origin
RAW_CSP = "sandbox allow-scripts; frame-ancestors 'none'"

_LOCAL = {"localhost", "127.0.0.1", "::1"}
_ANY = {"0.0.0.0", "::", ""}


def _host_ok(header: str | None, bound: str, port: int) -> bool:
    """Whether a request's ``Host`` names this server (DNS rebinding names another)."""
    if bound in _ANY:
        return True
    if not header:
        return False
    h = header.strip().lower()
    if h.startswith("["):
        name, _, rest = h[1:].partition("]")
        p = rest[1:] if rest.startswith(":") else ""
    else:
        name, _, p = h.partition(":")
    if p and p != str(port):
        return False
    return name in _LOCAL or name == bound.lower().strip("[]")


def serve(
    root: str | os.PathLike[str], *, host: str = "127.0.0.1", port: int = 8700
) -> http.server.ThreadingHTTPServer:
    """A server rendering the pages of ``root`` on request (call ``serve_forever``).

    Raises:
        ConfigError: ``root`` is not a directory.
    """
    base = Path(root)
    if not base.is_dir():
        raise ConfigError(f"{str(base)!r} is not a directory")
    if host in _ANY:
        print(
            f"warning: agentlab view listens on every interface ({host or '*'}): anyone who "
            "can reach this machine can read every run under the folder (prompts, replies, "
            "parameters). Use --host 127.0.0.1 unless that is what you want.",
            file=sys.stderr,
        )
    site = Site(base, live=True)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _headers(self, code: int, ctype: str, length: int | None, raw: bool = False) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            if length is not None:
                self.send_header("Content-Length", str(length))
            self.send_header("Content-Security-Policy", RAW_CSP if raw else CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("X-Frame-Options", "DENY")
            self.send_header("Referrer-Policy", "no-referrer")
            # the two scripts never change while a server runs; pages do
            static = ctype.startswith("text/javascript")
            self.send_header("Cache-Control", "max-age=3600" if static else "no-store")
            self.end_headers()

        def _send(self, code: int, body: bytes, ctype: str, raw: bool = False) -> None:
            self._headers(code, ctype, len(body), raw)
            if self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, code: int, message: str) -> None:
            self._send(code, error_page(str(code), message, "/"), "text/html; charset=utf-8")

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            if not _host_ok(self.headers.get("Host"), host, bound_port):
                self._error(421, "this server answers only requests addressed to itself")
                return
            url = urllib.parse.urlsplit(self.path)
            path = urllib.parse.unquote(url.path).lstrip("/")
            if path == "favicon.ico":
                self._send(204, b"", "image/x-icon")
                return
            if path == "_events":
                query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
                self._events(query.get("run", [None])[0], query.get("since", [""])[0])
                return
            try:
                page = site.render(path)
            except Exception as exc:  # a damaged run: say so, do not drop the connection
                self._error(500, f"could not show {path!r}: {type(exc).__name__}: {exc}")
                return
            if page is None:
                self._error(404, f"no page {path!r}")
                return
            self._send(200, page.body, page.ctype, page.raw)

        def _events(self, rel: str | None, since: str) -> None:
            if rel is None:

                def marker() -> Any:
                    return tree_marker(base)
            else:
                d = resolve(base, rel)
                if d is None:
                    self._error(404, f"no run {rel!r}")
                    return

                def marker() -> Any:
                    return change_marker(d)

            self._headers(200, "text/event-stream", None)
            last = marker()
            quiet = 0.0
            try:
                self.wfile.write(b"retry: 2000\n\n")
                if since and since != marker_token(last):  # it moved while the page loaded
                    self.wfile.write(b"event: change\ndata: {}\n\n")
                self.wfile.flush()
                while not stopping.is_set():
                    time.sleep(POLL_S)
                    now = marker()
                    if now != last:
                        last = settled(marker, now)
                        self.wfile.write(b"event: change\ndata: {}\n\n")
                        self.wfile.flush()
                        quiet = 0.0
                    else:
                        quiet += POLL_S
                        if quiet >= KEEPALIVE_S:
                            self.wfile.write(b": idle\n\n")
                            self.wfile.flush()
                            quiet = 0.0
            except OSError:
                pass  # the page went away
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: one line per request would drown the terminal

    stopping = threading.Event()

    def settled(marker: Any, now: Any) -> Any:
        """The marker once it has held still for ``SETTLE_S`` (a burst of commits is one
        event, one fetch), or as it is after ``SETTLE_MAX_S`` of a run that never rests."""
        give_up = time.monotonic() + SETTLE_MAX_S
        while time.monotonic() < give_up and not stopping.wait(SETTLE_S):
            again = marker()
            if again == now:
                break
            now = again
        return now

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def server_close(self) -> None:
            stopping.set()
            super().server_close()

    server = Server((host, port), Handler)
    bound_port = int(server.server_address[1])
    return server
