"""Generated code in worker processes: a hang or a memory bomb costs one request.

:class:`SandboxPool` keeps a few ``python -m agentlab.env.sandbox_worker`` processes
(``RLIMIT_AS``/``RLIMIT_CPU`` set inside each) and runs each program in one of them with
the interpreter of :mod:`agentlab.env.sandbox`. The env's tools stay in the parent: when a
program calls one, the worker sends the call over its pipe and waits; the parent runs the
real (async) tool on its own event loop and sends the result back. The parent's side of a
request waits on the pipe in a thread, so the event loop every agent shares is never
blocked, whatever the program does.

A program that runs longer than ``Limits.kill_after_seconds`` (time spent in tools not
counted) has its worker killed and replaced; a worker that dies (``RLIMIT_AS`` hit hard,
``RLIMIT_CPU``) is replaced too. Either way the request ends in an
:class:`~agentlab.errors.UnsafeCodeError` naming the limit, and the pool keeps serving.

The static checks (:func:`~agentlab.env.codecheck.check_code`) also run in the parent
first, so disallowed syntax is refused without a round trip.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from agentlab.env import sandbox_wire as wire
from agentlab.env.codecheck import SAFE_BUILTINS, Limits, check_code, is_private_name
from agentlab.env.sandbox import SandboxResult, ToolFn, plain_copy
from agentlab.errors import ConfigError, ToolError, UnsafeCodeError

__all__ = ["PoolStats", "SandboxPool", "default_pool"]

_T = TypeVar("_T")
_CPU_SECONDS = 120  # RLIMIT_CPU of a worker; it retires at half of it
_START_TIMEOUT = 60.0  # a worker's imports on a loaded machine
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


class _Dead(Exception):
    pass


class _Worker:
    """One worker process and its pipe ends (blocking I/O, used from one thread at a time)."""

    def __init__(self, memory_mb: int) -> None:
        self.memory_mb = memory_mb
        # The worker imports agentlab from where this process did (a source checkout
        # need not be installed, and the kernel's cwd may be anywhere).
        path = [_PACKAGE_ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentlab.env.sandbox_worker", str(memory_mb),
             str(_CPU_SECONDS), str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True, start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        )  # fmt: skip
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.tx = self.proc.stdin
        self.fd = self.proc.stdout.fileno()
        self.buf = b""
        self.ready = False
        self.busy: Future[Any] | None = None

    def send(self, msg: dict[str, Any]) -> None:
        try:
            self.tx.write(wire.dumps(msg))
            self.tx.flush()
        except (BrokenPipeError, OSError):
            raise _Dead from None

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """The next message, or ``None`` if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise _Dead
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        try:
            return wire.loads(line)
        except ValueError:
            raise _Dead from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass

    def alive(self) -> bool:
        return self.proc.poll() is None

    async def io(self, threads: ThreadPoolExecutor, fn: Callable[..., _T], *args: Any) -> _T:
        """Run blocking pipe I/O in ``threads``; the event loop only awaits it."""
        self.busy = threads.submit(fn, *args)
        return await asyncio.wrap_future(self.busy)

    def abandon(self) -> None:
        """Kill now; close the pipes once no thread uses them (a closed fd number could be
        reused by another file while a thread still selects on it)."""
        if self.proc.poll() is None:
            self.proc.kill()
        busy = self.busy
        if busy is not None and not busy.done():
            busy.add_done_callback(lambda _: self.kill())
        else:
            self.kill()


class SandboxPool:
    """A small reused pool of sandbox worker processes.

    Args:
        size: programs run at once (more wait for a free worker); default
            ``AGENTLAB_SANDBOX_WORKERS`` or 2.
    """

    def __init__(self, size: int | None = None) -> None:
        size = size or int(os.environ.get("AGENTLAB_SANDBOX_WORKERS", 2))
        if size < 1:
            raise ConfigError(f"SandboxPool size must be >= 1, got {size}")
        self.size = size
        self.stats = PoolStats()
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(max_workers=size, thread_name_prefix="sandbox")
        # one gate per event loop (asyncio primitives are bound to the loop that uses them)
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._closed = False

    # --- workers -------------------------------------------------------------------------

    def _take(self, memory_mb: int) -> _Worker:
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
        if found is not None:
            return found
        self.stats.spawned += 1
        return _Worker(memory_mb)

    def _give_back(self, w: _Worker) -> None:
        with self._lock:
            if self._closed or len(self._idle) >= self.size:
                w.kill()
            else:
                self._idle.append(w)

    def warm(self, memory_mb: int = Limits.max_memory_mb) -> None:
        """Start idle workers now, so the first requests do not pay for start-up."""
        # started by the pool's own threads, not the caller's (see _replace: a worker dies
        # with the thread that started it, and the caller may be a short-lived thread)
        starting = [self._threads.submit(self._take, memory_mb) for _ in range(self.size)]
        fresh = [f.result() for f in starting]
        for w in fresh:
            self._wait_ready(w)
            self._give_back(w)

    def _wait_ready(self, w: _Worker) -> None:
        if w.ready:
            return
        msg = w.receive(_START_TIMEOUT)
        if msg is None or msg.get("op") != "ready":
            w.kill()
            raise _Dead
        w.ready = True

    def _replace(self, memory_mb: int) -> None:
        """Start a fresh worker in the background for the one just lost, so the next
        request does not pay for a start-up.

        The process is started by one of the pool's own threads, which live as long as
        the pool: a worker's ``PR_SET_PDEATHSIG`` fires when the *thread* that started it
        exits, so a worker started by a short-lived thread was SIGKILLed as that thread
        ended — possibly after a request had taken it. Only its start-up wait runs in a
        plain thread (the I/O threads stay free for requests meanwhile)."""
        if self._closed:
            return
        try:
            started = self._threads.submit(_Worker, memory_mb)
        except RuntimeError:  # the pool closed meanwhile
            return
        self.stats.spawned += 1

        def ready() -> None:
            try:
                w = started.result()
            except Exception:  # could not start (OSError...): the next request spawns one
                return
            try:
                self._wait_ready(w)
            except _Dead:
                return
            self._give_back(w)

        threading.Thread(target=ready, name="sandbox-spawn", daemon=True).start()

    def close(self) -> None:
        """Kill every idle worker (busy ones are killed when their request ends)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for w in idle:
            w.kill()
        self._threads.shutdown(wait=False)

    # --- running -------------------------------------------------------------------------

    async def run(
        self, code: str, tools: Mapping[str, ToolFn], limits: Limits | None = None
    ) -> SandboxResult:
        """Run ``code`` in a worker; ``tools`` run here, in the caller's event loop.

        Raises:
            UnsafeCodeError: refused statically or at run time, killed on timeout, or the
                worker died (memory/CPU limit).
            ToolError: the program failed, or a tool raised (the tool's own exception).
        """
        limits = limits or Limits()
        bad = [n for n in tools if is_private_name(n) or n in SAFE_BUILTINS]
        if bad:
            raise ToolError(f"tool names {bad} clash with builtins or start with '_'")
        check_code(code, frozenset(tools) | SAFE_BUILTINS, limits)
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = asyncio.Semaphore(self.size)
        async with gate:
            self.stats.requests += 1
            return await self._run(code, tools, limits)

    async def _run(
        self,
        code: str,
        tools: Mapping[str, ToolFn],
        limits: Limits,
    ) -> SandboxResult:
        w = await asyncio.wrap_future(self._threads.submit(self._take, limits.max_memory_mb))
        tool_exc: BaseException | None = None
        try:
            await w.io(self._threads, self._wait_ready, w)
            request = {"op": "run", "code": code, "tools": sorted(tools),
                       "limits": asdict(limits)}  # fmt: skip
            await w.io(self._threads, w.send, request)
            budget = limits.kill_after_seconds
            while True:
                t0 = time.monotonic()
                msg = await w.io(self._threads, w.receive, budget)
                budget -= time.monotonic() - t0
                if msg is None:
                    self.stats.killed += 1
                    w.kill()
                    self._replace(limits.max_memory_mb)
                    raise UnsafeCodeError(
                        f"program ran longer than {limits.kill_after_seconds} s; "
                        "its worker process was killed"
                    )
                if msg.get("op") == "tool":
                    reply, tool_exc = await _call_tool(tools, msg)
                    await w.io(self._threads, w.send, reply)
                    continue
                if msg.get("op") != "done":
                    raise _Dead
                if msg.get("retire"):
                    self.stats.retired += 1
                    w.kill()
                    self._replace(limits.max_memory_mb)
                else:
                    self._give_back(w)
                return _result(msg, tool_exc)
        except _Dead:
            code_ = w.proc.poll()
            self.stats.died += 1
            w.kill()
            self._replace(limits.max_memory_mb)
            if not w.ready:
                raise ToolError(
                    f"a sandbox worker did not start within {_START_TIMEOUT} s "
                    f"(exit status {code_}); is `{sys.executable} -m agentlab.env."
                    "sandbox_worker` runnable here?"
                ) from None
            raise UnsafeCodeError(
                f"the sandbox worker died (exit status {code_}): the program hit the memory "
                f"limit of {limits.max_memory_mb} MiB or the CPU limit"
            ) from None
        except BaseException:
            w.abandon()  # cancelled or failed mid-request: the worker's state is unknown
            raise


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


def _result(msg: dict[str, Any], tool_exc: BaseException | None) -> SandboxResult:
    if msg.get("ok"):
        return SandboxResult(
            wire.decode(msg.get("value")),
            [str(p) for p in msg.get("printed") or []],
            int(msg.get("steps") or 0),
            int(msg.get("tool_calls") or 0),
        )
    if msg.get("from_tool") and tool_exc is not None:
        raise tool_exc  # the tool's own exception, as in-process runs raise it
    text = str(msg.get("error") or "program failed")
    if msg.get("error_type") == "UnsafeCodeError":
        raise UnsafeCodeError(text)
    raise ToolError(text)


_DEFAULT: list[SandboxPool] = []


def default_pool() -> SandboxPool:
    """The process-wide pool routers use unless given one."""
    if not _DEFAULT:
        _DEFAULT.append(SandboxPool())
        atexit.register(_DEFAULT[0].close)
    return _DEFAULT[0]
