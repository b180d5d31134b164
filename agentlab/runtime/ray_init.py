"""One way to join or start Ray for every agentlab entry point (society, sweeps)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ensure_ray"]

#: Ray 2.5x's logger of its auth notice, and the notice a local cluster prints at every
#: start when token authentication is on (the default); in a notebook it is a stray red line
#: above every Ray society's first cell. Only that notice is dropped: the warning that
#: authentication is *disabled* still shows.
_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
_AUTH_ON_NOTICE = "Token authentication is enabled for this Ray cluster"


class _DropAuthOnNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_AUTH_ON_NOTICE)


@contextmanager
def quiet_auth_notice() -> Iterator[None]:
    """Drop Ray's "authentication is enabled" notice while inside."""
    quiet = _DropAuthOnNotice()
    auth_logger = logging.getLogger(_AUTH_LOGGER)
    auth_logger.addFilter(quiet)
    try:
        yield
    finally:
        auth_logger.removeFilter(quiet)


#: how the raylet's report of a worker that died mid-task begins (Ray 2.4x-2.6x)
_WORKER_DIED = "A worker died or was killed while executing a task"


def short_worker_death(line: str) -> str:
    """The raylet's report of a dead worker (about 1,000 characters on one line: lease,
    worker and node ids, address, the OOM advice; eight wrapped lines in a notebook), cut
    to its first sentence, the worker's pid and how it exited."""
    pid = re.search(r"Worker PID: (\d+)", line)
    how = re.search(r"Worker exit type: (\w+)", line)
    said = ", ".join(x for x in (pid and f"pid {pid.group(1)}", how and how.group(1)) if x)
    return (
        f"{_WORKER_DIED}"
        + (f" ({said})" if said else "")
        + ("; killed, out of memory or crashed: its Ray logs say which")
    )


def _shorten_worker_deaths() -> None:
    """Ray's driver prints the raylet's messages through ``print_to_stdstream`` (looked up
    at each call); a worker-death report goes through :func:`short_worker_death` (agentlab
    says what it does about the lost batch itself: ``ray_executor.py``), every other
    message as it was. Nothing changes where that function is not Ray's."""
    try:
        from ray._private import worker
    except ImportError:  # pragma: no cover - another Ray layout
        return
    original = getattr(worker, "print_to_stdstream", None)
    if original is None or getattr(original, "agentlab", False):
        return

    def print_to_stdstream(data: Any, ignore_prefix: bool) -> Any:
        lines = data.get("lines") if isinstance(data, dict) else None
        if lines and data.get("pid") == "raylet" and str(lines[0]).startswith(_WORKER_DIED):
            data = {**data, "lines": [short_worker_death(str(lines[0])), *lines[1:]]}
        return original(data, ignore_prefix)

    print_to_stdstream.agentlab = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = print_to_stdstream


def ensure_ray(address: str | None = None) -> Any:
    """Return the ``ray`` module, initialised: reuse a running instance, else connect to
    ``address`` (a cluster) or start a local one — quietly, without the dashboard."""
    import ray

    if not ray.is_initialized():
        with quiet_auth_notice():
            ray.init(
                address=address,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
                configure_logging=False,
            )
    _shorten_worker_deaths()
    return ray
