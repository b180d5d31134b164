"""Scratch directories that do not outlive their process, however it ends.

A process ended by SIGKILL runs no cleanup: a Ray actor ended by ``ray.kill`` (what
``ray.shutdown`` and a Jupyter kernel restart do to a society's env actor), a kernel
killed by the OOM killer, a fault test's child. A plain ``tempfile.mkdtemp`` left its
directory in the temp dir for good (a fresh-clone ``make test`` left ~30 there).

Each process that makes scratch directories holds one *owner file*,
``agentlab-owner.<token>``, with an exclusive ``flock`` for its whole life; the kernel
drops that lock when the process dies, however it dies. Its directories are named
``<name>.<token>.<random>``. The first scratch directory a process makes under a name
removes that name's directories whose owner file nobody holds (or that is gone), and the
unheld owner files. One descriptor per process, not one per directory: a notebook may hold
thousands of open runs. The owner file is locked under a hidden name and then renamed
into place, so a sweep never sees it unlocked. Where the file system cannot ``flock``,
directories are made under a hidden name (``.<name>.<random>``) that no sweep touches,
removed at :meth:`ScratchDir.close` or exit as before.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
import weakref
from pathlib import Path

__all__ = ["OWNER_PREFIX", "ScratchDir", "sweep_abandoned"]

#: the name of a process's owner file, before its token
OWNER_PREFIX = "agentlab-owner."

_OWNERS: dict[str, tuple[int, str, int]] = {}  # temp dir -> (pid, token, fd) of this process
_SWEPT: set[tuple[str, str]] = set()  # (temp dir, name) this process has swept (once each)


def _owner_token(base: Path) -> str | None:
    """This process's owner token in ``base`` (made and locked on first use; a forked
    child makes its own), or ``None`` where ``base`` cannot ``flock``."""
    key, pid = str(base), os.getpid()
    held = _OWNERS.get(key)
    if held is not None and held[0] == pid:
        return held[1]
    fd, hidden = tempfile.mkstemp(prefix=f".{OWNER_PREFIX}", dir=base)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        os.unlink(hidden)
        return None
    token = Path(hidden).name[len(OWNER_PREFIX) + 1 :]
    os.rename(hidden, base / f"{OWNER_PREFIX}{token}")  # the same inode: the lock moves too
    _OWNERS[key] = (pid, token, fd)
    atexit.register(_drop_owner, key)
    return token


def _drop_owner(key: str) -> None:
    """At a normal exit: remove this process's owner file (a killed one leaves it to the
    next sweep); not a forked child's parent's."""
    held = _OWNERS.pop(key, None)
    if held is not None and held[0] == os.getpid():
        try:
            os.unlink(Path(key) / f"{OWNER_PREFIX}{held[1]}")
        except OSError:
            pass
        os.close(held[2])


def _base(root: str | os.PathLike[str] | None) -> Path:
    return Path(root) if root is not None else Path(tempfile.gettempdir())


class ScratchDir:
    """A temporary directory in the temp dir, removed by :meth:`close`, when
    garbage-collected, at exit, or by another process's sweep after this one died.

    Args:
        name: what the directory is for, e.g. ``"agentlab-env"`` (no ``.`` in it).
        root: where (default: ``tempfile.gettempdir()``).
    """

    def __init__(self, name: str, root: str | os.PathLike[str] | None = None) -> None:
        if not name or "." in name or os.sep in name:
            raise ValueError(f"scratch name {name!r}: a non-empty name with no '.' or '/'")
        base = _base(root)
        if (str(base), name) not in _SWEPT:
            _SWEPT.add((str(base), name))
            sweep_abandoned(name, base)
        token = _owner_token(base)
        prefix = f"{name}.{token}." if token is not None else f".{name}."
        #: the directory
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.path), True)

    def close(self) -> None:
        """Remove the directory (idempotent)."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"ScratchDir({str(self.path)!r})"


def _owner_alive(base: Path, token: str, mine: str | None) -> bool:
    if token == mine:
        return True
    try:
        fd = os.open(base / f"{OWNER_PREFIX}{token}", os.O_RDONLY)
    except FileNotFoundError:  # swept after its process died
        return False
    except OSError:  # not ours to open: leave it
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its process is alive
        return True
    finally:
        os.close(fd)
    return False


def sweep_abandoned(name: str, root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the ``name`` scratch directories under ``root`` (default: the temp dir)
    whose owner process is gone, and the owner files nobody holds; returns the directories
    removed. A live owner's directories, and what is not ours to open, stay."""
    base = _base(root)
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    held = _OWNERS.get(str(base))
    mine = held[1] if held is not None and held[0] == os.getpid() else None
    alive: dict[str, bool] = {}
    gone: list[Path] = []
    for entry in entries:
        if entry.name.startswith(f"{name}."):
            token = entry.name[len(name) + 1 :].split(".", 1)[0]
            if token not in alive:
                alive[token] = _owner_alive(base, token, mine)
            if not alive[token] and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
                gone.append(Path(entry.path))
    for entry in entries:  # owner files of dead processes (after their directories)
        if entry.name.startswith(OWNER_PREFIX):
            token = entry.name[len(OWNER_PREFIX) :]
            if token not in alive:  # (one whose directories were not listed above)
                alive[token] = _owner_alive(base, token, mine)
            if not alive[token]:
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass
    return gone
