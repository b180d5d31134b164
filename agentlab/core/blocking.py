"""The one check of the blocking wrappers for scripts (``complete_sync``,
``Experiment.run_sync``, ``play_werewolf_sync``): inside a running event loop (a notebook
cell, async code) ``asyncio.run`` cannot start, and asyncio's own error ("cannot be called
from a running event loop") does not say to ``await`` the coroutine instead.

(``Society.run_sync`` runs its coroutine in a worker thread's loop instead:
``runtime/worker_loop.py``.) The inverse, :func:`require_running_loop`, guards what starts
a background task (``Society.start``, ``Experiment.start``): in a script that task would
be a coroutine nobody awaits.
"""

from __future__ import annotations

import asyncio

from agentlab.errors import ConfigError

__all__ = ["refuse_in_running_loop", "require_running_loop"]


def refuse_in_running_loop(message: str) -> None:
    """Raise :class:`ConfigError` with ``message`` (which says what to ``await``) when an
    event loop is running in this thread; return otherwise."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise ConfigError(message)


def require_running_loop(message: str) -> asyncio.AbstractEventLoop:
    """The event loop running in this thread; :class:`ConfigError` with ``message`` (which
    says what to call in a script) when none is."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise ConfigError(message) from None
