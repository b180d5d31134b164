"""Entry point of a sandbox worker: ``python -m agentlab.env.sandbox_worker MB CPU PARENT``.

It caps its own address space (``RLIMIT_AS`` = ``MB`` MiB) and CPU time (``RLIMIT_CPU`` =
``CPU`` s), then serves programs from stdin with the in-process
:class:`~agentlab.env.sandbox.Sandbox`; each tool the program calls is a request to the
parent, which runs the env's real tool and sends the result back (see
:mod:`agentlab.env.sandbox_wire`). A program that hangs or allocates without bound is the
parent's to kill; nothing here is trusted to stop it.
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


class _RemoteToolError(ToolError):
    """A tool failed in the parent; the parent re-raises its own exception object."""


class _Worker:
    def __init__(self, rx: BinaryIO, tx: BinaryIO, cpu_limit: float) -> None:
        self.rx, self.tx, self.cpu_limit = rx, tx, cpu_limit

    def send(self, msg: dict[str, Any]) -> None:
        self.tx.write(wire.dumps(msg))
        self.tx.flush()

    def receive(self) -> dict[str, Any] | None:
        line = self.rx.readline()
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
                raise _RemoteToolError(str(reply.get("error", "tool failed"))[:2000])
            return wire.decode(reply.get("value"))

        return call

    def run(self, msg: dict[str, Any], loop: asyncio.AbstractEventLoop) -> bool:
        """Serve one program; returns whether to retire afterwards."""
        limits = Limits(**msg.get("limits", {}))
        box = Sandbox({n: self.tool(n, limits) for n in msg.get("tools", [])}, limits)
        retire = False
        try:
            out = loop.run_until_complete(box.run(str(msg.get("code", ""))))
            try:
                logical_size(out.value, limits.max_alloc)
                value = wire.encode(out.value)
            except (TooLarge, RecursionError):
                raise UnsafeCodeError(
                    f"the program's value is too large to return (logical size above "
                    f"{limits.max_alloc})"
                ) from None
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
        except MemoryError:
            self.send({"op": "done", "ok": False, "error_type": "UnsafeCodeError",
                       "error": "result too large", "retire": True})  # fmt: skip
            retire = True
        return retire


def _die_with_parent(parent: int) -> None:
    # A parent killed with SIGKILL cannot kill a worker spinning in C; the kernel can
    # (Linux PR_SET_PDEATHSIG). Elsewhere the stdin EOF and RLIMIT_CPU remain. The signal
    # comes when the parent *thread* that started us exits, so the pool starts workers
    # only from threads that live as long as it does (sandbox_pool._replace).
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if parent and os.getppid() != parent:
        os._exit(0)  # the parent died before the request took effect


def main(argv: list[str]) -> int:
    """Serve programs until stdin closes or the worker retires."""
    mem_mb = int(argv[0]) if argv else 512
    cpu_s = int(argv[1]) if len(argv) > 1 else 120
    _die_with_parent(int(argv[2]) if len(argv) > 2 else 0)
    try:  # a spinning program yields the CPU to the env host and the agents
        os.nice(10)
    except OSError:
        pass
    rx, tx = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must never corrupt the protocol
    resource.setrlimit(resource.RLIMIT_AS, (mem_mb * 2**20, mem_mb * 2**20))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
    worker = _Worker(rx, tx, float(cpu_s))
    loop = asyncio.new_event_loop()
    worker.send({"op": "ready", "pid": os.getpid()})
    while True:
        msg = worker.receive()
        if msg is None:
            return 0
        if msg.get("op") == "run" and worker.run(msg, loop):
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
