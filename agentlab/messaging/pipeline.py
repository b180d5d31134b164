"""Pipelines: run agents one after another, or fan a message out to many at once.

``sequential`` threads a message through agents (each sees the previous reply);
``fanout`` gives the same message to every agent, concurrently (``gather=True``) with at
most ``max_parallel`` in flight, or one by one. ``gather_limited`` is the worker pool under
``fanout``: all jobs are submitted at once and ``max_parallel`` workers take them in order,
which is exactly the full-mesh discussion's traffic shape.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from agentlab.errors import ConfigError
from agentlab.messaging.msg import Msg

__all__ = ["fanout", "gather_limited", "sequential"]

R = TypeVar("R")


async def sequential(agents: Sequence[Any], msg: Msg | None = None, **kwargs: Any) -> Msg | None:
    """Call ``agents`` in order, each with the previous agent's reply.

    Args:
        agents: callables ``await agent(msg, **kwargs) -> Msg``.
        msg: the first agent's input.
        **kwargs: passed to every call.

    Returns:
        The last reply (``msg`` itself if ``agents`` is empty).
    """
    for agent in agents:
        msg = await agent(msg, **kwargs)
    return msg


async def fanout(
    agents: Sequence[Any],
    msg: Msg | None = None,
    gather: bool = True,
    max_parallel: int | None = None,
    **kwargs: Any,
) -> list[Msg]:
    """Give the same ``msg`` to every agent; replies come back in ``agents`` order.

    The message is shared, not copied: a ``Msg`` is immutable.

    Args:
        agents: callables ``await agent(msg, **kwargs) -> Msg``.
        msg: the input every agent receives.
        gather: run concurrently (``True``) or one after another (``False``).
        max_parallel: at most this many calls in flight (``None``: all at once).
        **kwargs: passed to every call.
    """
    if not gather:
        return [await agent(msg, **kwargs) for agent in agents]
    jobs = [_bind(agent, msg, kwargs) for agent in agents]
    return await gather_limited(jobs, max_parallel)


def _bind(agent: Any, msg: Msg | None, kwargs: dict[str, Any]) -> Callable[[], Awaitable[Msg]]:
    return lambda: agent(msg, **kwargs)


async def gather_limited(
    jobs: Sequence[Callable[[], Awaitable[R]]], max_parallel: int | None = None
) -> list[R]:
    """Run job factories through a pool of ``max_parallel`` workers; results in job order.

    Jobs start in submission order (FIFO). If one fails, the others are cancelled and the
    first error is raised — a pipeline never leaves orphan calls running.

    Args:
        jobs: zero-argument callables returning awaitables (started lazily by the pool).
        max_parallel: pool size; ``None`` or ``>= len(jobs)`` starts everything at once.
    """
    if max_parallel is not None and max_parallel < 1:
        raise ConfigError(f"max_parallel must be >= 1 or None, got {max_parallel}")
    n = len(jobs)
    results: list[Any] = [None] * n
    workers = n if max_parallel is None else min(max_parallel, n)
    queue = iter(range(n))  # shared iterator: each worker takes the next job in order

    async def worker() -> None:
        for i in queue:
            results[i] = await jobs[i]()

    tasks = [asyncio.ensure_future(worker()) for _ in range(workers)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return results
