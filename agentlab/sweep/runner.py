"""Run one sweep point in a child process with a wall-clock timeout.

Shared by the local and the Ray executor: both call :func:`run_point`; they differ only in
where it runs. The point's directory ends up holding the executed notebook, ``status.json``,
``results.jsonl`` (from ``agentlab.record``), whatever the notebook wrote (its run
directories) and, on failure, ``error.txt``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from agentlab.store.atomic import atomic_write_json

__all__ = ["STATUS_FILE", "read_status", "run_point"]

STATUS_FILE = "status.json"
SCHEMA_VERSION = 1

# Process groups of running points, so Ctrl-C can stop them all.
_RUNNING: dict[int, subprocess.Popen[bytes]] = {}
_STOPPED: set[int] = set()  # ... and those Ctrl-C killed (their status says so)
_LOCK = threading.Lock()


def read_status(point_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``status.json`` of a point, or ``None`` if it never finished."""
    try:
        return json.loads((Path(point_dir) / STATUS_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


#: how the note that ends agentlab's short tracebacks (``agentlab.errors``) begins: a line
#: below the exception, so the last line of a point's error was the note, not the error
_HIDDEN_FRAMES_NOTE = "(agentlab's own frames are hidden"


def error_line(error: str | None) -> str | None:
    """The exception line (``Type: message``) of a point's recorded error: its last line
    other than the short traceback's note; ``None`` for no error."""
    lines = [
        line
        for line in (error or "").strip().splitlines()
        if line.strip() and not line.startswith(_HIDDEN_FRAMES_NOTE)
    ]
    return lines[-1] if lines else None


def kill_running() -> int:
    """Kill every running point's process group (Ctrl-C); returns how many were killed."""
    with _LOCK:
        procs = list(_RUNNING.values())
        _STOPPED.update(_RUNNING)
    for p in procs:
        _killpg(p)
    return len(procs)


def _killpg(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_point(
    notebook: str | os.PathLike[str],
    params: dict[str, Any],
    out_dir: str | os.PathLike[str],
    *,
    point_id: str,
    timeout: float | None = None,
    kernel_name: str | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Execute ``notebook`` with ``params`` into ``out_dir``; return (and write) its status.

    ``env`` adds environment variables for the point's kernel.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "error.txt").unlink(missing_ok=True)
    spec = {
        "notebook": str(Path(notebook).resolve()),
        "out_dir": str(out.resolve()),
        "parameters": params,
        "kernel_name": kernel_name,
        "env": env or {},
    }
    fd, spec_path = tempfile.mkstemp(prefix="agentlab-point-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(spec, f)
    started = time.time()
    log = open(out / "worker.log", "wb")  # noqa: SIM115 - closed below, after the child exits
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentlab.sweep._worker", spec_path],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: a timeout kills kernel and all
    )
    with _LOCK:
        _RUNNING[proc.pid] = proc
    status = "ok"
    try:
        rc = proc.wait(timeout=timeout)
        if rc != 0:
            status = "failed" if rc > 0 else "killed"
    except subprocess.TimeoutExpired:
        _killpg(proc)
        proc.wait()
        status = "timeout"
    finally:
        with _LOCK:
            _RUNNING.pop(proc.pid, None)
            stopped = proc.pid in _STOPPED
            _STOPPED.discard(proc.pid)
        log.close()
        os.unlink(spec_path)
    error = None
    if status != "ok":
        err_file = out / "error.txt"
        if err_file.exists():
            error = err_file.read_text()[-4000:]
        elif status == "timeout":
            error = f"point exceeded its timeout of {timeout} s and was killed"
        elif stopped:
            error = "stopped: the sweep was interrupted (Ctrl-C or the stop button)"
        else:
            error = (out / "worker.log").read_text(errors="replace")[-4000:]
    result = {
        "schema_version": SCHEMA_VERSION,
        "point_id": point_id,
        "params": params,
        "status": status,
        "error": error,
        "started": started,
        "ended": time.time(),
        "duration_s": round(time.time() - started, 3),
    }
    atomic_write_json(out / STATUS_FILE, result)
    return result
