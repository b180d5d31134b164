"""One sandbox worker process as the pool sees it: its command line and clean environment,
start-up, and the pipe ends the pool's requests read and write (:class:`_Worker`).

Split out of :mod:`agentlab.env.sandbox_pool`, which decides which request gets which
worker, when one is spawned, replaced or retired.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from agentlab.env import sandbox_wire as wire

__all__: list[str] = []

_CPU_SECONDS = 120  # RLIMIT_CPU of a worker; it retires at half of it
_START_TIMEOUT = 60.0  # a worker's imports on a loaded machine
_MAX_LINE = 16 << 20  # longest message a worker may send (a worker is not trusted)
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class _Dead(Exception):
    pass


def _worker_env(home: str) -> dict[str, str]:
    """A clean environment: no API key or token of the host reaches generated code."""
    # The worker imports agentlab from where this process did (a source checkout need
    # not be installed); nothing else of the host's environment is passed on.
    path = [_PACKAGE_ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {
        "PATH": os.defpath,
        "PYTHONPATH": os.pathsep.join(path),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "LC_ALL": "C.UTF-8",
        "HOME": home,
        "TMPDIR": home,
    }


def _worker_command(memory_mb: int) -> list[str]:
    """The worker's command line (``-s``: no user site-packages)."""
    return [sys.executable, "-s", "-m", "agentlab.env.sandbox_worker", str(memory_mb),
            str(_CPU_SECONDS), str(os.getpid())]  # fmt: skip


class _Worker:
    """One worker process and its pipe ends.

    Started (and waited for) in one of the pool's long-lived threads; afterwards its
    pipes are non-blocking and read by the event loop of the request that holds it.
    """

    def __init__(self, memory_mb: int, home: str) -> None:
        self.memory_mb = memory_mb
        self.proc = subprocess.Popen(
            _worker_command(memory_mb),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True, start_new_session=True, cwd=home, env=_worker_env(home),
        )  # fmt: skip
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wfd = self.proc.stdin.fileno()
        self.rfd = self.proc.stdout.fileno()
        self.buf = bytearray()
        self.ready = False
        self.dead = False
        self.idle_since = 0.0
        self.start_error = ""

    # --- start-up (blocking, in a pool thread) ---------------------------------------------

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.rfd], [], [], left)[0]:
                self.start_error = f"no 'ready' within {timeout} s"
                raise _Dead
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                raise _Dead
            self.buf += chunk
        line, _, rest = bytes(self.buf).partition(b"\n")
        self.buf = bytearray(rest)
        msg = wire.loads(line)
        if msg.get("op") != "ready":
            self.start_error = str(msg.get("error") or msg)[:500]
            raise _Dead
        os.set_blocking(self.rfd, False)
        os.set_blocking(self.wfd, False)
        self.ready = True

    # --- I/O on the caller's event loop ------------------------------------------------

    async def _fd_ready(self, writing: bool, deadline: float) -> bool:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if writing:
            loop.add_writer(self.wfd, _wake, fut)
        else:
            loop.add_reader(self.rfd, _wake, fut)
        try:
            await asyncio.wait_for(fut, left)
            return True
        except TimeoutError:
            return False
        finally:
            if writing:
                loop.remove_writer(self.wfd)
            else:
                loop.remove_reader(self.rfd)

    async def send(self, msg: dict[str, Any], timeout: float) -> bool:
        """Write one message; ``False`` if the worker did not take it within ``timeout``."""
        data = memoryview(wire.dumps(msg))
        deadline = time.monotonic() + timeout
        while data:
            try:
                data = data[os.write(self.wfd, data) :]
            except BlockingIOError:
                if not await self._fd_ready(True, deadline):
                    return False
            except OSError:  # BrokenPipeError: it died
                raise _Dead from None
        return True

    async def receive(self, timeout: float) -> dict[str, Any] | None:
        """The next message, or ``None`` if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        while True:
            end = self.buf.find(b"\n")
            if end >= 0:
                line = bytes(self.buf[:end])
                del self.buf[: end + 1]
                try:
                    return wire.loads(line)
                except ValueError:
                    raise _Dead from None
            if len(self.buf) > _MAX_LINE:
                raise _Dead
            try:
                chunk = os.read(self.rfd, 1 << 16)
            except BlockingIOError:
                if await self._fd_ready(False, deadline):
                    continue
                # The timer and the message may fall due together (another request's
                # inline code blocked the loop): look once more before blaming the program.
                try:
                    chunk = os.read(self.rfd, 1 << 16)
                except BlockingIOError:
                    return None
                except OSError:
                    raise _Dead from None
                if not chunk:
                    raise _Dead from None
                self.buf += chunk
                if b"\n" in chunk:
                    continue  # a message was there
                return None
            except OSError:
                raise _Dead from None
            if not chunk:
                raise _Dead
            self.buf += chunk

    # --- end -----------------------------------------------------------------------------

    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker's whole process group (anything it forked dies with it),
        close the pipes; the exit status is collected in the background."""
        if self.dead:
            return
        self.dead = True
        try:  # the worker leads its own session: its pid is the group's id
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            threading.Thread(target=self._reap, name="sandbox-reap", daemon=True).start()

    def _reap(self) -> None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
