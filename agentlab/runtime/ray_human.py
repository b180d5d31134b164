"""Human requests from Ray tasks, through the driver: no worker touches the run directory.

Locally, ``services.ask_user`` appends a ``human_requests`` row to the run log and tails
``human_answers`` for the reply (``store/human.py``). A Ray task may run on a node that
cannot see the run directory, so it asks the run's *desk* instead: a small Ray actor
(:class:`HumanDesk`, no CPU) that holds the open requests in memory. The driver serves the
desk while a tick runs (:class:`DeskServer`): it takes new requests, posts them to the run
log (once per ``request_id``, so a re-run step after a lost attempt or a resume does not
ask twice), tails ``human_answers`` and hands each answer back to the desk, which wakes
the waiting task. The desk itself stores nothing durable: the log stays the record, as in
the local executor, and a restarted desk is rebuilt from it.

Batch tasks also tell the desk where they run (node id, pid), so that the executor can
end a task that ran past its deadline (``RayExecutor.batch_deadline_s``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

__all__ = ["DeskServer", "HumanDesk", "ask_desk"]


class HumanDesk:
    """Body of the desk actor: open requests and the answers the driver delivered."""

    def __init__(self) -> None:
        self._open: dict[str, dict[str, Any]] = {}  # asked, not answered yet
        self._answers: dict[str, str] = {}
        self._waiting: dict[str, asyncio.Future[str]] = {}
        self._wake: asyncio.Event | None = None
        self._started: dict[str, tuple[str, int]] = {}

    def _event(self) -> asyncio.Event:
        if self._wake is None:  # made inside the actor's event loop
            self._wake = asyncio.Event()
        return self._wake

    async def ask(self, row: dict[str, Any]) -> str:
        """Queue ``row`` (a ``human_requests`` row) and wait for its answer (JSON text)."""
        rid = str(row["request_id"])
        if rid in self._answers:
            return self._answers[rid]
        fut = self._waiting.get(rid)
        if fut is None:
            fut = self._waiting[rid] = asyncio.get_running_loop().create_future()
            self._open[rid] = row
            self._event().set()
        return await asyncio.shield(fut)

    async def take(self, timeout: float) -> list[dict[str, Any]]:
        """Every open request (waits up to ``timeout`` s for a new one first).

        Not "new since the last call": a caller that gave up on an earlier call (the
        driver cancels its server between ticks) must not lose the rows that call took.
        """
        wake = self._event()
        if not wake.is_set():
            try:
                await asyncio.wait_for(wake.wait(), timeout)
            except TimeoutError:
                pass
        wake.clear()
        return list(self._open.values())

    async def answer(self, request_id: str, answer: str) -> None:
        """Deliver an answer (JSON text) to whoever waits for ``request_id``."""
        self._answers[request_id] = answer
        self._open.pop(request_id, None)
        fut = self._waiting.pop(request_id, None)
        if fut is not None and not fut.done():
            fut.set_result(answer)

    async def ping(self) -> bool:
        return True

    async def started(self, token: str, node: str, pid: int) -> None:
        """A batch task reports where it runs (the executor's deadline needs it)."""
        self._started[token] = (node, pid)

    async def where(self, token: str) -> tuple[str, int] | None:
        """``(node id, pid)`` of the task that reported ``token`` (and forget it)."""
        return self._started.pop(token, None)

    async def forget(self, tokens: list[str]) -> None:
        """Drop the reports of tasks that ended."""
        for t in tokens:
            self._started.pop(t, None)


async def ask_desk(
    desk: Any,
    question: str,
    schema: Any = None,
    *,
    ts: float,
    agent_id: str,
    tick: int,
    request_id: str,
    timeout: float | None = None,
) -> Any:
    """``ask_user`` from a Ray task: the request travels to the driver through ``desk``.

    Raises:
        TimeoutError: no answer within ``timeout`` seconds of real time.
    """
    from agentlab.store.human import convert_answer, decode_json_text, request_row

    row = request_row(question, schema, agent_id=agent_id, tick=tick, ts=ts, request_id=request_id)
    ref = desk.ask.remote(row)
    try:
        text = await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout)
    except TimeoutError:
        raise TimeoutError(
            f"no answer to human request {request_id!r} within {timeout} s"
        ) from None
    return convert_answer(decode_json_text(text), schema)


class DeskServer:
    """The driver's side of a desk: posts its requests to the run, delivers answers.

    Args:
        desk: the desk actor handle.
        run_dir: the run directory (only the driver writes and reads it).
        poll_s: how long one wait for new requests (and one look at the answers) lasts.
    """

    def __init__(self, desk: Any, run_dir: str | Path, poll_s: float = 0.2) -> None:
        self.desk = desk
        self.run_dir = Path(run_dir)
        self.poll_s = poll_s
        self._open: set[str] = set()  # posted (or found posted), not answered yet
        self._posted: set[str] = set()
        self._answers: dict[str, str] = {}
        self._cursor: Any = None

    async def serve(self) -> None:
        """Serve until cancelled (the executor runs it while a tick's batches run)."""
        while True:
            await self.step()

    async def step(self) -> None:
        """One round: new requests -> the log; answers in the log -> the desk."""
        from agentlab.store.human import ANSWERS, REQUESTS, post_row
        from agentlab.store.tail import tail_rows

        rows = await self.desk.take.remote(self.poll_s)
        new = [r for r in rows if str(r["request_id"]) not in self._posted]
        if new:
            posted, _ = await asyncio.to_thread(tail_rows, self.run_dir, REQUESTS)
            known = {str(r.get("request_id")) for r in posted}
            for row in new:
                rid = str(row["request_id"])
                if rid not in known:  # a step re-run (lost attempt, resume) asks once
                    await asyncio.to_thread(post_row, self.run_dir, row)
                    known.add(rid)
                self._posted.add(rid)
        self._open |= {str(r["request_id"]) for r in rows}
        if not self._open:
            return
        found, self._cursor = await asyncio.to_thread(
            tail_rows, self.run_dir, ANSWERS, self._cursor
        )
        for a in found:
            self._answers[str(a.get("request_id"))] = str(a.get("answer"))
        for rid in sorted(self._open & set(self._answers)):
            await self.desk.answer.remote(rid, self._answers[rid])
            self._open.discard(rid)
