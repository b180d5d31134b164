"""One way to join or start Ray for every agentlab entry point (society, sweeps)."""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["ensure_ray"]


def ensure_ray(address: str | None = None) -> Any:
    """Return the ``ray`` module, initialised: reuse a running instance, else connect to
    ``address`` (a cluster) or start a local one — quietly, without the dashboard."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
            configure_logging=False,
        )
    return ray
