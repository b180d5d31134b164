"""Cursor reads of JSONL shards: new complete lines since a per-shard byte offset.

A cursor is a plain dict ``{shard_file_name: byte_offset}`` (JSON-serialisable, so a
widget can keep it in a traitlet). The offset always sits just past a ``\\n``: a reader
consumes only complete, newline-terminated lines, so a line a writer is still writing is
picked up whole by a later call. Rows are therefore never skipped and never repeated while
writers append. A shard that shrank below its cursor (``truncate_log``, ``prune_log``)
resumes at its new end; a shard that appeared since the last call starts at 0. Either, or a
shard the cursor names gone, sets :attr:`TailResult.rewritten`: rows read before may no
longer be in the log (a reader that counted them is out of date).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentlab.store.layout import shard_files

__all__ = ["TailResult", "read_tail", "tail_rows"]

#: an incomplete last line older than this many seconds is reported as torn (crash)
STALE_S = 1.0


@dataclass
class TailResult:
    rows: list[dict[str, Any]]
    cursor: dict[str, int]
    problems: list[tuple[str, bool]] = field(default_factory=list)  # (message, warn?)
    #: a shard shrank below its cursor or is gone: the log was cut or rewritten under the
    #: cursor (a resume, a continuation, the run replaced)
    rewritten: bool = False


def _incomplete(path: Path, end: int, size: int, mtime: float) -> tuple[str, bool]:
    stale = time.time() - mtime > STALE_S
    what = "torn last line" if stale else "incomplete last line (writer active?)"
    return f"{path}: {what}: {size - end} bytes after offset {end} skipped", stale


def read_tail(
    directory: Path, cursor: dict[str, int] | None, *, limit: int | None = None
) -> TailResult:
    """Rows from every ``*.jsonl`` in ``directory`` past ``cursor``, in shard-name order."""
    cur = dict(cursor or {})
    out = TailResult([], cur)
    shards = shard_files(directory)
    names = {p.name for p in shards}
    for n in [n for n, off in cur.items() if off and n not in names]:
        out.problems.append((f"{directory / n}: gone after {cur.pop(n)} bytes were read", False))
        out.rewritten = True
    for path in shards:
        if limit is not None and len(out.rows) >= limit:
            break
        name = path.name
        off = cur.get(name, 0)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        if st.st_size < off:
            out.problems.append((f"{path}: shrank below the cursor ({off} > {st.st_size})", False))
            out.rewritten = True
            cur[name] = off = st.st_size
        if st.st_size == off:
            continue
        with open(path, "rb") as f:
            f.seek(off)
            data = f.read(st.st_size - off)
        end = data.rfind(b"\n") + 1
        if end < len(data):
            out.problems.append(_incomplete(path, off + end, off + len(data), st.st_mtime))
        pos = 0
        while pos < end:
            start, nl = pos, data.index(b"\n", pos)
            line = data[pos:nl]
            pos = nl + 1
            if line.strip():
                try:
                    out.rows.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    out.problems.append((f"{path}: unreadable line at offset {off + start}", True))
            if limit is not None and len(out.rows) >= limit:
                break
        cur[name] = off + pos
    return out


def tail_rows(run: Any, dataset: str, cursor: Any = None) -> tuple[list[dict[str, Any]], Any]:
    """Rows of ``dataset`` appended after ``cursor``, and the cursor to pass next time.

    Args:
        run: a run directory path, or a store ``Run`` (its ``path`` is used).
        dataset: dataset name (``timeline``, ``messages``, ...). A dataset that does not
            exist yet yields no rows (no catalogue needed, unlike ``Run.tail``).
        cursor: ``None`` for "from the beginning", else a value returned earlier.

    Returns:
        ``(rows, new_cursor)``; rows are dicts as written.
    """
    from agentlab.store.layout import REPLAY_DIR

    path = Path(getattr(run, "path", run))
    res = read_tail(path / REPLAY_DIR / dataset, cursor)
    return res.rows, res.cursor
