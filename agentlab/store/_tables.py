"""Incremental DuckDB views over JSONL shards (and an optional Parquet compaction).

Each dataset becomes a view named after it. Behind it:

* ``_compact.parquet`` (if present and not stale), read in place. Its key-value metadata
  ``agentlab`` records the byte offset up to which it covers each shard.
* an in-memory table ``_raw_<name>`` holding the rows past those offsets. A refresh parses
  only bytes it has not seen: a shard read from offset 0 is scanned in place (rows past the
  snapshot are cut by ``_seq``); a shard that grew has just its new bytes copied to a temp
  file. All pieces go through one ``INSERT ... FROM read_json([...])`` with explicit column
  types, so DuckDB parses every shard natively and in parallel. Clean shards are read
  strictly; ``ignore_errors`` is used only for a torn shard or after a strict read failed
  (a line being written at that moment), and lines it skips are reported. Only complete
  lines are ever ingested.

So repeated queries cost a ``stat`` per shard plus the query itself, never a rescan.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentlab.store._writer import last_complete_line
from agentlab.store.layout import COMPACT_NAME, shard_files
from agentlab.store.tail import _incomplete
from agentlab.store.views import INTERNAL_SCHEMA, view_sql

__all__ = ["DatasetState", "TableCache", "q", "quote_str"]

COMPACT_META_KEY = "agentlab"
COMPACT_SCHEMA_VERSION = 1


def q(name: str) -> str:
    """Quote a SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def quote_str(s: str) -> str:
    """Quote a SQL string literal."""
    return "'" + s.replace("'", "''") + "'"


def columns_literal(columns: dict[str, str]) -> str:
    return "{" + ", ".join(f"{quote_str(k)}: {quote_str(v)}" for k, v in columns.items()) + "}"


def read_json_sql(
    path: Path | str | Sequence[Path | str],
    columns: dict[str, str],
    *,
    ignore_errors: bool = True,
    filename: str | None = None,
) -> str:
    """A DuckDB ``read_json`` call over one file, a glob, or a list of files.

    Args:
        path: file(s) to scan.
        columns: ``{name: type}``; given explicitly so DuckDB never samples to guess.
        ignore_errors: skip malformed lines (a torn tail) instead of failing; a value that
            does not fit its column type becomes NULL.
        filename: add the source path as a column of this name.
    """
    paths = [path] if isinstance(path, str | Path) else list(path)
    files = (
        quote_str(str(paths[0]))
        if len(paths) == 1
        else ("[" + ", ".join(quote_str(str(p)) for p in paths) + "]")
    )
    extra = f", filename={quote_str(filename)}" if filename else ""
    # hive_partitioning off: DuckDB reads a `key=value` folder in the path as a column
    # (a one-parameter sweep's point folder, `agents=200-1a2b3c4d`, or the user's own
    # `runs/agents=200`), which made every dataset under it unreadable
    return (
        f"read_json({files}, format='newline_delimited', records=true, "
        f"hive_partitioning=false, ignore_errors={'true' if ignore_errors else 'false'}, "
        f"maximum_object_size=268435456, columns={columns_literal(columns)}{extra})"
    )


def parquet_meta(con: Any, path: Path) -> dict[str, Any] | None:
    """The ``agentlab`` key-value metadata of a compaction file, or ``None``."""
    try:
        rows = con.execute("SELECT key, value FROM parquet_kv_metadata(?)", [str(path)]).fetchall()
    except Exception:
        return None
    for k, v in rows:
        if bytes(k) == COMPACT_META_KEY.encode():
            try:
                doc = orjson.loads(bytes(v))
            except orjson.JSONDecodeError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


@dataclass
class DatasetState:
    name: str
    directory: Path
    columns: dict[str, str]  # including _shard/_seq
    covered: dict[str, int] = field(default_factory=dict)
    parquet: Path | None = None
    parquet_sig: tuple[int, int] | None = None
    created: bool = False
    view_columns: dict[str, str] | None = None  # what the views were built for

    @property
    def table(self) -> str:
        return f"_raw_{self.name}"

    @property
    def source(self) -> str:
        """The view of the rows as stored (with ``_shard``/``_seq``; see ``views.py``)."""
        return f"_src_{self.name}"


class TableCache:
    """Keeps every dataset view of one DuckDB connection up to date with the shards."""

    def __init__(self, con: Any, tmpdir: Path) -> None:
        self.con = con
        self.tmpdir = tmpdir
        self.states: dict[str, DatasetState] = {}
        self.problems: list[tuple[str, bool]] = []
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {INTERNAL_SCHEMA}")
        con.execute("SET TimeZone = 'UTC'")

    def state(self, name: str, directory: Path, columns: dict[str, str]) -> DatasetState:
        st = self.states.get(name)
        if st is None:
            st = self.states[name] = DatasetState(name, directory, dict(columns))
        elif st.columns != columns:
            if any(st.columns.get(c, t) != t for c, t in columns.items()):
                self._reset(st)  # a type changed: rebuild from scratch
            elif st.created:
                for c, t in columns.items():
                    if c not in st.columns:
                        self.con.execute(f"ALTER TABLE {q(st.table)} ADD COLUMN {q(c)} {t}")
            st.columns = dict(columns)
        return st

    def _reset(self, st: DatasetState) -> None:
        self.con.execute(f"DROP VIEW IF EXISTS {q(st.name)}")
        self.con.execute(f"DROP VIEW IF EXISTS {INTERNAL_SCHEMA}.{q(st.name)}")
        self.con.execute(f"DROP VIEW IF EXISTS {q(st.source)}")
        self.con.execute(f"DROP TABLE IF EXISTS {q(st.table)}")
        st.covered, st.parquet, st.parquet_sig, st.created = {}, None, None, False
        st.view_columns = None

    def _open_parquet(self, st: DatasetState) -> None:
        pq = st.directory / COMPACT_NAME
        try:
            s = pq.stat()
        except FileNotFoundError:
            return
        st.parquet_sig = (s.st_mtime_ns, s.st_size)
        meta = parquet_meta(self.con, pq)
        offsets = (meta or {}).get("offsets")
        if not isinstance(offsets, dict):
            self.problems.append((f"{pq}: no agentlab metadata; ignored", True))
            return
        for shard, off in offsets.items():
            p = st.directory / shard
            if p.exists() and p.stat().st_size < int(off):
                self.problems.append((f"{pq}: stale (shard {shard} was truncated); ignored", True))
                return
        st.parquet, st.covered = pq, {k: int(v) for k, v in offsets.items()}

    def refresh(self, st: DatasetState) -> None:
        """Ingest whatever complete lines the shards gained since the last refresh."""
        pq = st.directory / COMPACT_NAME
        try:
            s = pq.stat()
            sig: tuple[int, int] | None = (s.st_mtime_ns, s.st_size)
        except FileNotFoundError:
            sig = None
        if st.created and sig != st.parquet_sig:
            self._reset(st)  # someone compacted (or removed the compaction) meanwhile
        files = shard_files(st.directory)
        if st.created and any(f.stat().st_size < st.covered.get(f.name, 0) for f in files):
            self.problems.append((f"{st.directory}: log was truncated; reloaded", False))
            self._reset(st)
        if not st.created:
            self._open_parquet(st)
            cols = ", ".join(f"{q(c)} {t}" for c, t in st.columns.items())
            self.con.execute(f"CREATE OR REPLACE TABLE {q(st.table)} ({cols})")
            src = f"SELECT * FROM {q(st.table)}"
            if st.parquet is not None:
                src = (
                    f"SELECT * FROM read_parquet({quote_str(str(st.parquet))}, hive_partitioning=false) "
                    f"UNION ALL BY NAME {src}"
                )
            self.con.execute(f"CREATE OR REPLACE VIEW {q(st.source)} AS {src}")
            st.created = True
        if st.view_columns != st.columns:
            for schema, internal in ((f"{INTERNAL_SCHEMA}.", True), ("", False)):
                body = view_sql(st.source, st.columns, internal=internal)
                self.con.execute(f"CREATE OR REPLACE VIEW {schema}{q(st.name)} AS {body}")
            st.view_columns = dict(st.columns)
        batch: list[_Piece] = []
        try:
            for f in files:
                piece = self._piece(st, f)
                if piece is not None:
                    batch.append(piece)
            if batch:
                self._insert(st, batch)
        finally:
            for piece in batch:
                if piece.temp:
                    piece.path.unlink(missing_ok=True)

    def _piece(self, st: DatasetState, path: Path) -> _Piece | None:
        """What to ingest from one shard: its complete lines past the covered offset."""
        off = st.covered.get(path.name, 0)
        try:
            fs = path.stat()
        except FileNotFoundError:
            return None
        if fs.st_size <= off:
            return None
        end, line = last_complete_line(path, fs.st_size)
        torn = end < fs.st_size
        if torn:
            self.problems.append(_incomplete(path, end, fs.st_size, fs.st_mtime))
        if end <= off or line is None:
            return None
        try:
            last_seq = int(orjson.loads(line)["_seq"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            last_seq = None
        if off == 0 and last_seq is not None:
            # Scan in place: rows a writer appends after this snapshot have larger _seq and
            # are cut off by the WHERE clause; a partial line past ``end`` is malformed JSON.
            return _Piece(path, path, end, last_seq, 0, torn, False)
        # A grown shard: copy just the new complete lines (DuckDB cannot read byte ranges).
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        tmp = self.tmpdir / f"{st.name}-{time.monotonic_ns()}.jsonl"
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            src.seek(off)
            remaining = end - off
            while remaining:
                chunk = src.read(min(remaining, 1 << 24))
                if not chunk:
                    break
                dst.write(chunk)
                remaining -= len(chunk)
        return _Piece(path, tmp, end, last_seq, off, False, True)

    def _insert(self, st: DatasetState, pieces: list[_Piece]) -> None:
        """One ``INSERT`` for every shard piece (DuckDB scans the files in parallel).

        Clean shards are read strictly; only if that fails (a torn tail, a line being written
        right now, a value of the wrong type) is the scan repeated with ``ignore_errors``,
        and rows lost that way are reported.
        """
        cuts = " ".join(f"WHEN {quote_str(str(p.path))} THEN {p.cut}" for p in pieces)
        where = f"_seq <= CASE {q(_FILE)} {cuts} END"
        torn = any(p.torn for p in pieces)

        def run(ignore: bool) -> int:
            src = read_json_sql(
                [p.path for p in pieces], st.columns, ignore_errors=ignore, filename=_FILE
            )
            row = self.con.execute(
                f"INSERT INTO {q(st.table)} BY NAME SELECT * EXCLUDE ({q(_FILE)}) "
                f"FROM {src} WHERE {where}"
            ).fetchone()
            return int(row[0]) if row else 0

        err: Exception | None = None
        if torn:
            n = run(True)
        else:
            try:
                n = run(False)
            except Exception as exc:  # duckdb.Error; duckdb is not imported at module level
                err = exc
                n = run(True)
        if err is not None or torn:
            expected = sum(_expected_rows(p) for p in pieces)
            if expected > n:
                self.problems.append((
                    f"{st.directory}: {expected - n} unreadable line(s) skipped"
                    + (f" ({str(err).splitlines()[0]})" if err is not None else ""),
                    True,
                ))  # fmt: skip
            elif err is not None and "transform error" in str(err):
                self.problems.append((
                    f"{st.directory}: values that do not fit the catalog types were read as "
                    f"NULL ({str(err).splitlines()[0]})",
                    True,
                ))  # fmt: skip
            elif err is not None:
                # Every row (by _seq) was read, yet the strict scan failed: a line that is
                # not a row sits among them (garbage written into a committed shard).
                self.problems.append((
                    f"{st.directory}: line(s) that are not rows skipped, every row read "
                    f"({str(err).splitlines()[0]})",
                    True,
                ))  # fmt: skip
        for p in pieces:
            st.covered[p.shard.name] = p.end


_FILE = "__agentlab_file"
_MAX_SEQ = 2**63 - 1


@dataclass
class _Piece:
    shard: Path  # the shard file
    path: Path  # what DuckDB reads: the shard itself, or a temp copy of its new lines
    end: int  # shard offset just past the last complete line ingested
    last_seq: int | None  # _seq of that line: later rows are cut off
    start: int  # shard offset the piece starts at
    torn: bool  # the shard ended in a partial line when looked at
    temp: bool  # ``path`` is a temp copy to delete

    @property
    def cut(self) -> int:
        """Largest ``_seq`` to keep: a temp copy holds only complete lines, keep them all."""
        return _MAX_SEQ if self.temp or self.last_seq is None else self.last_seq


def _expected_rows(p: _Piece) -> int:
    """Rows the piece should yield (``_seq`` is contiguous within a shard)."""
    if p.last_seq is None:
        return 0
    try:
        with open(p.path, "rb") as f:
            first = orjson.loads(f.readline())["_seq"]
        return max(0, p.last_seq - int(first) + 1)
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return 0
