"""Entry point of a sandbox worker: ``python -m agentlab.env.sandbox_worker MB CPU PARENT``.

Before it serves anything it makes itself a small boundary (see the env README's sandbox
section): ``PR_SET_NO_NEW_PRIVS``; limits on address space (``MB`` MiB), CPU time (``CPU``
s), processes (0), file size (0), open files and core dumps — each clamped to the limits it
inherited (``ulimit``, SLURM, PBS), which it may not raise; root drops to ``nobody``; it dies
with its parent (``PR_SET_PDEATHSIG``). Its environment and working directory are set by
the pool (a clean environment, a private empty directory). Then it serves programs from
stdin with the in-process :class:`~agentlab.env.sandbox.Sandbox`; each tool the program
calls is a request to the parent, which runs the env's real tool and sends the result back
(see :mod:`agentlab.env.sandbox_wire`). A program that hangs or allocates without bound is
the parent's to kill; nothing here is trusted to stop it.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import time
from typing import Any, BinaryIO

from agentlab.env import sandbox_wire as wire
from agentlab.env.codecheck import Limits
from agentlab.env.render import TooLarge, logical_size
from agentlab.env.sandbox import Sandbox, exception_text
from agentlab.errors import ToolError, UnsafeCodeError

_OPEN_FILES = 16  # stdin/stdout/stderr, the event loop's selector and self-pipe, spare


class _RemoteToolError(ToolError):
    """A tool failed in the parent; the parent re-raises its own exception object."""


class _Worker:
    def __init__(self, rx: BinaryIO, tx: BinaryIO, cpu_limit: float) -> None:
        self.rx, self.tx, self.cpu_limit = rx, tx, cpu_limit
        self.since = time.monotonic()

    def send(self, msg: dict[str, Any]) -> None:
        # how long this answer took here: the parent charges the program no more than
        # that (its event loop may have been busy elsewhere when the answer arrived)
        msg["busy"] = round(time.monotonic() - self.since, 6)
        self.tx.write(wire.dumps(msg))
        self.tx.flush()

    def receive(self) -> dict[str, Any] | None:
        line = self.rx.readline()
        self.since = time.monotonic()
        return wire.loads(line) if line else None

    def tool(self, name: str, limits: Limits) -> Any:
        async def call(args: list[Any], kwargs: dict[str, Any]) -> Any:
            try:  # arguments cross the pipe as JSON: price the walk first
                logical_size([args, kwargs], limits.max_deep)
            except TooLarge:
                raise UnsafeCodeError(f"arguments of {name}() are too large") from None
            self.send({"op": "tool", "name": name, "args": wire.encode(args),
                       "kwargs": wire.encode(kwargs)})  # fmt: skip
            reply = self.receive()
            if reply is None:
                raise SystemExit(0)
            if not reply.get("ok"):
                text = str(reply.get("error", "tool failed"))[:2000]
                if reply.get("error_type") == "UnsafeCodeError":  # the parent's own caps
                    raise UnsafeCodeError(text)
                raise _RemoteToolError(text)
            return wire.decode(reply.get("value"))

        return call

    def run(self, msg: dict[str, Any], loop: asyncio.AbstractEventLoop) -> bool:
        """Serve one program; returns whether to retire afterwards."""
        limits = Limits(**msg.get("limits", {}))
        box = Sandbox({n: self.tool(n, limits) for n in msg.get("tools", [])}, limits)
        retire = False
        try:
            out = loop.run_until_complete(box.run(str(msg.get("code", ""))))
            try:  # Sandbox.run priced the value; the depth of the encoding is bounded too
                value = wire.encode(out.value)
            except RecursionError:
                raise UnsafeCodeError("the program's value is nested too deeply") from None
            reply: dict[str, Any] = {"op": "done", "ok": True, "value": value,
                                     "printed": out.printed, "steps": out.steps,
                                     "tool_calls": out.tool_calls}  # fmt: skip
        except MemoryError:
            retire = True
            reply = {"op": "done", "ok": False, "error_type": "UnsafeCodeError",
                     "error": f"memory limit of {limits.max_memory_mb} MiB exceeded"}  # fmt: skip
        except (ToolError, UnsafeCodeError) as exc:
            # the interpreter turns MemoryError into a refusal; the heap may be fragmented
            # near RLIMIT_AS afterwards, so a fresh worker serves the next program
            retire = isinstance(exc.__context__, MemoryError)
            reply = {"op": "done", "ok": False, "error_type": type(exc).__name__,
                     "error": exception_text(exc, 2000),
                     "from_tool": isinstance(exc, _RemoteToolError)}  # fmt: skip
        except Exception as exc:  # a bug of the interpreter: report it, stay up
            reply = {"op": "done", "ok": False, "error_type": "ToolError",
                     "error": f"sandbox failed: {type(exc).__name__}: {exception_text(exc)}"}  # fmt: skip
        if time.process_time() > self.cpu_limit / 2:
            retire = True  # leave before RLIMIT_CPU kills us mid-request
        reply["retire"] = retire
        try:
            self.send(reply)
        except Exception as exc:  # MemoryError, or a value json cannot write: say so, stay up
            text = (
                "result too large"
                if isinstance(exc, MemoryError)
                else (f"the result could not be sent: {type(exc).__name__}")
            )
            self.send({"op": "done", "ok": False, "error_type": "UnsafeCodeError",
                       "error": text, "retire": True})  # fmt: skip
            retire = True
        return retire


def _prctl(option: int, arg: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, arg, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def _die_with_parent(parent: int) -> None:
    # A parent killed with SIGKILL cannot kill a worker spinning in C; the kernel can
    # (Linux PR_SET_PDEATHSIG). Elsewhere the stdin EOF and RLIMIT_CPU remain. The signal
    # comes when the parent *thread* that started us exits, so the pool starts workers
    # only from threads that live as long as it does; a change of uid clears it, so it is
    # set after dropping root.
    import signal

    if _prctl(1, int(signal.SIGKILL)) and parent and os.getppid() != parent:  # PDEATHSIG
        os._exit(0)  # the parent died before the request took effect


def _clamp(kind: int, soft: int, hard: int) -> int:
    """Set a limit no higher than the one inherited (an unprivileged process may not raise
    its hard limit: ``ulimit -t``/``-v``, a SLURM or PBS job); returns the soft limit."""
    inf = resource.RLIM_INFINITY
    cur_soft, cur_hard = resource.getrlimit(kind)
    if cur_hard != inf:
        hard = min(hard, cur_hard)
    if cur_soft != inf:
        soft = min(soft, cur_soft)
    soft = min(soft, hard)
    resource.setrlimit(kind, (soft, hard))
    return soft


def _drop_root() -> None:
    # Root in a container is common; as ``nobody`` the worker cannot read the user's files
    # or signal other processes, and RLIMIT_NPROC (ignored for root) stops fork().
    if os.geteuid() != 0:
        return
    import pwd

    try:
        entry = pwd.getpwnam("nobody")
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        uid = gid = 65534
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def _confine(mem_mb: int, cpu_s: int) -> dict[str, int]:
    """Limits, no new privileges, no root; returns the limits in force."""
    _prctl(38, 1)  # PR_SET_NO_NEW_PRIVS: no setuid binary can hand privileges back
    mem = _clamp(resource.RLIMIT_AS, mem_mb * 2**20, mem_mb * 2**20)
    cpu = _clamp(resource.RLIMIT_CPU, cpu_s, cpu_s + 5)
    _clamp(resource.RLIMIT_NPROC, 0, 0)  # no fork/clone (not enforced for root)
    _clamp(resource.RLIMIT_FSIZE, 0, 0)  # no file written (pipes are not files)
    _clamp(resource.RLIMIT_NOFILE, _OPEN_FILES, _OPEN_FILES)
    _clamp(resource.RLIMIT_CORE, 0, 0)
    _drop_root()
    return {"memory_bytes": mem, "cpu_seconds": cpu, "uid": os.getuid()}


def main(argv: list[str]) -> int:
    """Serve programs until stdin closes or the worker retires."""
    mem_mb = int(argv[0]) if argv else 512
    cpu_s = int(argv[1]) if len(argv) > 1 else 120
    rx, tx = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must never corrupt the protocol
    loop = asyncio.new_event_loop()  # opens its files before RLIMIT_NOFILE
    try:
        limits = _confine(mem_mb, cpu_s)
        _die_with_parent(int(argv[2]) if len(argv) > 2 else 0)
    except (OSError, ValueError) as exc:  # tell the parent why, for the host's log
        tx.write(wire.dumps({"op": "error", "error": f"{type(exc).__name__}: {exc}"}))
        tx.flush()
        return 1
    try:  # a spinning program yields the CPU to the env host and the agents
        os.nice(10)
    except OSError:
        pass
    worker = _Worker(rx, tx, float(limits["cpu_seconds"]))
    worker.send({"op": "ready", "pid": os.getpid(), **limits})
    while True:
        msg = worker.receive()
        if msg is None:
            return 0
        if msg.get("op") == "run" and worker.run(msg, loop):
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
