"""The run lifecycle in ``run.json``: ``status`` (+ ``ended``) written by every driver.

```
running ──► paused ──► running ──► done | stopped | failed
   └──────────── (writer killed: the lock is free) ──► read as "interrupted"
```

Every driver (``Society``, topology ``Experiment``, thread ``AgentSystem``, sweeps and
papers) calls :func:`mark_status` as its run moves on, and holds the run's writer lock
(``WRITER.lock``, :mod:`agentlab.store.writer_lock`) while it runs. :func:`read_status` is
what every reader (``agentlab runs``, ``report``, ``view``, the widgets) shows: a run that
says ``running`` or ``paused`` but whose writer is gone (kill -9, a crashed kernel) reads
as ``interrupted``.

```python
mark_status(run_dir, "running")
mark_status(run_dir, "failed", error="ValueError: bad config")   # sets ended
read_status(run_dir)   # "failed"; "interrupted" if it said running and nobody writes it
```
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, cast, get_args

from agentlab.errors import ConfigError
from agentlab.store.atomic import atomic_write_json, read_json
from agentlab.store.layout import REPLAY_DIR, TRACE_DIR
from agentlab.store.manifest import MANIFEST_NAME, MANIFEST_SCHEMA_VERSION, iso_time
from agentlab.store.writer_lock import _HELD, LOCK_NAME, WriterLock, lock_holder

__all__ = ["ENDED", "LIVE", "STEP_FILE", "RunStatus", "claim_run_dir", "clear_run_dir",
           "hold_run_dir", "is_run", "mark_status", "normalize_status", "read_status",
           "writer_alive", "writing_run"]  # fmt: skip

RunStatus = Literal["running", "paused", "stopped", "done", "failed", "interrupted"]
STATUSES: tuple[str, ...] = get_args(RunStatus)
#: statuses that say a writer is at work (checked against the lock by :func:`read_status`)
LIVE = ("running", "paused")
#: statuses that set ``ended``
ENDED = ("stopped", "done", "failed")

# what older versions (and ``finish_manifest``) wrote
_LEGACY = {"ok": "done", "error": "failed", "partial": "failed", "cancelled": "stopped"}

STEP_FILE = "SOCIETY_STEP.json"  # runtime.society_files.STEP_FILE (store must not import it)


def is_run(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a run directory (it has ``run.json``, a society or a log)."""
    p = Path(path)
    return (
        (p / MANIFEST_NAME).is_file()
        or (p / STEP_FILE).is_file()
        or (p / REPLAY_DIR).is_dir()
        or (p / TRACE_DIR).is_dir()
    )


def mark_status(
    run_dir: str | os.PathLike[str],
    status: RunStatus,
    *,
    error: str | None = None,
    counters: Mapping[str, int] | None = None,
) -> dict[str, object]:
    """Write ``status`` into ``<run_dir>/run.json`` atomically; returns the document.

    ``stopped`` / ``done`` / ``failed`` set ``ended`` (ISO time); ``running`` and
    ``paused`` clear it. ``error`` (a one-line message) is kept with a ``failed`` or
    ``stopped`` status and removed when the run goes on. ``counters`` (``steps``,
    ``step_errors``, ``ticks``) are what a driver without a commit record
    (``SOCIETY_STEP.json``) tells :func:`~agentlab.store.summary.summarize_run`.
    """
    if status not in STATUSES or status == "interrupted":
        raise ConfigError(
            f"cannot mark a run {status!r}: use one of running, paused, stopped, done, failed "
            "('interrupted' is only read, never written)"
        )
    path = Path(run_dir) / MANIFEST_NAME
    doc = read_json(path, default=None)
    if not isinstance(doc, dict):
        doc = {"schema_version": MANIFEST_SCHEMA_VERSION}
    doc["status"] = status
    doc["ended"] = iso_time(time.time()) if status in ENDED else None
    if error is not None:
        doc["error"] = str(error)[:2000]
    elif status in LIVE:
        doc.pop("error", None)
    if counters is not None:
        doc["counters"] = {str(k): int(v) for k, v in counters.items()}
    atomic_write_json(path, doc)
    return doc


def normalize_status(value: object) -> RunStatus | None:
    """A ``run.json`` status in the lifecycle's words (``ok`` → ``done``...), or ``None``."""
    if not isinstance(value, str):
        return None
    value = _LEGACY.get(value, value)
    return cast(RunStatus, value) if value in STATUSES else None


def read_status(run_dir: str | os.PathLike[str], manifest: dict[str, object] | None = None
                ) -> RunStatus:  # fmt: skip
    """The run's status as readers should show it.

    ``running`` / ``paused`` in ``run.json`` with no live writer (see :func:`writer_alive`)
    is ``interrupted``; a run without a status (or without ``run.json``) is
    ``interrupted`` too, since nothing can be said about it finishing.

    Args:
        manifest: ``run.json`` if the caller has already read it (saves a read).
    """
    if manifest is None:
        doc = read_json(Path(run_dir) / MANIFEST_NAME, default=None)
        manifest = doc if isinstance(doc, dict) else {}
    status = normalize_status(manifest.get("status"))
    if status is None:
        return "interrupted"
    if status in LIVE and not writer_alive(run_dir):
        return "interrupted"
    return status


def writer_alive(run_dir: str | os.PathLike[str]) -> bool:
    """Whether a live process holds the run's writer lock (never blocks, never takes it
    for longer than a probe).

    This process's own locks are answered from its lock table; another holder on this
    host is checked by its pid (a kill -9 leaves its pid in the lock file, and that pid
    is gone); a holder on another host, or a pid that still exists, by a non-blocking
    shared ``flock`` probe (the kernel drops a dead holder's lock).
    """
    key = os.path.realpath(run_dir)
    if key in _HELD:
        return True
    lock = Path(run_dir) / LOCK_NAME
    holder = lock_holder(run_dir)
    if holder is None:
        if lock.exists():  # an empty lock file: released (or a writer starting this instant)
            return _flock_held(lock)
        # WRITER.lock deleted: the writer also holds the directory's own flock
        return _flock_held(Path(run_dir), directory=True)
    pid, host = holder.get("pid"), holder.get("host")
    if host == socket.gethostname() and isinstance(pid, int):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's live process
            pass
    return _flock_held(lock)


def _flock_held(lock: Path, *, directory: bool = False) -> bool:
    flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(lock, flags)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the probe's shared lock at once
    return False


def clear_run_dir(run_dir: str | os.PathLike[str]) -> None:
    """Delete everything in a run directory except its writer lock — the caller must hold
    that lock (``WriterLock(run_dir).acquire()``), which is what makes this safe: a run
    with a live writer is never deleted. Used by ``exist_ok="replace"``.

    Raises:
        ConfigError: the folder has files but is not a run (nothing is removed).
    """
    root = Path(run_dir)
    if not root.is_dir():
        return
    names = [n for n in os.listdir(root) if n != LOCK_NAME]
    if not names:
        return
    if not is_run(root):
        raise ConfigError(
            f"{str(root)!r} is not a run directory (no run.json, society or log) but holds "
            f"{len(names)} entries ({', '.join(sorted(names)[:3])}...); refusing to replace "
            "it: give a new or a run folder"
        )
    for name in names:
        p = root / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def hold_run_dir(run_dir: str | os.PathLike[str], what: str) -> WriterLock:
    """Take ``run_dir``'s writer lock for a driver that writes until it releases it: unlike
    a ``Society``'s (taken over by a later ``Society.open`` of this process while idle),
    it is never taken over, so nothing of this process replaces the run while it runs.

    Args:
        what: the driver, as the refusal message names it (``"Experiment"``...).
    """
    lock = WriterLock(run_dir)
    lock.busy = lambda: True
    lock.what = what
    return lock.acquire()


def claim_run_dir(
    run_dir: str | os.PathLike[str],
    exist_ok: bool | Literal["replace"] = False,
    *,
    what: str = "writer",
    keep_means: str = "to add to it",
) -> WriterLock:
    """Take ``run_dir``'s writer lock, then apply ``exist_ok`` to a run already there.

    ``False``: refuse an existing run (``ConfigError``, which says what ``True`` would do:
    ``keep_means``); ``True``: keep it (add to it);
    ``"replace"``: delete it — only now, under the lock, so a run another process (or a
    running object of this one) writes is never deleted: the lock is refused first with
    ``RunLockedError`` naming the holder. Returns the held lock (release it when done).
    """
    if exist_ok not in (True, False, "replace"):
        raise ConfigError(f"exist_ok must be False, True or 'replace', got {exist_ok!r}")
    root = Path(run_dir)
    lock = hold_run_dir(root, what)
    try:
        if exist_ok == "replace":
            clear_run_dir(root)
        elif not exist_ok and is_run(root):
            raise ConfigError(
                f"{root} already holds a run; pass exist_ok='replace' to start over (or "
                f"exist_ok=True {keep_means})"
            )
    except BaseException:
        lock.release()
        raise
    return lock


@contextlib.contextmanager
def writing_run(
    run_dir: str | os.PathLike[str],
    *,
    kind: str,
    config: Any = None,
    seed: int | None = None,
    params: Mapping[str, Any] | None = None,
    exist_ok: bool | Literal["replace"] = False,
) -> Iterator[Path]:
    """Hold ``run_dir`` as its writer for the block: the lifecycle for a driver of your own.

    Takes the lock (:func:`claim_run_dir`), writes ``run.json`` (``running``), yields the
    directory; marks ``done`` when the block ends, ``stopped`` when it is interrupted
    (Ctrl-C, a cancelled cell), ``failed`` with the error when it raises.

    ```python
    with writing_run(out, kind="werewolf", config=cfg, seed=1, exist_ok="replace") as d:
        replay = get_replay_sink(d); ...
    ```
    """
    import asyncio

    from agentlab.store.manifest import write_manifest

    lock = claim_run_dir(run_dir, exist_ok, what=f"writing_run ({kind})")
    root = Path(run_dir)
    try:
        write_manifest(root, kind=kind, config=config, seed=seed, params=params)
        try:
            yield root
        except (KeyboardInterrupt, asyncio.CancelledError):
            mark_status(root, "stopped")
            raise
        except BaseException as exc:
            mark_status(root, "failed", error=f"{type(exc).__name__}: {exc}")
            raise
        mark_status(root, "done")
    finally:
        lock.release()
