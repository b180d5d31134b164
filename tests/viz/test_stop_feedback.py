"""The society view's stop button says it was heard (``stopping``) until the run ends.

The run loop stops only after the tick in progress commits (12 s a tick in the
quickstart). The view said "running" with pause and stop still on for all that time, as if
the press was lost, while a pause press turned to "pausing" at once.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from agentlab.viz import SocietyView


def _press(w: SocietyView, action: str) -> None:
    # exactly what the page's button sends
    w._dispatch_msg(w, {"type": "control", "action": action}, [])


async def _until(cond: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_stop_shows_stopping_until_the_tick_in_progress_commits(tmp_path: Path) -> None:
    from agentlab.runtime import Society

    # 1 s of real time per tick: the stop lands well inside a tick
    soc = Society.create(
        tmp_path / "soc", agents=3, llm="sim/instant", seed=0, progress=False, tick_seconds=1.0
    )
    w = SocietyView(soc, society=soc, follow=False)
    _press(w, "start")
    await _until(lambda: soc.tick >= 1 and soc.tick_progress().get("tick") == soc.tick + 1)
    in_progress = soc.tick + 1
    _press(w, "stop")
    await asyncio.sleep(0.05)
    w.refresh()
    assert soc.status == "running"  # the tick in progress goes on
    assert w.status == "stopping", w.status
    assert w.enabled == []  # nothing left to press until it ends
    assert w.state_line.startswith(f"stopping: tick {in_progress} finishes first"), w.state_line
    await asyncio.wait_for(w.task, 20)
    w.refresh()
    assert soc.tick == in_progress and w.status == "stopped" and w.enabled == ["start"]

    # a run started from a cell afterwards is not the one stopped
    task = soc.start(1, progress=False)
    await _until(lambda: soc.status == "running")
    w.refresh()
    assert w.status == "running" and w.enabled == ["pause", "stop"]
    await asyncio.wait_for(task, 20)
    w.close()
    soc.close()


async def test_stop_while_paused_ends_at_once(tmp_path: Path) -> None:
    from agentlab.runtime import Society

    soc = Society.create(
        tmp_path / "soc", agents=3, llm="sim/instant", seed=0, progress=False, tick_seconds=0.2
    )
    w = SocietyView(soc, society=soc, follow=False)
    _press(w, "start")
    await _until(lambda: soc.tick >= 1)
    _press(w, "pause")
    await _until(lambda: soc.status == "paused")
    held = soc.tick
    _press(w, "stop")
    await asyncio.wait_for(w.task, 5)
    w.refresh()
    assert soc.tick == held and w.status == "stopped", (soc.tick, held, w.status)
    w.close()
    soc.close()
