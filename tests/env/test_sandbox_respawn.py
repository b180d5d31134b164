"""A sandbox worker started to replace a lost one stays alive after the thread that waited
for its start-up has ended (``PR_SET_PDEATHSIG`` fires when the *thread* that started a
process exits: a replacement started by a short-lived thread was SIGKILLed then, and a
request that had taken it failed with "the sandbox worker died (exit status -9)")."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentlab.env import Limits
from agentlab.env.sandbox_pool import SandboxPool
from agentlab.errors import UnsafeCodeError


def _spawn_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sandbox-spawn"]


async def test_a_replacement_worker_outlives_its_spawn_thread() -> None:
    pool = SandboxPool(1)
    try:
        await asyncio.to_thread(pool.warm)
        bomb = Limits(max_len=10**12, max_alloc=10**13)  # the warm workers' memory limit
        code = "x = 'a' * (2 * 10**9)\nlen(x)"
        with pytest.raises(UnsafeCodeError, match="memory"):  # the worker dies of it
            await pool.run(code, {}, bomb)
        assert pool.stats.died + pool.stats.killed + pool.stats.retired == 1, pool.stats
        deadline = time.monotonic() + 60
        while (_spawn_threads() or not pool._idle) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert pool._idle and not _spawn_threads(), "no replacement worker came up"
        await asyncio.sleep(0.3)  # time for a PDEATHSIG to land, had it been armed
        assert all(w.alive() for w in pool._idle), [w.proc.poll() for w in pool._idle]
        # and it serves: the same pool runs a benign program
        res = await pool.run("1 + 1", {}, Limits())
        assert res.value == 2, res
    finally:
        pool.close()
