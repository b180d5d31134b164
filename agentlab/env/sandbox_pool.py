"""Generated code in worker processes: a hang or a memory bomb costs one request.

:class:`SandboxPool` keeps a few ``python -m agentlab.env.sandbox_worker`` processes and
runs each program in one of them with the interpreter of :mod:`agentlab.env.sandbox`. Each
worker is confined (see :mod:`agentlab.env.sandbox_worker` and the env README): a clean
environment, a private empty working directory, ``PR_SET_NO_NEW_PRIVS``, limits on memory,
CPU, processes, file size and open files (clamped to the limits the host imposes), root
dropped to ``nobody``, its own process group — killed as a whole.

The env's tools stay in the parent: when a program calls one, the worker sends the call
over its pipe and waits; the parent runs the real (async) tool on the caller's event loop
and sends the result back. The pipes are read by the caller's event loop itself (never a
blocking thread), so neither a busy pool nor a second event loop can make a request wait
for I/O it did not ask for — and time is measured where it passes.

Time and work per request:

- ``Limits.kill_after_seconds``: time the *program* runs in its worker (tool time and
  waiting excluded) — past it the worker is killed;
- ``Limits.max_request_seconds``: the whole request, slow tools and waiting for a worker
  included — past it the worker is killed too;
- ``Limits.max_tool_calls``: counted here as well as in the worker, per request: a tool
  that calls a router again runs its program as part of the caller's request (same
  deadline, same tool-call count, at most ``3`` deep), and never waits for the worker
  its caller holds.

``size`` programs compute at once (pool-wide, across event loops and threads); a program
parked in a tool call gives its turn to another, which runs in another worker (up to
``max_workers`` requests in flight, each with its own process). A worker that dies (a
limit hit hard) or is killed is replaced in the background. Either way the request ends in
an :class:`~agentlab.errors.UnsafeCodeError` naming the limit, and the pool keeps serving.

The static checks (:func:`~agentlab.env.codecheck.check_code`) also run in the parent
first, so disallowed syntax is refused without a round trip.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from agentlab.env import sandbox_wire as wire
from agentlab.env.codecheck import SAFE_BUILTINS, Limits, check_code, is_private_name
from agentlab.env.sandbox import SandboxResult, ToolFn, plain_copy
from agentlab.env.sandbox_process import _START_TIMEOUT, _Dead, _wake, _Worker, _worker_command
from agentlab.errors import ConfigError, ToolError, UnsafeCodeError
from agentlab.store.scratch import ScratchDir

__all__ = ["PoolStats", "SandboxPool", "default_pool"]

_log = logging.getLogger(__name__)
_MAX_NESTING = 3  # a tool calling a router calling a tool calling a router ...
_IDLE_RETIRE = 30.0  # an idle worker beyond ``size`` is stopped after this long


@dataclass
class PoolStats:
    """Counters of one pool (``killed``: timed out; ``died``: crashed or hit a limit)."""

    requests: int = 0
    spawned: int = 0
    killed: int = 0
    died: int = 0
    retired: int = 0

    def to_dict(self) -> dict[str, int]:
        """Plain dict."""
        return asdict(self)


class _Waiter:
    __slots__ = ("fut", "granted", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.fut: asyncio.Future[None] = loop.create_future()
        self.granted = False


class _Gate:
    """A FIFO counting semaphore shared by every event loop and thread using the pool
    (an ``asyncio.Semaphore`` per loop let two loops run twice the pool's size)."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()

    async def acquire(self, timeout: float) -> bool:
        """Take a slot; ``False`` if none came within ``timeout`` seconds."""
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return True
            w = _Waiter(asyncio.get_running_loop())
            self._waiters.append(w)
        try:
            await asyncio.wait_for(asyncio.shield(w.fut), max(timeout, 0.0))
            return True
        except BaseException as exc:
            with self._lock:
                granted = w.granted
                if not granted:
                    self._waiters.remove(w)
            if granted:  # handed over just as we gave up: pass it on
                self.release()
            if isinstance(exc, TimeoutError):
                return False
            raise

    def release(self) -> None:
        with self._lock:
            while self._waiters:
                w = self._waiters.popleft()
                try:
                    w.loop.call_soon_threadsafe(_wake, w.fut)
                except RuntimeError:  # that loop is closed: its waiter is gone
                    continue
                w.granted = True
                return
            self._free += 1


@dataclass
class _Ticket:
    """One top-level request: its deadline and tool-call count, shared with the programs
    its tools run through a router (nested requests)."""

    deadline: float
    max_tool_calls: int
    depth: int = 0
    calls: int = 0
    root: _Ticket | None = None

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def count_call(self) -> bool:
        """Count one tool call (or nested program) against the top-level request."""
        top = self.root or self
        top.calls += 1
        return top.calls <= top.max_tool_calls

    def nested(self, seconds: float) -> _Ticket:
        top = self.root or self
        deadline = min(self.deadline, time.monotonic() + seconds)
        return _Ticket(deadline, top.max_tool_calls, self.depth + 1, root=top)


_TICKET: contextvars.ContextVar[_Ticket | None] = contextvars.ContextVar(
    "agentlab_sandbox_request", default=None
)


class SandboxPool:
    """A small reused pool of sandbox worker processes.

    Args:
        size: programs computing at once, pool-wide (more wait their turn; a program
            waiting on a tool does not hold one), and workers kept warm; default
            ``AGENTLAB_SANDBOX_WORKERS`` or 2.
        max_workers: requests in flight at once, each holding its own worker process
            (default ``4 * size``); more wait, within their deadline.
    """

    def __init__(self, size: int | None = None, *, max_workers: int | None = None) -> None:
        size = size or int(os.environ.get("AGENTLAB_SANDBOX_WORKERS", 2))
        if size < 1:
            raise ConfigError(f"SandboxPool size must be >= 1, got {size}")
        if max_workers is not None and max_workers < size:
            raise ConfigError(
                f"SandboxPool max_workers must be >= size ({size}), got {max_workers}"
            )
        self.size = size
        self.max_workers = max_workers or 4 * size
        self.stats = PoolStats()
        self._idle: list[_Worker] = []
        self._starting = 0
        self._lock = threading.Lock()
        # Workers are started only by these long-lived threads: a worker's PR_SET_PDEATHSIG
        # fires when the *thread* that started it exits.
        self._threads = ThreadPoolExecutor(max_workers=size, thread_name_prefix="sandbox")
        self._turns = _Gate(size)
        self._admit = _Gate(self.max_workers)
        # the workers' directory: a scratch dir, which a killed host leaves to the next sweep
        self._scratch = ScratchDir("agentlab-sandbox")
        self._home = str(self._scratch.path)
        self._closed = False

    # --- workers -------------------------------------------------------------------------

    def _spawn(self, memory_mb: int) -> _Worker:
        """Start a worker and wait for it (blocking; in a pool thread)."""
        self.stats.spawned += 1
        w = _Worker(memory_mb, self._home)
        try:
            w.wait_ready(_START_TIMEOUT)
        except (_Dead, OSError, ValueError):
            w.kill()
            status = w.proc.poll()
            # the host's log gets the details; the agent's error does not (host paths)
            _log.warning(
                "sandbox worker did not start (exit status %s): %s; command: %s",
                status, w.start_error or "no message", " ".join(_worker_command(memory_mb)),
            )  # fmt: skip
            raise ToolError(
                f"a sandbox worker could not start (exit status {status}); the host's log "
                "(logger agentlab.env.sandbox_pool) says why"
            ) from None
        return w

    def _pop_idle(self, memory_mb: int) -> _Worker | None:
        dead = []
        found = None
        with self._lock:
            for w in reversed(self._idle):
                if not w.alive():
                    dead.append(w)
                elif w.memory_mb == memory_mb:  # others stay for requests of their limit
                    found = w
                    break
            for w in [*dead, *([found] if found else [])]:
                self._idle.remove(w)
        for w in dead:
            w.kill()
        return found

    async def _take(self, memory_mb: int, ticket: _Ticket) -> _Worker:
        found = self._pop_idle(memory_mb)
        if found is not None:
            return found
        started: Future[_Worker] = self._threads.submit(self._spawn, memory_mb)
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(started)),
                                          max(ticket.left(), 0.0))  # fmt: skip
        except BaseException:
            started.add_done_callback(self._adopt)  # when up, it serves the next request
            raise

    def _adopt(self, started: Future[_Worker]) -> None:
        if not started.cancelled() and started.exception() is None:
            self._give_back(started.result())

    def _give_back(self, w: _Worker) -> None:
        now = time.monotonic()
        w.idle_since = now
        stale: list[_Worker] = []
        with self._lock:
            if self._closed or not w.alive() or len(self._idle) >= self.max_workers:
                stale.append(w)
            else:
                self._idle.append(w)
            # workers started for a burst retire once it is over
            while len(self._idle) > self.size and now - self._idle[0].idle_since > _IDLE_RETIRE:
                stale.append(self._idle.pop(0))
        for s in stale:
            s.kill()

    def _lose(self, w: _Worker) -> None:
        """Kill ``w`` and start a replacement in the background, so the next request does
        not pay for a start-up."""
        w.kill()
        with self._lock:
            if self._closed or self._starting + len(self._idle) >= self.size:
                return
            self._starting += 1
        try:
            started = self._threads.submit(self._spawn, w.memory_mb)
        except RuntimeError:  # the pool closed meanwhile
            return

        def done(f: Future[_Worker]) -> None:
            with self._lock:
                self._starting -= 1
            self._adopt(f)

        started.add_done_callback(done)

    def warm(self, memory_mb: int = Limits.max_memory_mb) -> None:
        """Start idle workers now (up to ``size``), so the first requests do not pay for
        start-up."""
        with self._lock:
            have = sum(1 for w in self._idle if w.memory_mb == memory_mb and w.alive())
        starting = [self._threads.submit(self._spawn, memory_mb) for _ in range(self.size - have)]
        for f in starting:
            self._give_back(f.result())

    def close(self) -> None:
        """Kill every idle worker and its process group (busy ones are killed when their
        request ends) and remove the workers' directory."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for w in idle:
            w.kill()
        self._threads.shutdown(wait=False)
        self._scratch.close()

    # --- running -------------------------------------------------------------------------

    async def run(
        self, code: str, tools: Mapping[str, ToolFn], limits: Limits | None = None
    ) -> SandboxResult:
        """Run ``code`` in a worker; ``tools`` run here, in the caller's event loop.

        Called from a tool of a program this pool is running (a tool that routes through a
        ``CodeGenRouter``), the program runs as part of that request: its deadline, its
        tool-call count, no wait for a free slot.

        Raises:
            UnsafeCodeError: refused statically or at run time, killed on timeout or at the
                request's deadline, too many tool calls, or the worker died (a limit).
            ToolError: the program failed, a tool raised (the tool's own exception), or no
                worker could be had within the deadline.
        """
        limits = limits or Limits()
        bad = [n for n in tools if is_private_name(n) or n in SAFE_BUILTINS]
        if bad:
            raise ToolError(f"tool names {bad} clash with builtins or start with '_'")
        check_code(code, frozenset(tools) | SAFE_BUILTINS, limits)
        outer = _TICKET.get()
        if outer is not None:
            if outer.depth + 1 >= _MAX_NESTING:
                raise ToolError(f"generated code nested more than {_MAX_NESTING} deep")
            if not outer.count_call():
                raise UnsafeCodeError(_too_many_calls(outer))
            self.stats.requests += 1
            return await self._run(code, tools, limits, outer.nested(limits.max_request_seconds))
        ticket = _Ticket(time.monotonic() + limits.max_request_seconds, limits.max_tool_calls)
        if not await self._admit.acquire(ticket.left()):
            raise ToolError(_busy(limits))
        try:
            self.stats.requests += 1
            return await self._run(code, tools, limits, ticket)
        finally:
            self._admit.release()

    async def _run(
        self, code: str, tools: Mapping[str, ToolFn], limits: Limits, ticket: _Ticket
    ) -> SandboxResult:
        if not await self._turns.acquire(ticket.left()):
            raise ToolError(_busy(limits))
        turn = True
        w: _Worker | None = None
        tool_exc: BaseException | None = None
        try:
            try:
                w = await self._take(limits.max_memory_mb, ticket)
            except TimeoutError:
                raise ToolError(_busy(limits)) from None
            request = {"op": "run", "code": code, "tools": sorted(tools),
                       "limits": asdict(limits)}  # fmt: skip
            program_time = limits.kill_after_seconds
            sent = await w.send(request, min(program_time, ticket.left()))
            while True:
                t0 = time.monotonic()
                msg = await w.receive(min(program_time, ticket.left())) if sent else None
                program_time -= _charged(time.monotonic() - t0, msg)
                if msg is None:
                    self.stats.killed += 1
                    self._lose(w)
                    w = None
                    raise UnsafeCodeError(_overtime(limits, program_time))
                if msg.get("op") == "tool":
                    self._turns.release()  # parked: another program may compute meanwhile
                    turn = False
                    reply, exc = await self._tool(tools, msg, ticket)
                    if reply is None:  # the deadline passed in the tool: the worker waits
                        self.stats.killed += 1
                        self._lose(w)
                        w = None
                        raise UnsafeCodeError(_overtime(limits, program_time))
                    tool_exc = exc or tool_exc
                    turn = await self._turns.acquire(ticket.left())
                    t0 = time.monotonic()
                    sent = turn and await w.send(reply, min(program_time, ticket.left()))
                    program_time -= time.monotonic() - t0
                    continue
                if msg.get("op") != "done":
                    raise _Dead
                outcome = _outcome(msg, tool_exc)
                if msg.get("retire"):
                    self.stats.retired += 1
                    self._lose(w)
                else:
                    self._give_back(w)  # only now: the worker is someone else's from here
                w = None
                if isinstance(outcome, BaseException):
                    raise outcome
                return outcome
        except _Dead:
            assert w is not None
            for _ in range(20):  # its pipe closed: the exit status follows within moments
                if w.proc.poll() is not None:
                    break
                await asyncio.sleep(0.025)
            status = w.proc.poll()
            self.stats.died += 1
            self._lose(w)
            raise UnsafeCodeError(_death(status, limits)) from None
        except BaseException:
            if w is not None:  # cancelled or failed mid-request: the worker's state is unknown
                self._lose(w)
            raise
        finally:
            if turn:
                self._turns.release()

    async def _tool(
        self, tools: Mapping[str, ToolFn], msg: dict[str, Any], ticket: _Ticket
    ) -> tuple[dict[str, Any] | None, BaseException | None]:
        """The reply to a tool call, or ``None`` if the request's deadline passed in it."""
        if not ticket.count_call():
            return {"op": "result", "ok": False, "error_type": "UnsafeCodeError",
                    "error": _too_many_calls(ticket)}, None  # fmt: skip
        token = _TICKET.set(ticket)  # a router called by the tool joins this request
        try:  # (_call_tool turns the tool's own exceptions into replies)
            return await asyncio.wait_for(_call_tool(tools, msg), max(ticket.left(), 0.0))
        except TimeoutError:
            return None, None
        finally:
            _TICKET.reset(token)


def _charged(elapsed: float, msg: dict[str, Any] | None) -> float:
    """Program time to charge for one wait: what passed here, but no more than the worker
    says it spent (plus slack) — an event loop blocked by other code (an inline program, a
    slow callback) must not be billed to this program. A lying worker gains nothing: the
    request deadline is wall-clock time."""
    busy = None if msg is None else msg.get("busy")
    if isinstance(busy, (int, float)) and busy >= 0:
        return min(elapsed, float(busy) + 0.25)
    return elapsed


def _busy(limits: Limits) -> str:
    return (
        f"no sandbox worker became free within the request's deadline of "
        f"{limits.max_request_seconds} s (the pool is busy)"
    )


def _too_many_calls(ticket: _Ticket) -> str:
    top = ticket.root or ticket
    return (
        f"more than {top.max_tool_calls} tool calls in one request "
        "(programs run by its tools included)"
    )


def _overtime(limits: Limits, program_time_left: float) -> str:
    if program_time_left <= 0:
        return (
            f"program ran longer than {limits.kill_after_seconds} s; its worker process was killed"
        )
    return (
        f"request ran longer than its deadline of {limits.max_request_seconds} s (tool "
        "calls included); its worker process was killed"
    )


def _death(status: int | None, limits: Limits) -> str:
    """What an exit status says (a worker that merely crashed is not blamed on memory)."""
    if status is not None and status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        if -status in (signal.SIGKILL, signal.SIGXCPU):
            return (
                f"the sandbox worker was killed ({name}): the program hit the CPU limit or "
                f"the memory limit of {limits.max_memory_mb} MiB"
            )
        return f"the sandbox worker died of {name} (memory limit {limits.max_memory_mb} MiB)"
    return f"the sandbox worker exited unexpectedly (exit status {status})"


async def _call_tool(
    tools: Mapping[str, ToolFn], msg: dict[str, Any]
) -> tuple[dict[str, Any], BaseException | None]:
    name = str(msg.get("name"))
    fn = tools.get(name)
    if fn is None:
        return {"op": "result", "ok": False, "error": f"unknown tool {name!r}"}, None
    try:
        args = wire.decode(msg.get("args") or [])
        kwargs = wire.decode(msg.get("kwargs") or {})
        value = plain_copy(await fn(list(args), dict(kwargs)), name)  # as in-process runs
        return {"op": "result", "ok": True, "value": wire.encode(value)}, None
    except Exception as exc:
        text = f"{type(exc).__name__}: {str(exc)[:1000]}"  # tools are trusted code
        return {"op": "result", "ok": False, "error": text}, exc


def _outcome(msg: dict[str, Any], tool_exc: BaseException | None) -> SandboxResult | Exception:
    """The program's result, or the exception to raise for it (decided before the worker
    goes back to the pool, so a failed program never costs its worker)."""
    if msg.get("ok"):
        try:
            value = wire.decode(msg.get("value"))
        except ValueError as exc:
            return UnsafeCodeError(f"the program's value was refused: {exc}")
        return SandboxResult(
            value,
            [str(p) for p in msg.get("printed") or []],
            int(msg.get("steps") or 0),
            int(msg.get("tool_calls") or 0),
        )
    if msg.get("from_tool") and isinstance(tool_exc, Exception):
        return tool_exc  # the tool's own exception, as in-process runs raise it
    text = str(msg.get("error") or "program failed")
    if msg.get("error_type") == "UnsafeCodeError":
        return UnsafeCodeError(text)
    return ToolError(text)


_DEFAULT: list[SandboxPool] = []


def default_pool() -> SandboxPool:
    """The process-wide pool routers use unless given one (a forked child builds its own:
    the parent's workers, pipes and threads are not the child's)."""
    if not _DEFAULT:
        _DEFAULT.append(SandboxPool())
        atexit.register(_DEFAULT[0].close)
    return _DEFAULT[0]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_DEFAULT.clear)
