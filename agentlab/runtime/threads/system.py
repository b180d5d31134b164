"""``AgentSystem``: a pool of suspendable agent threads sharing a store, tools and a model.

Every resumption is a :class:`Delivery` in the store's queue. A *slice* consumes one
delivery: load the thread (state + history), apply the delivery, run at most one model
completion, persist state + history and acknowledge the delivery in one commit, then
dispatch at most one tool call. A slice never waits on a tool.

Two modes run the same slice code:

- **local** (``async with system:``): ``send`` also puts the delivery in an in-memory inbox
  and starts a driver task for the thread if it has none; the driver runs the thread's
  slices in order and exits when the inbox is empty. An idle thread has no task and no
  inbox — only bytes in the store (and, for threads that ran recently, within a bound, their
  decoded form until the store compresses them: ``hot.HotCache``).
- **step** (``await system.step()``): claims one batch of queued deliveries (optionally one
  partition of threads), runs their slices (threads concurrently, each thread in order),
  and returns. Nothing is kept in memory between calls.

Crash safety: the commit makes "state advanced" and "delivery consumed" one atomic step;
a delivery redelivered after a crash is dropped by its dedup id; a tool call persisted but
never started (crash between commit and dispatch) is started again by :meth:`recover`.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from agentlab.core.clock import Clock, RealClock
from agentlab.core.ids import validate_agent_id
from agentlab.core.records import ToolCall
from agentlab.errors import AgentError, ConfigError
from agentlab.runtime.gc_tuning import GCTuning
from agentlab.runtime.threads.codec import (
    decode_history,
    decode_state,
    encode_history,
    encode_state,
)
from agentlab.runtime.threads.codec import raw_history as _raw
from agentlab.runtime.threads.hot import Hot, HotCache
from agentlab.runtime.threads.hot import same_bytes as _same
from agentlab.runtime.threads.lineage import Lineages
from agentlab.runtime.threads.model import LLMClientModel, Model, ScriptedModel
from agentlab.runtime.threads.records import Delivery, StepResult, ThreadState
from agentlab.runtime.threads.runlog import ThreadLog
from agentlab.runtime.threads.runtime_tools import dispatch_runtime_tool, note_runtime_call
from agentlab.runtime.threads.shapes import RUNTIME_TOOLS
from agentlab.runtime.threads.slice import COMPLETE, apply_delivery, compact_messages, finish_turn
from agentlab.runtime.threads.spans import ThreadSpans, traced_send
from agentlab.runtime.threads.stores import MemoryThreadStore, ThreadStore, commit_frames
from agentlab.runtime.threads.tools import Tool, ToolContext

__all__ = ["AgentSystem", "SimulatedCrash", "StepResult"]

FAULT_POINTS = ("before_persist", "after_persist", "after_dispatch")
_READS_ENCODED = (LLMClientModel, ScriptedModel)  # handed a history still encoded: Lineages


class SimulatedCrash(AgentError):
    """Raised by a fault hook to simulate a process crash at an injection point."""


class AgentSystem:
    """A pool of agent threads; see the module docstring.

    Args:
        model: streams assistant turns (:class:`~agentlab.runtime.threads.model.Model`).
        store: a :class:`~agentlab.runtime.threads.stores.ThreadStore` (default: in-memory).
        tools: asynchronous tools offered to every thread.
        system_prompt: first message of every new thread.
        agent_tools: also offer the runtime tools (``receive_event``, ``send_message``,
            ``spawn_agent``, ``report``, ``close_agent``).
        run_dir: record ``thread_events`` in this run's log (and, for an
            :class:`~agentlab.runtime.threads.model.LLMClientModel`, its calls in
            ``llm_calls``/``llm_attempts``).
        clock: timestamps and timers.
        token_budget: compact a history whose size exceeds this many tokens (bytes / 4).
        summarize: ``summarize(covered_messages) -> str`` for compaction.
        seen_window: dedup ids remembered per thread.
        fault: ``fault(point, thread_id)`` called at each of ``FAULT_POINTS`` (tests raise
            :class:`SimulatedCrash` there).
        skills, skill_env: Agent Skills and the env their scripts' ``allowed-tools`` name
            (:mod:`agentlab.runtime.threads.skills`).
        exist_ok: with ``run_dir``: ``True`` (default) adds to a run already there,
            ``"replace"`` takes the run's writer lock and deletes it first (refused,
            naming the holder, while another process writes it), ``False`` refuses it.
            Local mode (``async with system:``) holds the lock and marks ``run.json``
            ``running`` → ``done`` / ``failed``.
        decoded_cache, decoded_cache_bytes: local mode keeps the decoded history of recent
            threads (at most ``decoded_cache`` threads and ``decoded_cache_bytes`` of raw
            history, 32 MiB if only a count is given) so their next turn skips decoding it;
            off by default: it costs memory (``hot.HotCache``; README "Decoded histories").
    """

    def __init__(
        self,
        model: Model,
        store: ThreadStore | None = None,
        tools: Iterable[Tool] = (),
        *,
        system_prompt: str | None = None,
        agent_tools: bool = True,
        run_dir: str | Path | None = None,
        clock: Clock | None = None,
        token_budget: int | None = None,
        summarize: Callable[[list[dict[str, Any]]], str] | None = None,
        seen_window: int = 128,
        fault: Callable[[str, str], None] | None = None,
        exist_ok: bool | Literal["replace"] = True,
        skills: Any = None,
        skill_env: Any = None,
        decoded_cache: int | None = None,
        decoded_cache_bytes: int | None = None,
    ) -> None:
        self.model = model
        self.store: ThreadStore = store if store is not None else MemoryThreadStore()
        self._decoded = HotCache(decoded_cache, self.store, decoded_cache_bytes)
        self._held: Any = getattr(self.store, "read_history", None)  # MemoryThreadStore's
        self._lineages = Lineages(self.store)  # which messages a model call saw before
        self.tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in RUNTIME_TOOLS:
                raise ConfigError(f"tool name {t.name!r} is reserved by the runtime")
            self.tools[t.name] = t
        self.agent_tools = agent_tools
        self._schemas = [t.schema() for t in self.tools.values()]
        if agent_tools:
            self._schemas += list(RUNTIME_TOOLS.values())
        self.system_prompt = system_prompt
        self.clock = clock or RealClock()
        self.token_budget = token_budget
        self.summarize = summarize
        self.seen_window = seen_window
        self.fault = fault
        self.run_dir = None if run_dir is None else Path(run_dir)
        self._writer: Any = None  # the run's WriterLock while in local mode
        if self.run_dir is not None and exist_ok is not True:
            from agentlab.store.lifecycle import claim_run_dir

            # before the log opens anything: "replace" deletes only under the lock
            self._writer = claim_run_dir(self.run_dir, exist_ok, what="AgentSystem")
            weakref.finalize(self, self._writer.release)
        self.log = ThreadLog(run_dir, self.clock, "local")
        self._spans, self._run_slice = ThreadSpans.attach(self)  # thread → slice → call spans
        self.skills: Any = None  # Agent Skills: catalogue + skill tools (threads/skills.py)
        if skills:
            from agentlab.runtime.threads.skills import ThreadSkills

            self.skills = ThreadSkills.attach(self, skills, skill_env)
        if run_dir is not None and isinstance(model, LLMClientModel):
            from agentlab.runtime.services import RunServices

            # one recording path: the model's calls land in llm_calls like a society's
            kind = "virtual" if self.clock.is_virtual else "real"
            services = RunServices(run_dir, model.client, clock=kind)
            services.bind_clock(self.clock)
            model.record_to(services)
        # local-mode only (empty between slices of an idle thread)
        self._local = False
        self._inbox: dict[str, deque[tuple[int, Delivery]]] = {}
        self._drivers: dict[str, asyncio.Task[None]] = {}
        self._completing: dict[str, asyncio.Task[Any]] = {}
        self._interrupts: set[str] = set()
        self._tool_tasks: set[asyncio.Task[Any]] = set()
        self._idle: asyncio.Event | None = None
        self._gc: GCTuning | None = None  # while any driver runs (a busy period)
        self.errors: list[BaseException] = []
        self.completions = 0

    # --- sending -------------------------------------------------------------------------
    def send(self, d: Delivery) -> int:
        """Queue a delivery (durably, in the store); in local mode also start its thread.

        Safe to call from tools, callbacks and other threads' slices. New user input for a
        thread whose completion is streaming cancels that completion (the partial turn kept).
        """
        tid = d.thread_id  # a thread with a driver passed validate_agent_id when it started
        if type(tid) is not str or tid not in self._drivers:
            validate_agent_id(tid)
        seq = self.store.enqueue(tid, d.encode())
        if self._local:
            self._route(seq, d)
        return seq

    def send_user(self, thread_id: str, text: str, dedup_id: str) -> int:
        """Shortcut for ``send(Delivery(thread_id, "user", text, dedup_id))``."""
        return self.send(Delivery(thread_id, "user", text, dedup_id))

    def _route(self, seq: int, d: Delivery) -> None:
        tid = d.thread_id
        box = self._inbox.get(tid)
        if box is None:
            box = self._inbox[tid] = deque()
        box.append((seq, d))
        if tid not in self._drivers:
            if self._idle is not None:
                self._idle.clear()
            if not self._drivers and self._gc is None:
                self._gc = GCTuning()  # a busy period starts: see _end_busy
            self._drivers[tid] = asyncio.get_running_loop().create_task(self._drive(tid))
        elif d.kind == "user" and tid in self._completing:
            self._interrupts.add(tid)
            self._completing[tid].cancel()

    # --- reading ---------------------------------------------------------------------------
    def state(self, thread_id: str) -> ThreadState | None:
        """The stored state of a thread (``None`` if it never received anything)."""
        d = decode_state(self.store.read(thread_id, "state"))
        return None if d is None else ThreadState.from_dict(d)

    def history(self, thread_id: str) -> list[dict[str, Any]]:
        """The stored history of a thread (OpenAI message dicts)."""
        return decode_history(self.store.read(thread_id, "history"))

    def threads(self) -> list[str]:
        """Ids of every stored thread."""
        return self.store.agents()

    def __repr__(self) -> str:  # (what a notebook cell ending in the system shows)
        run = f", run_dir={str(self.run_dir)!r}" if self.run_dir is not None else ""
        return (f"AgentSystem(model={type(self.model).__name__}, tools=[{', '.join(self.tools)}], "
                f"threads={len(self.threads())}, completions={self.completions}{run})")  # fmt: skip

    # --- the slice ---------------------------------------------------------------------------
    async def _slice(self, seq: int, d: Delivery, hot: Hot | None = None) -> tuple[str, Hot]:
        """Run one slice; returns the action and the thread's decoded form after it.

        ``hot`` is what the previous slice of the same thread returned (same driver or step,
        or its last turn through the ``HotCache``): if the store still holds exactly the bytes
        it committed, its decoded state and messages are reused instead of decoded again.
        """
        tid = d.thread_id
        store = self.store
        raw_state = store.read(tid, "state")
        held = self._held  # the history as the store holds it, not a copy (in-place appends)
        stored = store.read(tid, "history") if held is None else held(tid)
        lineage = self._lineages.of(tid, raw_state)
        if hot is not None and _same(raw_state, hot.raw_state) and _same(stored, hot.stored):
            st, blob, msgs = hot.st, hot.blob, hot.msgs
        else:
            saved = decode_state(raw_state)
            st = ThreadState(tid) if saved is None else ThreadState.from_dict(saved)
            blob, msgs = _raw(stored), None
            hot = None
        new: list[dict[str, Any]] = []
        if raw_state is None and self.system_prompt is not None:
            new.append({"role": "system", "content": self.system_prompt})
        action = apply_delivery(st, d, new, seen_window=self.seen_window)
        log = self.log
        logging = log.enabled
        if action[:5] == "drop:":
            # apply_delivery changed nothing, so the decoded form stays valid
            store.ack((seq,))
            if logging:
                log.emit(
                    "drop",
                    tid,
                    kind=d.kind,
                    dedup_id=d.dedup_id,
                    call_id=d.call_id,
                    reason=action[5:],
                )
            return action, hot if hot is not None else Hot(raw_state, stored, blob, st, msgs)
        if logging:
            log.emit(
                "delivery", tid, kind=d.kind, dedup_id=d.dedup_id, call_id=d.call_id, action=action
            )
        call: ToolCall | None = None
        compacted_now = False
        if action == COMPLETE:
            budget = -1 if self.token_budget is None else self.token_budget
            over = budget >= 0 and (len(blob) + 200 * len(new)) // 4 > budget
            encoded = type(self.model) in _READS_ENCODED and self._lineages.continued(tid, lineage)
            if msgs is None and (over or not encoded):  # else handed encoded (Lineages.hand)
                msgs = decode_history(blob) if blob else []
            if msgs is not None:
                msgs.extend(new)
            if over and msgs is not None:
                compacted, covered = compact_messages(msgs, budget * 2, self.summarize)
                if covered:
                    log.emit("compaction", tid, covered=covered, bytes_before=len(blob))
                    msgs, blob, new = compacted, b"", list(compacted)
                    lineage = self._lineages.fresh()
                    st.compactions += 1
                    compacted_now = True
            t0 = time.perf_counter() if logging else 0.0
            handed = self._lineages.hand(tid, msgs, lineage, blob, new, st.n_messages)
            text, calls, partial = await self._complete(tid, st, handed)
            msg, call = finish_turn(st, text, calls, partial=partial)
            if call is not None and call.name in RUNTIME_TOOLS:
                note_runtime_call(st, call)
            new.append(msg)
            if msgs is not None:
                msgs.append(msg)
            self.completions += 1
            if logging:
                if partial:
                    log.emit("interrupt", tid, chars=len(text))
                wall = time.perf_counter() - t0
                log.emit("slice", tid, kind=d.kind, wall_s=wall, partial=partial)
        elif msgs is not None:
            msgs.extend(new)
        # Append-only: only this slice's messages are encoded (commit_frames appends them).
        frames = encode_history(new)
        st.n_messages = len(new) if compacted_now else st.n_messages + len(new)
        st.history_bytes = len(blob) + len(frames)
        st.slices += 1
        fault = self.fault
        if fault is not None:
            fault("before_persist", tid)
        raw_state = encode_state(st.to_dict())
        base = None if compacted_now else stored
        blob = commit_frames(store, tid, raw_state, base, blob, frames, seq)
        self._lineages.committed(tid, lineage, raw_state, blob, st.n_messages)
        if fault is not None:
            fault("after_persist", tid)
        if call is not None:
            self._dispatch(tid, call)
            if logging:
                log.emit("suspend", tid, call_id=call.id, tool=call.name)
        if fault is not None:
            fault("after_dispatch", tid)
        return action, Hot(raw_state, blob, blob, st, msgs)

    async def _complete(
        self, tid: str, st: ThreadState, msgs: Sequence[dict[str, Any]]
    ) -> tuple[str, list[ToolCall], bool]:
        parts: list[str] = []
        calls: list[ToolCall] = []
        # msgs: a copy or read-only view (Lineages.hand); an LLMClientModel's stream is run here
        llm = model if type(model := self.model) is LLMClientModel else None
        start: Callable[..., Any] = model.stream if llm is None else llm.open
        s = start(msgs, self._schemas, thread_id=tid, turn=st.completions)
        if llm is not None and (done := llm.answered(s)) is not None:
            return *done, False  # answered at once: no generator run, nothing to interrupt
        stream = s.__aiter__()  # an async generator either way: closed at once on interrupt
        local = self._local
        if local:
            task = asyncio.current_task()
            assert task is not None
            self._completing[tid] = task
        try:
            async for x in stream:
                if type(x) is str:
                    parts.append(x)
                else:
                    calls.append(x)  # type: ignore[arg-type]
        except asyncio.CancelledError:
            if tid not in self._interrupts:
                raise
            self._interrupts.discard(tid)
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            # close the model's stream now, not at collection: it holds a concurrency slot
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
            return "".join(parts), calls, True
        finally:
            if local:
                self._completing.pop(tid, None)
        if llm is not None:
            calls += llm.finished(s)
        return "".join(parts), calls, False

    # --- tools ----------------------------------------------------------------------------------
    def _dispatch(self, tid: str, call: ToolCall) -> None:
        if self.log.enabled:
            self.log.emit("dispatch", tid, call_id=call.id, tool=call.name)
        if call.name in RUNTIME_TOOLS:
            dispatch_runtime_tool(self, tid, call)
            return
        ctx = ToolContext(traced_send(self, tid, call), tid, call.id, call.name)
        tool = self.tools.get(call.name)
        if tool is None:
            ctx.result(f"error: unknown tool {call.name!r}; available: {sorted(self.tools)}")
            return
        try:
            r = tool.start(ctx, call.arguments)
        except Exception as exc:  # a failing tool is a result the model sees, not a crash
            ctx.result(f"error: {type(exc).__name__}: {exc}")
            return
        if r is None:
            return
        if type(r) is not str and inspect.isawaitable(r):  # str first: the common, cheap case
            task = asyncio.ensure_future(self._await_tool(ctx, r))
            self._tool_tasks.add(task)
            task.add_done_callback(self._tool_tasks.discard)
        else:
            ctx.result(r)

    async def _await_tool(self, ctx: ToolContext, aw: Any) -> None:
        try:
            r = await aw
        except Exception as exc:
            r = f"error: {type(exc).__name__}: {exc}"
        if r is not None:
            ctx.result(r)

    async def set_timer(self, thread_id: str, delay_s: float, payload: Any, dedup_id: str) -> None:
        """Deliver a ``timer`` to ``thread_id`` after ``delay_s`` clock seconds (local mode)."""

        async def fire() -> None:
            await self.clock.sleep(delay_s)
            self.send(Delivery(thread_id, "timer", payload, dedup_id))

        task = asyncio.ensure_future(fire())
        self._tool_tasks.add(task)
        task.add_done_callback(self._tool_tasks.discard)

    # --- local mode ------------------------------------------------------------------------------
    async def _drive(self, tid: str) -> None:
        box = self._inbox[tid]
        hot = self._decoded.take(tid)
        try:
            while box:
                seq, d = box.popleft()
                _, hot = await self._run_slice(seq, d, hot)
            # only after slices that all committed: a failed one may have changed hot.st
            self._decoded.keep(tid, hot)
        except Exception as exc:
            # Like a crash of this thread: the delivery stays queued in the store.
            self.errors.append(exc)
            self.log.emit("error", tid, error=f"{type(exc).__name__}: {exc}")
            box.clear()
        finally:
            del self._drivers[tid]
            if not box:
                self._inbox.pop(tid, None)
            if not self._drivers:
                self._end_busy()

    def _end_busy(self) -> None:
        # GCTuning for a busy period, first driver to last (runtime/threads/README.md, "The
        # GC"): an idle system (a server between bursts) leaves the GC as it found it.
        if self._gc is not None:
            self._gc.restore()
            self._gc = None
        if self._idle is not None:
            self._idle.set()

    async def start(self) -> None:
        """Enter local mode: recover queued deliveries and unanswered tool calls.

        With a ``run_dir`` this takes the run's writer lock and marks it ``running`` in
        ``run.json`` (``close()`` marks it ``done``, or ``failed`` when slices failed).
        """
        if self.run_dir is not None:
            from agentlab.store.lifecycle import hold_run_dir
            from agentlab.store.manifest import write_manifest

            if self._writer is None or not self._writer.held:
                self._writer = hold_run_dir(self.run_dir, "AgentSystem")
            write_manifest(
                self.run_dir,
                kind="threads",
                config={"tools": sorted(self.tools), "agent_tools": self.agent_tools,
                        "model": getattr(getattr(self.model, "client", None), "model", None),
                        **({"skills": self.skills.digest} if self.skills else {})},
                seed=None,
            )  # fmt: skip
        self._local = True
        self.log.mode = "local"
        self._idle = asyncio.Event()
        self._idle.set()
        await self.recover()

    async def recover(self) -> int:
        """Re-start tool calls that were persisted but maybe never dispatched, and (in local
        mode) re-route queued deliveries. Returns the number of calls re-dispatched."""
        n = 0
        for tid in self.store.agents():
            st = self.state(tid)
            if st is None or st.status == "closed":
                continue
            for cid, p in list(st.pending.items()):
                if p["name"] == "receive_event":
                    continue
                self.log.emit("redispatch", tid, call_id=cid, tool=p["name"])
                self._dispatch(tid, ToolCall(cid, p["name"], p.get("arguments") or {}))
                n += 1
        if self._local:
            for seq, tid, body in self.store.claim(limit=10**9):
                if not any(s == seq for s, _ in self._inbox.get(tid, ())):
                    self._route(seq, Delivery.decode(body))
        return n

    async def drain(self, timeout: float | None = None) -> None:
        """Wait (local mode) until no thread has work and no tool task is running.

        Raises:
            AgentError: a slice failed (the first error; all are in ``errors``).
        """
        if not self._local or self._idle is None:
            raise AgentError("drain() needs local mode: use 'async with system:' or start()")
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._drivers or self._tool_tasks:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if left == 0.0:
                raise TimeoutError(f"threads still busy after {timeout}s: {len(self._drivers)}")
            if self._drivers:
                await asyncio.wait_for(self._idle.wait(), left)
            else:
                await asyncio.wait(set(self._tool_tasks), timeout=left)
            await asyncio.sleep(0)
        self.log.flush()
        if self.errors:
            raise AgentError(f"{len(self.errors)} slice(s) failed; first: {self.errors[0]!r}")

    async def close(self) -> None:
        """Leave local mode (cancels running tool tasks; queued deliveries stay stored)."""
        for t in list(self._tool_tasks) + list(self._drivers.values()):
            t.cancel()
        await asyncio.gather(*self._tool_tasks, *self._drivers.values(), return_exceptions=True)
        self._local = False
        self._end_busy()  # a driver cancelled before it first ran never reached its finally
        self._decoded.clear()
        self.log.flush()
        if self._writer is not None:
            from agentlab.store.lifecycle import mark_status

            first = self.errors[0] if self.errors else None
            mark_status(
                self.run_dir,  # type: ignore[arg-type]
                "failed" if first is not None else "done",
                error=None
                if first is None
                else f"{len(self.errors)} slice(s) failed; first: {type(first).__name__}: {first}",
                counters={"steps": self.completions, "step_errors": len(self.errors)},
            )
            self._writer.release()
            self._writer = None

    async def __aenter__(self) -> AgentSystem:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- step mode ----------------------------------------------------------------------------------
    async def step(self, batch: list[tuple[int, Delivery]] | None = None, *, partition: int = 0,
                   partitions: int = 1, limit: int = 1000) -> StepResult:  # fmt: skip
        """Process one batch of queued deliveries and return (step mode).

        Args:
            batch: ``(queue seq, delivery)`` pairs; default: claim up to ``limit`` oldest
                deliveries of ``partition`` (of ``partitions``) from the store's queue.
                Workers that each own one partition keep every thread's order.
        """
        if self._local:
            raise AgentError("step() cannot run while local mode is active; close() first")
        self.log.mode = "step"
        if batch is None:
            batch = [
                (s, Delivery.decode(b))
                for s, _, b in self.store.claim(partition, partitions, limit)
            ]
        per_thread: dict[str, list[tuple[int, Delivery]]] = {}
        for seq, d in batch:
            per_thread.setdefault(d.thread_id, []).append((seq, d))
        res = StepResult(deliveries=len(batch))
        before = self.completions

        async def run(items: list[tuple[int, Delivery]]) -> None:
            hot: Hot | None = None
            for seq, d in items:
                action, hot = await self._run_slice(seq, d, hot)
                res.slices += 1
                res.dropped += action.startswith("drop")

        await asyncio.gather(*(run(v) for v in per_thread.values()))
        # Tools started in this step finish before it returns: nothing outlives the call.
        while self._tool_tasks:
            await asyncio.gather(*list(self._tool_tasks), return_exceptions=True)
        res.completions = self.completions - before
        res.remaining = self.store.queued()
        self.log.flush()
        return res

    async def run_steps(
        self, *, partitions: int = 1, limit: int = 1000, max_steps: int = 10**6
    ) -> int:
        """Call :meth:`step` over every partition until the queue is empty; returns steps."""
        n = 0
        while self.store.queued() and n < max_steps:
            for p in range(partitions):
                await self.step(partition=p, partitions=partitions, limit=limit)
                n += 1
        return n
