"""One way to join or start Ray for every agentlab entry point (society, sweeps)."""

from __future__ import annotations

import logging
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
    return ray
