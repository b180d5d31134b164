"""The time server of a virtual-clock run on Ray: one simulated server, FIFO-aware windows.

Under ``clock="virtual"`` every LLM call of a tick goes through one simulated server,
client-CPU queue and AIMD gate (see runtime/README.md, "Virtual time across Ray
workers"). On Ray the agents run in the batch workers, and this server runs the calls:

- a worker reports each call with its *issue time* (the answer that woke the agent, or
  the tick's start) and its *rank* (which of the events at that instant woke it: the
  answer's ordinal here, or the agent's place in the batch order at the tick's start);
- the server applies the front half of each call after the fact, in (issue time, rank)
  order, at explicit times (``SimServer.dispatch_at``, ``LLMClient._open``), and runs
  the back half (``LLMClient._serve``: gate, engine, waits, retries) unchanged on its own
  :class:`~agentlab.core.clock.HorizonClock`, so the engine advances at the same instants
  as in a local run;
- it runs its events while no call it has not heard of can change them: a call issued
  after the first answer of the window ``e`` is sent no earlier than ``s = e + (its
  share)`` and then queues behind every call already waiting at the FIFO gate. So an
  event at ``t`` may run if ``t < s``, or while more calls that queued before ``s`` are
  still waiting than one event can admit (the gate stays FIFO for the late call: it is
  put in its place by the time it queued, :class:`OrderedGate`). When no event may run
  it hands the window's answers out in the order they happened, and waits for the
  workers that got one to report what their agents did next.

A tie the server cannot order as a local run would — a call sent at exactly the instant
of another event — raises :class:`~agentlab.errors.AgentlabError` instead of guessing.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agentlab.core.clock import HorizonClock
from agentlab.core.records import LLMResponse
from agentlab.errors import AgentlabError, LLMError
from agentlab.llm.aimd import AIMDLimiter, ConcurrencyGate
from agentlab.llm.client import LLMClient
from agentlab.llm.structured import output_spec

__all__ = ["Answer", "CallIn", "OrderedGate", "TimeServer", "TimeServerError"]

#: set in a late call's task: when it queued at the gate (before the server's now)
_QUEUED_AT: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "agentlab_vclock_queued_at", default=None
)


class TimeServerError(AgentlabError):
    """The time server could not keep a virtual run on Ray exact (a tie, a lost worker)."""


@dataclass(slots=True)
class CallIn:
    """One LLM call as a worker reports it (see the module docstring)."""

    worker: int
    call_id: int
    issued: float
    rank: tuple[int, ...]
    agent_id: str | None
    messages: list[dict[str, Any]]
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Answer:
    """The outcome of a call: its response or error, when it happened, in which order."""

    call_id: int
    at: float
    ordinal: int
    response: LLMResponse | None = None
    error: LLMError | None = None


class OrderedGate(ConcurrencyGate):
    """The FIFO concurrency gate, where a call may also queue at a time already past.

    Waiters are kept in the order they queued (by clock time), so a call the server
    hears of late takes the place it had locally. It raises if that call would have
    found a free slot: then the server already ran events it could have changed.
    """

    __slots__ = ("_clock", "_queued")

    def __init__(self, limiter: AIMDLimiter, clock: HorizonClock) -> None:
        super().__init__(limiter)
        self._clock = clock
        self._queued: dict[asyncio.Future[None], float] = {}

    def try_acquire(self) -> int | None:
        if _QUEUED_AT.get() is not None:
            if self.in_flight < self.limiter.limit and not self.waiters:
                raise TimeServerError("a late call found a free slot (horizon violated)")
            return None
        return super().try_acquire()

    async def acquire(self) -> int:
        at = _QUEUED_AT.get()
        late = at is not None
        if at is None:
            if self.in_flight < self.limiter.limit and not self.waiters:
                self.in_flight += 1
                return self.limiter.epoch
            at = self._clock.now()
        else:
            _QUEUED_AT.set(None)  # only the call's first entry is late
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters, queued = self.waiters, self._queued
        i = len(waiters)
        # behind every waiter that queued before it; a late call also ahead of those that
        # queued after it here (at the same instant their order locally is not known)
        while i > 0 and queued[waiters[i - 1]] >= at:
            if queued[waiters[i - 1]] == at:
                if late:
                    raise TimeServerError(f"a late call queued at the instant t={at!r} of another")
                break
            i -= 1
        waiters.insert(i, fut)
        queued[fut] = at
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()
            elif fut in waiters:
                waiters.remove(fut)
            raise
        finally:
            queued.pop(fut, None)
        return self.limiter.epoch

    def waiting_before(self, t: float, cap: int) -> int:
        """Waiters that queued before ``t``, counted up to ``cap``."""
        n = 0
        for fut in self.waiters:
            if n >= cap or self._queued.get(fut, math.inf) >= t:
                break
            n += 1
        return n


class TimeServer:
    """Runs every LLM call of a virtual tick for all workers (see the module docstring).

    Thread-safe: workers call :meth:`exchange` from their own threads (a threaded Ray
    actor, or threads in one process); the calls run in this server's own event loop.

    Args:
        client: the run's LLM client config (``LLMClient.to_dict()``), a ``sim/`` model
            with client CPU per call (``client_overhead_s > 0``).
    """

    def __init__(self, client: dict[str, Any]) -> None:
        self._config = client
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="agentlab-time-server", daemon=True
        )
        self._thread.start()
        self._cv = threading.Condition()
        self._tick: _Tick | None = None
        self._error: BaseException | None = None

    # --- the driver's side --------------------------------------------------------------

    def begin_tick(self, start: float, state: dict[str, Any] | None, workers: int) -> None:
        """Start a tick at virtual time ``start`` with the client's committed ``state``;
        ``workers`` batches will report their first calls."""
        with self._cv:
            self._error = None
            self._tick = self._run(_begin(self._config, start, state, workers))

    def end_tick(self) -> dict[str, Any]:
        """After every worker reported done: the tick's ``end`` time, the client
        ``state``, and how many ``windows`` it took for how many ``answers``."""
        with self._cv:
            tick = self._require()
            if tick.expected or tick.waiting:
                raise TimeServerError(
                    f"tick ended with workers still waiting: {sorted(tick.waiting)}"
                )
            out = self._run(_end(tick))
            self._tick = None
            return out

    # --- the workers' side ---------------------------------------------------------------

    def exchange(self, worker: int, calls: list[CallIn], done: bool) -> list[Answer]:
        """Report ``worker``'s new calls (or that its batch is ``done``); return its next
        answers, in the order they happened, once the window that makes them has run."""
        with self._cv:
            tick = self._require()
            tick.inbox.extend(calls)
            tick.expected.discard(worker)
            if done:
                tick.waiting.discard(worker)
            else:
                tick.waiting.add(worker)
            if not tick.expected:
                try:
                    self._window(tick)
                except BaseException as exc:
                    self._error = exc
                self._cv.notify_all()
            while not done and worker not in tick.out and self._error is None:
                self._cv.wait()
            if self._error is not None:
                raise self._error
            return tick.out.pop(worker, [])

    # --- inside ------------------------------------------------------------------------

    def _require(self) -> _Tick:
        if self._error is not None:
            raise self._error
        if self._tick is None:
            raise TimeServerError("no tick in progress on the time server")
        return self._tick

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _window(self, tick: _Tick) -> None:
        """Admit the reported calls, run what may run, hand out the answers (locked)."""
        calls, tick.inbox = tick.inbox, []
        answers = self._run(tick.window(calls))
        for a, worker in answers:
            tick.out.setdefault(worker, []).append(a)
        tick.expected = set(tick.out)
        tick.waiting -= tick.expected
        if not answers and tick.waiting:
            raise TimeServerError(
                f"workers {sorted(tick.waiting)} wait for answers but no call is in flight"
            )


async def _begin(
    config: dict[str, Any], start: float, state: dict[str, Any] | None, workers: int
) -> _Tick:
    # Module functions, not methods: a Ray actor with a coroutine method is an async
    # actor, whose one event loop the blocking exchange() calls would stall.
    clock = HorizonClock(start)
    client = LLMClient.from_dict(config).with_clock(clock)
    live = client._get_live()
    if state is not None:
        live.restore_state(state)
    live.use_gate(OrderedGate(live.limiter, clock))
    return _Tick(clock, client, set(range(workers)))


async def _end(tick: _Tick) -> dict[str, Any]:
    await asyncio.sleep(0)
    state = tick.client.export_state()
    return {"end": tick.clock.now(), "state": state, "windows": tick.windows,
            "answers": tick.ordinal, "busy_s": tick.busy_s}  # fmt: skip


class _Tick:
    """The server's state during one tick (lives in the server's event loop)."""

    def __init__(self, clock: HorizonClock, client: LLMClient, workers: set[int]) -> None:
        self.clock, self.client = clock, client
        self.live = client._get_live()
        self.expected = workers  # workers whose report the next window waits for
        self.waiting: set[int] = set()  # workers blocked on answers
        self.inbox: list[CallIn] = []
        self.out: dict[int, list[Answer]] = {}
        self.answers: list[tuple[Answer, int]] = []
        self.ordinal = 0
        self.send_min = math.inf  # earliest a call not yet reported can be sent
        self.ran: set[float] = set()  # event times run since the last admission
        self.failure: BaseException | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.windows = 0
        # ordinals (lo, hi] of the answers whose agents report next (-1: the tick's start)
        self.fresh: tuple[float, float] = (-1, -1)
        self.busy_s = 0.0  # wall seconds the server ran windows (the rest is waiting)

    async def window(self, calls: list[CallIn]) -> list[tuple[Answer, int]]:
        t0 = time.perf_counter()
        self.check_fresh(calls)
        self.admit(calls)
        self.windows += 1
        self.fresh = (self.ordinal, math.inf)  # answers of this window wake the next calls
        self.answers, self.send_min = [], math.inf
        await self.clock.run(self.may_wake)
        self.busy_s += time.perf_counter() - t0
        if self.failure is not None:
            raise self.failure
        return self.answers

    def check_fresh(self, calls: list[CallIn]) -> None:
        """Every call must come from an agent the last window woke (or, in the first, from
        the tick's start): an agent that waited on something else meanwhile (a person,
        a thread) reports a call the server may already have run past — raise."""
        lo, hi = self.fresh
        for c in calls:
            first = c.rank[0] == 0
            if (first and lo >= 0) or (not first and not lo < c.rank[1] <= hi):
                raise TimeServerError(
                    f"agent {c.agent_id!r} issued an LLM call at t={c.issued!r} only after "
                    "the time server ran on: under clock='virtual' on executor 'ray' an "
                    "agent may wait only on the LLM and the env between its calls"
                )

    def admit(self, calls: list[CallIn]) -> None:
        """The front halves of ``calls`` at their explicit times, in issue order."""
        server = self.live.server
        assert server is not None
        now = self.clock.now()
        due = self.clock.due_times()
        for c in sorted(calls, key=lambda c: (c.issued, c.rank)):
            ready = server.dispatch_at(c.issued)
            start = c.issued + (ready - c.issued)  # as the clock computes that wake-up
            if start in self.ran or start in due:
                raise TimeServerError(
                    f"a call of agent {c.agent_id!r} is sent at t={start!r}, the instant of "
                    "another event: their order in a local run is not known here"
                )
            kw = dict(c.kwargs)
            labels = kw.pop("labels", None)
            rec = self.client._open(self.live, start, c.agent_id, labels, False)
            task = asyncio.get_running_loop().create_task(
                self.serve(c, rec, kw, start if start < now else None, start)
            )
            self.tasks.add(task)  # a reference until it ends (the loop keeps weak ones)
            task.add_done_callback(self.tasks.discard)
        self.ran = set()

    async def serve(
        self, c: CallIn, rec: Any, kw: dict[str, Any], late: float | None, start: float
    ) -> None:
        """One call's back half; its answer joins the window's list when it ends."""
        client, live = self.client, self.live
        if late is not None:
            _QUEUED_AT.set(late)
        else:
            await self.clock.sleep_until(start)
        fmt = kw.pop("response_format", None)
        tools = kw.pop("tools", None)
        prior = int(kw.pop("prior_attempts", 0))
        params = {**client._req_defaults, **kw} if kw else client._req_defaults
        spec = output_spec(fmt) if fmt is not None else None
        try:
            resp = await client._serve(live, rec, c.messages, spec, tools, params, prior, None)
            answer = Answer(c.call_id, 0.0, 0, response=resp)
        except LLMError as exc:
            answer = Answer(c.call_id, 0.0, 0, error=exc)
        except BaseException as exc:  # a bug or a violated horizon: the tick fails
            self.failure = exc
            return
        answer.at = t = self.clock.now()
        self.ordinal += 1
        answer.ordinal = self.ordinal
        self.answers.append((answer, c.worker))
        if t < self.send_min:
            self.send_min = self.earliest_send(t)

    def earliest_send(self, t: float) -> float:
        """When a call issued at ``t`` or later is sent at the earliest (its share)."""
        server = self.live.server
        assert server is not None
        send = server.next_send(t)
        # a later issuer with the same share rounds ``e + (ready - e)`` maybe an ulp lower
        return send - 1e-9 * max(1.0, abs(send))

    def may_wake(self, t: float) -> bool:
        """Whether the event at ``t`` is final whatever the unreported calls are."""
        if self.failure is not None:
            return False
        send = self.send_min
        ok = t < send
        server = self.live.server
        if not ok and server is not None and not server._instant:
            # One event frees at most one slot, and its release admits waiters while the
            # limit (raised since by earlier answers) allows: limit - in_flight + 1 of them.
            # (An instant backend could answer the admitted ones in the same event and
            # free more: there the window ends at ``send``.)
            gate = self.live.gate()
            assert isinstance(gate, OrderedGate)
            grants = max(0, self.live.limiter.limit - gate.in_flight + 1)
            ok = gate.waiting_before(send, grants + 1) > grants
        if ok:
            self.ran.add(t)
        return ok
