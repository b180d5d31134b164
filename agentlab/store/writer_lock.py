"""One writer per run directory: an ``fcntl.flock`` on the run directory and on
``<run>/WRITER.lock``.

``Society.create`` and ``Society.open`` take the lock before they touch anything (open
truncates the log back to the commit, which is only safe with no other writer). A second
writer — another process, another host on a shared file system that honours ``flock`` —
gets :class:`~agentlab.errors.RunLockedError` naming the holder (pid, host, since), which
the holder writes into the lock file. The kernel drops the lock when the holder exits,
even on kill -9, so a crashed run never needs a manual unlock. Readers (``open_run``,
widgets, ``agentlab view``) never take it and never block.

Within one process a later ``Society.open`` of the same run takes the lock over (the
notebook case: re-running a cell) unless the earlier object is running; the earlier
object is then *superseded* and its next write raises instead of writing. A forked child does not inherit the lock: it must take
its own, and so conflicts with its parent.

The lock is held on the run directory's own inode first, then on the lock file: a lock on
the file alone lived in the file's inode, so deleting ``WRITER.lock`` (a cleanup script,
a user tidying a run) let a second writer create a fresh file and lock that. The
directory cannot be replaced while it holds the run. The file stays for the holder's name
and for readers that probe it (``store/lifecycle.py``). A file system that cannot
``flock`` a directory keeps the file lock only.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from agentlab.errors import RunLockedError

__all__ = ["LOCK_NAME", "WriterLock", "lock_holder"]

LOCK_NAME = "WRITER.lock"


class _Held:
    __slots__ = ("dir_fd", "fd", "owner")

    def __init__(self, fd: int, owner: WriterLock, dir_fd: int = -1) -> None:
        self.fd = fd
        self.owner = owner
        self.dir_fd = dir_fd  # the run directory's lock (-1 where it cannot be flocked)


_HELD: dict[str, _Held] = {}  # realpath of the run -> this process's lock on it


def lock_holder(run_dir: str | os.PathLike[str]) -> dict[str, object] | None:
    """What the holder wrote into the lock file (pid, host, since, argv), if anything."""
    try:
        raw = (Path(run_dir) / LOCK_NAME).read_bytes()
        doc = json.loads(raw) if raw.strip() else None
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def held_here(run_dir: str | os.PathLike[str]) -> bool:
    """Whether this process holds ``run_dir``'s writer lock (a driver's ``writing_run``)."""
    return os.path.realpath(run_dir) in _HELD


class WriterLock:
    """The write lock of one run directory, held by one ``Society`` object.

    Raises (from :meth:`acquire`):
        RunLockedError: another process holds it.
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.key = os.path.realpath(self.run_dir)
        #: set by the holder: whether it is in the middle of writing (no takeover then)
        self.busy: Callable[[], bool] | None = None
        #: what holds it, for the refusal message
        self.what = "Society object"

    def acquire(self) -> WriterLock:
        """Take the lock (or take it over from an earlier holder in this process)."""
        held = _HELD.get(self.key)
        if held is not None:
            if held.owner.busy is not None and held.owner.busy():
                raise RunLockedError(
                    f"{self.run_dir} is being written by a running {held.owner.what} in this "
                    f"process (pid {os.getpid()}); stop() it (or wait for it to return) before "
                    "opening it again. The run goes on: a new cell holding its live view's "
                    "name (e.g. `dash`) shows the view and its buttons again"
                )
            held.owner = self  # same process: the newest Society object writes
            return self
        self.run_dir.mkdir(parents=True, exist_ok=True)
        dir_fd = _lock_dir(self.run_dir)
        try:
            fd = os.open(self.run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except BaseException:
            _close(dir_fd)
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            _close(dir_fd)
            raise RunLockedError(_busy_message(self.run_dir)) from None
        except BaseException:
            os.close(fd)
            _close(dir_fd)
            raise
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "argv": " ".join(sys.argv)[:300],
        }
        data = json.dumps(info).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        _HELD[self.key] = _Held(fd, self, dir_fd)
        return self

    @property
    def held(self) -> bool:
        """Whether this object (still) holds the lock."""
        h = _HELD.get(self.key)
        return h is not None and h.owner is self

    def check(self) -> None:
        """Raise if another object of this process took the lock over from this one."""
        h = _HELD.get(self.key)
        if h is not None and h.owner is not self:
            raise RunLockedError(
                f"this Society object no longer writes {self.run_dir}: a later "
                "Society.open/create of the same run in this process took over; use that "
                "object"
            )

    def release(self) -> None:
        """Drop the lock if this object holds it (idempotent)."""
        h = _HELD.get(self.key)
        if h is None or h.owner is not self:
            return
        del _HELD[self.key]
        try:
            os.ftruncate(h.fd, 0)
            fcntl.flock(h.fd, fcntl.LOCK_UN)
        finally:
            os.close(h.fd)
            _close(h.dir_fd)


def _lock_dir(run_dir: Path) -> int:
    """Take the flock of the run directory itself; its fd, or -1 where flock of a
    directory is not supported (the file lock then stands alone)."""
    try:
        dfd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return -1
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(dfd)
        raise RunLockedError(_busy_message(run_dir)) from None
    except OSError:  # e.g. a network file system that locks only files opened for writing
        os.close(dfd)
        return -1
    return dfd


def _close(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def _busy_message(run_dir: Path) -> str:
    h = lock_holder(run_dir)
    who = (
        f"pid {h.get('pid')} on host {h.get('host')!s} since {h.get('since')} "
        f"({h.get('argv') or 'unknown command'})"
        if h
        else "another process (it has not written its name yet)"
        if (run_dir / LOCK_NAME).exists()
        else f"another process (its name was in {LOCK_NAME}, which was deleted)"
    )
    return (
        f"{run_dir} is already open for writing by {who}. A run has one writer at a time: "
        f"stop that process (or close its Society), or read the run with "
        f"agentlab.open_run({str(run_dir)!r}), which never needs the lock"
    )


def _after_fork_in_child() -> None:
    # The child shares the parent's open file description (and so its flock); closing
    # our copy leaves the parent's lock intact and makes the child take its own.
    for h in _HELD.values():
        for fd in (h.fd, h.dir_fd):
            try:
                if fd >= 0:
                    os.close(fd)
            except OSError:
                pass
    _HELD.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
