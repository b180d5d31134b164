"""What a dataset looks like to DuckDB and pandas users: the views over the raw rows.

Behind every dataset ``name`` of a run's DuckDB connection (:attr:`Run.con`):

* ``_src_<name>``: the rows as stored (Parquet compaction ``UNION ALL BY NAME`` the rows
  read from the JSONL shards), with the writer's ``_shard``/``_seq``. Compaction reads it.
* ``internal.<name>``: every column, plus a ``TIMESTAMPTZ`` column ``<col>_at`` right after
  each epoch-second column of :data:`TIME_COLUMNS` (``start`` → ``start_at``, ``end`` →
  ``end_at``, ``first_token`` → ``first_token_at``, ``ts`` → ``ts_at``).
* ``<name>``: the same without ``_shard``/``_seq``, so ``select *`` shows only data.

A time value below :data:`EPOCH_MIN` (a virtual clock's seconds, not a date) reads as NULL
in its ``_at`` column rather than as a day in 1970. JSON columns keep DuckDB's ``JSON``
type in SQL; :func:`fetch_df` turns them into Python objects (dicts, lists) in pandas.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from typing import Any

import orjson

__all__ = [
    "EPOCH_MIN",
    "INTERNAL_SCHEMA",
    "TIME_COLUMNS",
    "fetch_df",
    "name_datasets",
    "view_sql",
]

#: epoch-second columns that get a ``<name>_at TIMESTAMPTZ`` twin (when typed ``DOUBLE``)
TIME_COLUMNS = ("start", "end", "first_token", "ts")
#: 2001-09-09: smaller values are clock offsets, not dates (their ``_at`` is NULL)
EPOCH_MIN = 1e9
INTERNAL_SCHEMA = "internal"
HIDDEN = ("_shard", "_seq")


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def derived_columns(columns: dict[str, str]) -> dict[str, str]:
    """``{column: type}`` of what the views show: ``columns`` plus the ``_at`` twins."""
    out: dict[str, str] = {}
    for c, t in columns.items():
        out[c] = t
        at = f"{c}_at"
        if c in TIME_COLUMNS and t == "DOUBLE" and at not in columns:
            out[at] = "TIMESTAMPTZ"
    return out


def view_sql(source: str, columns: dict[str, str], *, internal: bool) -> str:
    """The ``SELECT`` of a dataset view over ``source`` (``internal``: keep ``_shard``/``_seq``)."""
    parts = []
    for c, t in derived_columns(columns).items():
        if c in HIDDEN and not internal:
            continue
        if t == "TIMESTAMPTZ" and c not in columns:
            base = _q(c[: -len("_at")])
            parts.append(
                f"CASE WHEN {base} >= {EPOCH_MIN:.0f} THEN to_timestamp({base}) END AS {_q(c)}"
            )
        else:
            parts.append(_q(c))
    return f"SELECT {', '.join(parts)} FROM {_q(source)}"


def _decode(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            try:
                return json.loads(value)  # NaN, a lone surrogate: what orjson refuses
            except ValueError:
                return value
    if isinstance(value, float) and value != value:
        return None  # SQL NULL reaches pandas as NaN
    return value


#: DuckDB's type of ``sum()`` over integers (and of integer arithmetic that may overflow)
_WIDE_INTS = ("HUGEINT", "UHUGEINT")
#: the largest integer a float64 holds exactly
_EXACT = 2**53


def fetch_df(cursor: Any) -> Any:
    """A DuckDB result as a DataFrame, its ``JSON`` columns decoded to Python objects and
    its 128-bit integer columns (``sum()`` of integers) as integers.

    DuckDB's ``.df()`` turns a ``HUGEINT`` into float64, so ``sum(total_tokens)`` printed
    ``41915.0``; a column whose values are all whole and below 2**53 (exact in a float64)
    becomes ``int64``. One with NULLs stays float64 with NaN (pandas' ``Int64`` would hand
    ``pd.NA`` to code that does ``float(x)`` or numpy math on it), as does a larger one.
    """
    desc = cursor.description or ()
    json_cols = [d[0] for d in desc if str(d[1]) == "JSON"]
    wide = [d[0] for d in desc if str(d[1]) in _WIDE_INTS]
    out = cursor.df()
    for c in json_cols:
        if c in out:
            out[c] = out[c].map(_decode).astype(object)
    if out.columns.duplicated().any():  # (a column by name would be a frame)
        wide = []
    for c in wide:
        col = out[c]
        whole = col.dtype.kind == "f" and not col.isna().any() and ((col % 1) == 0).all()
        if whole and (col.abs() < _EXACT).all():
            out[c] = col.astype("int64")
    return out


_MISSING = re.compile(r"Table with name (\S+) does not exist")


def name_datasets(exc: BaseException, names: Iterable[str]) -> None:
    """Add a note naming the datasets to DuckDB's error for a table that is not there.

    The views of a run are made for the dataset names a query mentions (so a query reads
    only those), so DuckDB's own suggestion for a misspelt one comes from its system
    catalog: ``select * from llm_callz`` said ``Did you mean "pg_class"?``. The note names
    the closest dataset and lists them all; the exception is DuckDB's, unchanged."""
    m = _MISSING.search(str(exc))
    if m is None:
        return
    known = sorted(set(names))
    close = difflib.get_close_matches(m.group(1).strip('"'), known, n=1)
    near = f"did you mean {close[0]!r}? " if close else ""
    exc.add_note(f"{near}datasets to query: {', '.join(known) or 'none'}")
