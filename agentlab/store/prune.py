"""Rewrite a run's log keeping the rows a predicate accepts (interleaved runs' continuation).

A society's tick and a one-run-at-a-time experiment end with the log holding exactly what
they committed, so continuing them cuts each shard back to a byte mark (``offsets.py``).
When runs interleave in the log (``Experiment(parallel_runs=4)``) the rows of the runs in
flight at a crash sit between the rows of finished ones and no cut point separates them:
:func:`prune_log` rewrites each replay and trace shard with the rows ``keep(dataset, row)``
accepts, in their order, their bytes as written, ``_seq`` renumbered from 0 (a shard's
sequence numbers stay contiguous, as its writer recovers them from the last line).

Safety: every shard is read and every new shard written to a temporary file before any is
replaced; a line that does not parse in the middle of a shard raises
:class:`~agentlab.errors.CorruptRecordError` with nothing changed (it cannot be told whose
row it was). A shard's unterminated or unparsable *last* line is a write the crash tore and
is dropped (a commit follows the flush of every row it names). Each shard is replaced by an
atomic rename, so a crash leaves each old or new, and running the same pruning again gives
the same log. A shard's compaction (``_compact.parquet``) goes with a rewrite, as with a cut.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from agentlab.errors import CorruptRecordError
from agentlab.store._writer import writers_for
from agentlab.store.layout import COMPACT_NAME, log_shards

__all__ = ["prune_log", "read_rows"]

#: every line a writer writes ends so (``_writer.encode_rows``)
_SEQ_END = re.compile(rb',"_seq":\d+}\n\Z')


def read_rows(run_dir: str | os.PathLike[str], dataset: str) -> Iterator[dict[str, Any]]:
    """The parsed rows of one dataset's shards (``spans``: the trace), torn lines skipped."""
    for name, p in log_shards(Path(run_dir)):
        if name == dataset:
            for _, row in _lines(p):
                if row is not None:
                    yield row


def _lines(path: Path) -> Iterator[tuple[bytes, dict[str, Any] | None]]:
    """Each line of a shard and its row; ``None`` for a torn last line.

    Raises:
        CorruptRecordError: a line before the last does not parse.
    """
    with open(path, "rb") as f:
        lines = f.readlines()
    for i, line in enumerate(lines):
        try:
            row = orjson.loads(line) if line.endswith(b"\n") else None
        except orjson.JSONDecodeError:
            row = None
        if row is None and i < len(lines) - 1:
            raise CorruptRecordError(
                f"{path}: line {i + 1} of {len(lines)} is not a JSON row, so whose row it "
                "was cannot be told; nothing was rewritten. Mend or remove that line (the "
                "run is still readable with agentlab.open_run) and continue again"
            )
        if row is not None and not isinstance(row, dict):
            raise CorruptRecordError(f"{path}: line {i + 1} is not a JSON object")
        yield line, row


def prune_log(
    run_dir: str | os.PathLike[str], keep: Callable[[str, dict[str, Any]], bool]
) -> dict[str, int]:
    """Rewrite the log of ``run_dir`` with the rows ``keep(dataset, row)`` accepts (see the
    module docstring); returns ``{shard relpath: rows dropped}`` for the shards changed.
    Call with the run's writer lock held and nothing writing.

    Raises:
        CorruptRecordError: a shard has an unparsable line before its last (nothing changed).
    """
    root = Path(run_dir)
    plans: list[tuple[Path, Path, int]] = []
    try:
        for dataset, p in log_shards(root):
            kept: list[bytes] = []
            dropped = 0
            for line, row in _lines(p):
                if row is not None and keep(dataset, row):
                    kept.append(_renumber(line, row, len(kept)))
                else:
                    dropped += 1
            if dropped:
                tmp = p.with_name(f".{p.name}.prune")
                with open(tmp, "wb") as f:
                    f.writelines(kept)
                    f.flush()
                    os.fsync(f.fileno())
                plans.append((p, tmp, dropped))
    except BaseException:
        for _, tmp, _ in plans:
            tmp.unlink(missing_ok=True)
        raise
    for w in writers_for(root):  # their sequence numbers and handles are of the old files
        w.reset()
    changed: dict[str, int] = {}
    for p, tmp, dropped in plans:
        os.replace(tmp, p)
        (p.parent / COMPACT_NAME).unlink(missing_ok=True)
        changed[p.relative_to(root).as_posix()] = dropped
    for folder in {p.parent for p, _, _ in plans}:  # (the renames survive a power cut)
        _fsync_dir(folder)
    return changed


def _renumber(line: bytes, row: dict[str, Any], seq: int) -> bytes:
    """``line`` with ``_seq`` = ``seq``, its other bytes as written."""
    if row.get("_seq") == seq:
        return line
    if _SEQ_END.search(line):
        return _SEQ_END.sub(b',"_seq":%d}\n' % seq, line)
    return orjson.dumps({**row, "_seq": seq}) + b"\n"  # (a line not written by agentlab)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
