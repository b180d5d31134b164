"""Scratch directories that do not outlive their process, however it ends.

A process ended by SIGKILL runs no cleanup: a Ray actor ended by ``ray.kill`` (what
``ray.shutdown`` and a Jupyter kernel restart do to a society's env actor), a kernel
killed by the OOM killer, a fault test's child. A plain ``tempfile.mkdtemp`` left its
directory in the temp dir for good (a fresh-clone ``make test`` left ~30 there).

A scratch directory holds an exclusive ``flock`` on its own inode for as long as it is in
use, and the kernel drops that lock when the process dies. The first scratch directory a
process makes under a name removes that name's directories whose lock nobody holds: what a
killed process left. The directory is made under a hidden name, locked, then renamed into
place, so a sweep never sees one that is not locked yet. Where the file system cannot
``flock`` a directory it keeps the hidden name, which no sweep touches (removed at
:meth:`ScratchDir.close` or exit, as before).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import weakref
from pathlib import Path

__all__ = ["ScratchDir", "sweep_abandoned"]

_SWEPT: set[str] = set()  # names this process has swept (once each: a listing of the temp dir)


def _release(path: str, fd: int) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if fd >= 0:
        os.close(fd)


class ScratchDir:
    """A temporary directory named ``<name>.<random>`` in the temp dir, removed by
    :meth:`close`, when garbage-collected, at exit, or by another process's sweep after
    this one died.

    Args:
        name: what the directory is for, e.g. ``"agentlab-env"`` (no dot in it).
        root: where (default: ``tempfile.gettempdir()``).
    """

    def __init__(self, name: str, root: str | os.PathLike[str] | None = None) -> None:
        if not name or "." in name or os.sep in name:
            raise ValueError(f"scratch name {name!r}: a non-empty name with no '.' or '/'")
        base = Path(root) if root is not None else Path(tempfile.gettempdir())
        if name not in _SWEPT:
            _SWEPT.add(name)
            sweep_abandoned(name, base)
        hidden = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=base))
        fd = -1
        try:
            fd = os.open(hidden, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # no directory locks here: stay hidden, out of every sweep's reach
            path = hidden
        else:
            path = hidden.with_name(hidden.name[1:])
            os.rename(hidden, path)  # the same inode: the lock moves with it
        #: the directory
        self.path = path
        self._finalizer = weakref.finalize(self, _release, str(path), fd)

    def close(self) -> None:
        """Remove the directory (idempotent)."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"ScratchDir({str(self.path)!r})"


def sweep_abandoned(name: str, root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the ``name`` scratch directories under ``root`` (default: the temp dir)
    that no live process holds; returns them. One still held, or not ours to open, stays."""
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    gone: list[Path] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return gone
    prefix = f"{name}."
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            fd = os.open(entry.path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: in use
            os.close(fd)
            continue
        try:  # ours now: its owner is gone
            shutil.rmtree(entry.path, ignore_errors=True)
            gone.append(Path(entry.path))
        finally:
            os.close(fd)
    return gone
