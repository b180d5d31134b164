"""Where a benchmark writes its runs: the folder asked for (kept), or a temp one removed when
the process ends. A run of ``topology_paper.py`` alone writes ~220 MB; left in ``/tmp`` by
every run, such folders fill the disk of a machine that benchmarks often."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def scratch_path(keep: str | Path | None, prefix: str) -> Path:
    """``keep`` (created if missing, left in place), else a new temp dir removed at exit."""
    if keep:
        path = Path(keep)
        path.mkdir(parents=True, exist_ok=True)
        return path
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path
