"""Crash-safe ticks: remember the log's size, and cut it back after a crash.

The society runtime calls, at each committed tick::

    flush every writer (driver and workers)      # nothing may sit in a buffer
    marks = log_marks(run_dir, previous_marks)   # {relpath: {bytes, lines, crc, tail}}

and on resume, *before any process writes again* (the run's writer lock held)::

    truncate_log(run_dir, offsets, marks=marks, problems=problems)

which truncates every replay/trace shard back to the end of its last committed row and
deletes shards created later, so the log holds exactly what the committed ticks wrote.
Compactions that covered the dropped bytes are deleted too. Writers of this process drop
their unflushed rows and re-read their sequence numbers.

Why marks and not just byte sizes: a byte offset is only right while the committed bytes
stay as written. A line inserted into the committed part (a stray ``echo >>``, an editor,
a bad copy) shifts every later byte, and cutting at the recorded size then cuts into —
and drops — committed rows. Each mark holds the committed size, line count, CRC-32 of
the committed bytes and CRC-32 of the last committed line (unique: it carries the row's
``_seq``). On resume the committed prefix is checked; if it changed, the cut goes after
the last committed line wherever it now is, the extra lines are kept and reported, and if
that line is gone nothing is cut and a ``CorruptRecordError`` says so. Marks are computed
incrementally (only bytes appended since the previous commit are read), and not read at
all for a shard whose every byte since it was last read this process's writer appended:
the writer extends the mark as it writes (``_LogWriter.seed_mark`` / ``mark_of``).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from agentlab.errors import CorruptRecordError
from agentlab.store._writer import _LogWriter, writers_for
from agentlab.store.layout import COMPACT_NAME, log_shards

__all__ = ["log_marks", "log_offsets", "truncate_log"]

#: one shard's commit mark: ``{"bytes", "lines", "crc", "tail"}`` (see the module docs)
Mark = dict[str, int]
_CHUNK = 1 << 22


def _shards(root: Path) -> list[Path]:
    return [p for _, p in log_shards(root)]


def log_offsets(run_dir: str | os.PathLike[str]) -> dict[str, int]:
    """Byte size of every replay and trace shard, keyed by POSIX path relative to the run.

    Call after flushing every writer, so every size ends on a line boundary.
    """
    root = Path(run_dir)
    return {p.relative_to(root).as_posix(): p.stat().st_size for p in _shards(root)}


def log_marks(
    run_dir: str | os.PathLike[str], previous: dict[str, Mark] | None = None
) -> dict[str, Mark]:
    """Commit marks of every replay and trace shard (see the module docstring).

    ``previous`` (the marks of the last commit) makes this read only the bytes appended
    since; a shard that is new, or shorter than its previous mark, is read in full. Call
    after flushing every writer.
    """
    root = Path(run_dir)
    prev = previous or {}
    out: dict[str, Mark] = {}
    writers = writers_for(root)
    for p in _shards(root):
        rel = p.relative_to(root).as_posix()
        size = p.stat().st_size
        known = _writers_mark(writers, rel, size)
        if known is not None:  # this process wrote every byte since it read the file
            out[rel] = known
            continue
        old = prev.get(rel)
        if not isinstance(old, dict) or old.get("bytes", -1) > size:
            old = {"bytes": 0, "lines": 0, "crc": 0, "tail": 0}
        mark = dict(old)
        if size > old["bytes"]:
            with open(p, "rb") as f:
                mark = _extend_mark(f, old, size)
        out[rel] = mark
        for w in writers:  # from now on extended by the writer as it appends
            w.seed_mark(rel, mark)
    return out


def _writers_mark(writers: list[_LogWriter], rel: str, size: int) -> Mark | None:
    """The mark a writer of this process kept of ``rel`` at ``size`` bytes, if any.

    Why: reading back what was appended since the last commit, to count its lines (a
    pass per byte) and CRC it, was ~3 % of a ``sim/instant`` agent-step; the writer CRCs
    the bytes as it writes them and knows how many lines they are. A shard another
    process appended to (a Ray worker's), or one this process has not read yet, is read.
    """
    for w in writers:
        mark = w.mark_of(rel, size)
        if mark is not None:
            return mark
    return None


def _extend_mark(f: BinaryIO, old: Mark, size: int) -> Mark:
    # Line count and the CRC of the last complete line, per chunk in C (``count``,
    # ``rfind``) rather than a Python step per line: a tick appends ~3 lines per agent.
    f.seek(old["bytes"])
    crc, lines, tail = old["crc"], old["lines"], old["tail"]
    line_crc = 0  # CRC of the line in progress (lines may span chunks)
    for chunk in _chunks(f, size - old["bytes"]):
        crc = zlib.crc32(chunk, crc)
        last = chunk.rfind(b"\n")
        if last < 0:
            line_crc = zlib.crc32(chunk, line_crc)
            continue
        lines += chunk.count(b"\n")
        prev = chunk.rfind(b"\n", 0, last)
        if prev < 0:  # the last line started in an earlier chunk (or at this one's start)
            tail = zlib.crc32(chunk[: last + 1], line_crc)
        else:
            tail = zlib.crc32(chunk[prev + 1 : last + 1])
        line_crc = zlib.crc32(chunk[last + 1 :])
    return {"bytes": size, "lines": lines, "crc": crc, "tail": tail}


def _chunks(f: BinaryIO, n: int) -> Iterator[bytes]:
    while n > 0:
        chunk = f.read(min(n, _CHUNK))
        if not chunk:
            return
        n -= len(chunk)
        yield chunk


def _find_cut(path: Path, rel: str, mark: Mark, problems: list[str]) -> int:
    """Where to cut ``path`` so that exactly its committed rows stay (see module docs)."""
    size = path.stat().st_size
    if mark["bytes"] == 0:
        return 0
    if size >= mark["bytes"]:
        with open(path, "rb") as f:
            now = _extend_mark(f, {"bytes": 0, "lines": 0, "crc": 0, "tail": 0}, mark["bytes"])
        if now["crc"] == mark["crc"]:
            return mark["bytes"]  # the committed bytes are exactly as committed
    # The committed part changed: find the last committed line wherever it is now.
    pos = lines = 0
    with open(path, "rb") as f:
        for line in f:
            pos += len(line)
            lines += 1
            # Lines are only ever added in front of it (never fewer than were committed),
            # so an earlier copy of the same line is not mistaken for it.
            if lines >= mark["lines"] and line.endswith(b"\n") and zlib.crc32(line) == mark["tail"]:
                extra = lines - mark["lines"]
                problems.append(
                    f"{rel}: the committed part of this shard was changed after its commit "
                    f"({lines} lines up to the last committed row, {mark['lines']} committed"
                    + (f": {extra} extra line(s) not written by agentlab" if extra > 0 else "")
                    + f"); cut after the last committed row at byte {pos} instead of "
                    f"{mark['bytes']}, no committed row dropped"
                )
                return pos
    raise CorruptRecordError(
        f"{path}: committed rows of this shard are gone — its last committed row is not "
        f"found after {mark['lines']} lines (the file has {size} bytes, {mark['bytes']} were "
        "committed): it was cut or edited outside agentlab. Nothing was truncated; restore "
        "the shard from a copy of the run before resuming (agentlab.open_run still reads it)"
    )


def truncate_log(
    run_dir: str | os.PathLike[str],
    offsets: dict[str, int],
    *,
    marks: dict[str, Mark] | None = None,
    problems: list[str] | None = None,
) -> list[str]:
    """Cut the log back to the commit; returns changed paths.

    Args:
        offsets: ``{relpath: bytes}`` from :func:`log_offsets` (used alone: cut at those
            sizes, trusting that the committed bytes are unchanged).
        marks: :func:`log_marks` of the same commit: verify each shard's committed part
            and never cut a committed row (see the module docstring).
        problems: receives a message per shard whose committed part had changed.

    Raises:
        CorruptRecordError: a shard lost its last committed row (nothing is cut then).
    """
    root = Path(run_dir)
    marks = marks or {}
    found: list[str] = []
    cuts: list[tuple[Path, str, int | None]] = []
    # Decide every cut before changing anything: an error leaves the log untouched.
    for p in _shards(root):
        rel = p.relative_to(root).as_posix()
        mark = marks.get(rel)
        keep = _find_cut(p, rel, mark, found) if mark is not None else offsets.get(rel)
        cuts.append((p, rel, keep))
    on_disk = {rel for _, rel, _ in cuts}
    for rel, mark in marks.items():
        if rel not in on_disk and mark.get("bytes"):
            found.append(
                f"{rel}: this committed shard ({mark['lines']} rows) is missing from the run "
                "directory; its rows are lost unless restored from a copy"
            )
    if problems is not None:
        problems.extend(found)
    for w in writers_for(root):
        w.reset()
    changed: list[str] = []
    for p, rel, keep in cuts:
        if keep is None:
            p.unlink()
        elif p.stat().st_size > keep:
            os.truncate(p, keep)
        else:
            continue
        changed.append(rel)
        stale = p.parent / COMPACT_NAME
        if stale.exists():
            stale.unlink()
    return changed
