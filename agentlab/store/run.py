"""``open_run(path) -> Run``: read-only access to a run directory (no Ray, no LLM).

```python
run = open_run("runs/demo")
run.datasets                                   # catalog as a DataFrame
run.df("llm_calls", where={"agent_id": "a1"}, columns=["start", "end"], limit=100)
run.df("llm_calls", internal=True)            # plus the writer's _shard/_seq columns
run.sql("select agent_id, count(*) n from llm_calls group by 1 order by n desc")
rows, cursor = run.tail("messages", cursor)    # new rows since cursor, for live views
run.compact()                                  # Parquet per dataset; reads stay transparent
run.export_parquet("out/")                     # out/<dataset>.parquet, read without agentlab
run.export_otlp("trace.otlp.json")             # for Jaeger / any OpenTelemetry tool
```

Every dataset is a DuckDB view without the writer's ``_shard``/``_seq`` (``internal.<name>``
has them), with a ``<col>_at TIMESTAMPTZ`` next to each epoch-second column (``start_at``,
``end_at``, ``first_token_at``, ``ts_at``); ``JSON`` columns come back as dicts/lists in
pandas (see :mod:`agentlab.store.views`).
"""

from __future__ import annotations

import os
import re
import threading
import warnings
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.errors import NotARunError, UnknownNameError
from agentlab.store import duck
from agentlab.store._tables import DatasetState, TableCache, q, quote_str
from agentlab.store._writer import last_complete_line
from agentlab.store.agent_view import AgentView
from agentlab.store.catalog import CATALOG, ROW_COLUMNS, SPAN_COLUMNS
from agentlab.store.layout import COMPACT_NAME, REPLAY_DIR, SPANS, TRACE_DIR, shard_files
from agentlab.store.manifest import read_manifest
from agentlab.store.schema import infer_type, load_schema, merge_columns, schema_path
from agentlab.store.scratch import ScratchDir
from agentlab.store.summary import is_run
from agentlab.store.tail import _incomplete, read_tail
from agentlab.store.views import INTERNAL_SCHEMA, derived_columns, fetch_df, name_datasets

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Run", "open_run"]

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def open_run(path: str | Any) -> Run:
    """Open a run directory for reading.

    Raises:
        NotARunError: ``path`` is not a run directory (missing, empty, a folder of runs,
            a sweep — the message says which and what to open instead).
    """
    return Run(path)


class Run:
    """A run directory, read-only. See the module docstring for a tour.

    Attributes:
        path: the run directory.
        problems: messages about torn lines, stale compactions and other oddities: those
            visible without reading rows (a torn shard tail, a missing catalogue) from the
            moment the run is opened, the rest as queries meet them.
    """

    def __init__(self, path: str | Any) -> None:
        self.path = Path(path)
        if not is_run(self.path) or (self.path / "sweep.json").is_file():
            raise NotARunError.for_path(self.path)
        self.problems: list[str] = []
        self._seen: set[str] = set()
        self._lock = threading.RLock()
        self._con: Any = None
        self._release: weakref.finalize | None = None  # (detaches the connection's catalog)
        self._cache: TableCache | None = None
        self._schema: dict[str, Any] = {}
        self._schema_sig: tuple[int, int] | None = None
        self._scratch: ScratchDir | None = None  # DuckDB's table cache, made on first query
        self._check_at_open()

    # --- catalog ---------------------------------------------------------------------

    @property
    def manifest(self) -> dict[str, Any]:
        """``run.json`` (empty dict if missing)."""
        return read_manifest(self.path)

    def _check_at_open(self) -> None:
        """Fill :attr:`problems` with what needs no query to see: a missing or stale
        catalogue and shards that end in a partial line (a stat and a 1-byte read per
        shard); queries add what only reading the rows shows."""
        self._catalog()
        found = []
        dirs = [self.path / REPLAY_DIR / name for name in self._schema]
        for shard in [f for d in [*dirs, self.path / TRACE_DIR] for f in shard_files(d)]:
            try:
                with open(shard, "rb") as fh:
                    st = os.fstat(fh.fileno())
                    last = os.pread(fh.fileno(), 1, st.st_size - 1) if st.st_size else b"\n"
            except OSError:
                continue
            if last != b"\n":
                end, _ = last_complete_line(shard, st.st_size)
                found.append(_incomplete(shard, end, st.st_size, st.st_mtime))
        self._report(found)

    def _catalog(self) -> dict[str, Any]:
        p = schema_path(self.path)
        try:
            s = p.stat()
            sig: tuple[int, int] | None = (s.st_mtime_ns, s.st_size)
        except FileNotFoundError:
            sig = None
        if sig != self._schema_sig or not self._schema:
            self._schema = load_schema(self.path).get("datasets", {})
            self._schema_sig = sig
            self._recover_unlisted(sig is None)
        return self._schema

    def _recover_unlisted(self, missing: bool) -> None:
        """Catalogue datasets whose shards exist but ``_schema.json`` does not list.

        A lost or stale ``_schema.json`` must not hide data that is on disk: the columns
        come from the dataset catalogue where the name is known, else from the rows.
        """
        root = self.path / REPLAY_DIR
        try:
            names = sorted(e.name for e in os.scandir(root) if e.is_dir())
        except FileNotFoundError:
            return
        rebuilt = []
        for name in names:
            if name in self._schema or not shard_files(root / name):
                continue
            spec = CATALOG.get(name)
            cols: dict[str, str] = dict(spec.columns) if spec is not None else {}
            if spec is None or spec.open:
                for row in read_tail(root / name, None, limit=200).rows:
                    found = {k: t for k, v in row.items() if k not in ROW_COLUMNS
                             and (t := infer_type(v)) is not None}  # fmt: skip
                    cols = merge_columns(cols, found, dataset=name, strict=False)
            self._schema[name] = {"columns": cols, "description": "", "module": None}
            rebuilt.append(name)
        if rebuilt:
            what = "is missing" if missing else "does not list them"
            self._report([(
                f"{schema_path(self.path)} {what}: catalogued {', '.join(rebuilt)} from the "
                "shards (columns from agentlab.store.catalog, or inferred from the rows)",
                True,
            )])  # fmt: skip

    def dataset_names(self) -> list[str]:
        """Registered dataset names (plus ``spans`` when the run has a trace)."""
        names = sorted(self._catalog())
        if shard_files(self.path / TRACE_DIR):
            names.append(SPANS)
        return names

    def _dir_and_columns(self, dataset: str) -> tuple[Path, dict[str, str]]:
        if dataset == SPANS:
            return self.path / TRACE_DIR, {**SPAN_COLUMNS, **ROW_COLUMNS}
        entry = self._catalog().get(dataset)
        if entry is None:
            raise UnknownNameError("dataset", dataset, [*self._catalog(), SPANS])
        return self.path / REPLAY_DIR / dataset, {**entry.get("columns", {}), **ROW_COLUMNS}

    @property
    def datasets(self) -> pd.DataFrame:
        """One row per dataset: name, description, module, columns, shards, bytes, compacted."""
        import pandas as pd

        rows = []
        catalog = self._catalog()
        for name in self.dataset_names():
            d, cols = self._dir_and_columns(name)
            files = shard_files(d)
            entry = catalog.get(name, {"description": "finished trace spans", "module": None})
            rows.append({
                "name": name,
                "description": entry.get("description", ""),
                "module": entry.get("module"),
                "columns": {c: t for c, t in cols.items() if c not in ROW_COLUMNS},
                "shards": len(files),
                "bytes": sum(f.stat().st_size for f in files),
                "compacted": (d / COMPACT_NAME).exists(),
            })  # fmt: skip
        names = ["name", "description", "module", "columns", "shards", "bytes", "compacted"]
        return pd.DataFrame(rows, columns=names)

    # --- queries ---------------------------------------------------------------------

    @property
    def con(self) -> Any:
        """The DuckDB connection (in memory; views refresh on ``df``/``sql``)."""
        if self._con is None:
            self._con, name = duck.connect()  # (a cursor of the process's database)
            self._release = weakref.finalize(self, duck.release, self._con, name)
            if self._scratch is None:
                self._scratch = ScratchDir("agentlab-run")
            self._cache = TableCache(self._con, self._scratch.path)
        return self._con

    def _refresh(self, names: Sequence[str]) -> None:
        con = self.con
        assert self._cache is not None
        for name in names:
            d, cols = self._dir_and_columns(name)
            self._cache.refresh(self._cache.state(name, d, cols))
        del con
        self._report(self._cache.problems)
        self._cache.problems = []

    def _report(self, problems: Sequence[tuple[str, bool]]) -> None:
        for msg, warn in problems:
            if msg in self._seen:
                continue
            self._seen.add(msg)
            self.problems.append(msg)
            if warn:
                warnings.warn(msg, stacklevel=4)

    def sql(self, query: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        """Run SQL over the dataset views (each dataset is a view of the same name).

        ``select *`` shows the data columns and their ``*_at`` timestamps;
        ``internal.<dataset>`` adds ``_shard``/``_seq``. ``JSON`` columns come back as
        Python objects.
        """
        with self._lock:
            known = set(self.dataset_names())
            self._refresh([w for w in dict.fromkeys(_WORD.findall(query)) if w in known])
            try:
                return fetch_df(self.con.execute(query, list(params or [])))
            except Exception as exc:  # (DuckDB's CatalogException: duckdb loads lazily)
                name_datasets(exc, known)
                raise

    def df(
        self,
        dataset: str,
        where: str | Mapping[str, Any] | None = None,
        columns: Sequence[str] | None = None,
        limit: int | None = None,
        *,
        internal: bool = False,
    ) -> pd.DataFrame:
        """Rows of one dataset.

        Args:
            dataset: a name from :attr:`datasets` (``spans`` for the trace).
            where: a SQL condition, or ``{column: value}`` equality filters.
            columns: columns to return (default every declared column).
            limit: at most this many rows.
            internal: also return the writer's ``_shard``/``_seq`` columns.

        Epoch-second columns have a ``<col>_at`` UTC datetime twin; ``JSON`` columns hold
        dicts/lists.
        """
        with self._lock:
            _, cols = self._dir_and_columns(dataset)
            cols = derived_columns(cols)
            self._refresh([dataset])
            for c in columns or ():  # (as where's keys: DuckDB's BinderException said less)
                if c not in cols:
                    raise UnknownNameError(f"column of {dataset!r}", c, list(cols))
            sel = ", ".join(q(c) for c in columns) if columns else "*"
            view = f"{INTERNAL_SCHEMA}.{q(dataset)}" if internal else q(dataset)
            query, params = f"SELECT {sel} FROM {view}", []
            if isinstance(where, Mapping):
                for c in where:
                    if c not in cols:
                        raise UnknownNameError(f"column of {dataset!r}", c, list(cols))
                conds = [
                    f"{q(c)} IS NULL" if v is None else f"{q(c)} = ?" for c, v in where.items()
                ]
                params = [v for v in where.values() if v is not None]
                if conds:
                    query += " WHERE " + " AND ".join(conds)
            elif where:
                query += f" WHERE {where}"
            if limit is not None:
                query += f" LIMIT {int(limit)}"
            return fetch_df(self.con.execute(query, params))

    def _std(self, dataset: str) -> pd.DataFrame:
        import pandas as pd

        if dataset not in self.dataset_names():
            spec = CATALOG.get(dataset)
            return pd.DataFrame(columns=list(spec.columns) if spec is not None else [])
        return self.df(dataset)

    def spans_df(self) -> pd.DataFrame:
        """Finished spans with a ``duration`` column (seconds)."""
        import pandas as pd

        if SPANS not in self.dataset_names():
            return pd.DataFrame(columns=[*SPAN_COLUMNS, "duration"])
        out = self.df(SPANS)
        out["duration"] = out["end"] - out["start"]
        return out

    def llm_calls_df(self) -> pd.DataFrame:
        """The ``llm_calls`` dataset (``latency``/``ttft``/``total_tokens`` in seconds/tokens)."""
        out = self._std("llm_calls")
        # runs written before the catalogue carry only start/end/first_token
        if "latency" not in out and {"start", "end"} <= set(out.columns):
            out["latency"] = out["end"] - out["start"]
        if "ttft" not in out and {"start", "first_token"} <= set(out.columns):
            out["ttft"] = out["first_token"] - out["start"]
        return out

    def llm_attempts_df(self) -> pd.DataFrame:
        """Every LLM attempt with its ``kind`` (ok, rate_limit, timeout, malformed, error).

        ``llm_attempts`` holds the attempts of calls that were retried or failed; a call
        that succeeded at once is one ``ok`` attempt, added here from ``llm_calls``.
        """
        names = self.dataset_names()
        if "llm_calls" not in names:
            return self._std("llm_attempts")
        spec = CATALOG["llm_attempts"]
        cols = ", ".join(q(c) for c in spec.columns)
        first = (
            "SELECT request_id, 1 AS attempt, 'ok' AS kind, NULL AS error_class, NULL AS error, "
            '"start", "end", "end" - "start" AS latency, model, agent_id, run_id, tick, '
            "1 AS schema_version FROM llm_calls WHERE attempts = 1 AND outcome = 'ok'"
        )
        if "llm_attempts" in names:
            first += f" UNION ALL SELECT {cols} FROM llm_attempts"
        return self.sql(f"SELECT {cols} FROM ({first}) ORDER BY request_id, attempt")

    def of_finished_runs(self, df: pd.DataFrame) -> pd.DataFrame:
        """``df``'s rows of the sub-runs an experiment finished (the ``run_id`` values its
        ``experiment_runs`` records) and rows of no sub-run: the rows of a run a stop cut
        short stay in the log until the experiment is continued, and a study's tables
        counted that run, with its few calls, among its runs. ``df`` as it is when it has no
        ``run_id`` column."""
        if not len(df) or "run_id" not in df.columns:
            return df
        done = self._std("experiment_runs")
        ids = set(done["run_id"]) if "run_id" in done.columns else set()
        keep = df["run_id"].isna() | df["run_id"].isin(ids)
        return df if bool(keep.all()) else df[keep].reset_index(drop=True)

    def messages_df(self) -> pd.DataFrame:
        """The ``messages`` dataset (empty frame with the standard columns if absent)."""
        return self._std("messages")

    def timeline_df(self) -> pd.DataFrame:
        """The ``timeline`` dataset, one row per committed tick."""
        out = self._std("timeline")
        return out.sort_values("tick", kind="stable").reset_index(drop=True) if len(out) else out

    def agent(self, agent_id: str) -> AgentView:
        """One agent's workspace files and its rows in every dataset with ``agent_id``."""
        return AgentView(self, agent_id)

    # --- live reading ----------------------------------------------------------------

    def tail(
        self,
        dataset: str,
        cursor: dict[str, int] | None = None,
        *,
        limit: int | None = None,
        as_frame: bool = True,
    ) -> tuple[Any, dict[str, int]]:
        """New rows of ``dataset`` since ``cursor`` → ``(rows, new_cursor)``.

        Start with ``cursor=None``. Only complete lines are returned, so calling this in a
        loop while writers append never skips and never repeats a row (see
        :mod:`agentlab.store.tail`). ``rows`` is a DataFrame, or a list of dicts with
        ``as_frame=False``.
        """
        d, cols = self._dir_and_columns(dataset)
        res = read_tail(d, cursor, limit=limit)
        self._report(res.problems)
        if not as_frame:
            return res.rows, res.cursor
        import pandas as pd

        frame = pd.DataFrame(res.rows)
        for c in cols:
            if c not in frame:
                frame[c] = None
        return frame, res.cursor

    # --- derived files ---------------------------------------------------------------

    def compact(self, datasets: Sequence[str] | None = None) -> dict[str, int]:
        """Write ``_compact.parquet`` per dataset; returns rows written per dataset.

        The file records the shard offsets it covers, so readers (in any process) read the
        Parquet plus only the JSONL appended since. This is the one method that writes into
        the run directory (atomically, derived data only).
        """
        from agentlab.store.compact import compact_dataset

        with self._lock:
            out = {}
            for name in datasets or self.dataset_names():
                self._refresh([name])
                assert self._cache is not None
                st: DatasetState = self._cache.states[name]
                out[name] = compact_dataset(self.con, st)
                self._cache._reset(st)
            return out

    def export_parquet(
        self, directory: str | Any, datasets: Sequence[str] | None = None
    ) -> dict[str, Path]:
        """Write ``<directory>/<dataset>.parquet`` per dataset (``spans`` included).

        Each file holds what :meth:`df` returns (no ``_shard``/``_seq``; ``*_at`` columns as
        UTC timestamps; ``JSON`` columns as JSON text), written by DuckDB's ``COPY``, so
        pandas (with pyarrow), pyarrow, polars or DuckDB read it without agentlab. Each file
        is written to a temp name and renamed. Returns ``{dataset: path}``.
        """
        out_dir = Path(directory)
        out_dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            names = list(datasets) if datasets else self.dataset_names()
            for name in names:
                self._dir_and_columns(name)  # an unknown name fails before anything is written
            written = {}
            for name in names:
                self._refresh([name])
                target = out_dir / f"{name}.parquet"
                tmp = out_dir / f".{name}.parquet.{os.getpid()}.tmp"
                try:
                    self.con.execute(
                        f"COPY (SELECT * FROM {q(name)}) TO {quote_str(str(tmp))} "
                        "(FORMAT parquet, COMPRESSION zstd)"
                    )
                    os.replace(tmp, target)
                finally:
                    tmp.unlink(missing_ok=True)
                written[name] = target
            return written

    def export_otlp(
        self,
        path: str | Any = None,
        *,
        format: str = "json",
        endpoint: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> int:
        """Write the spans to ``path`` as OTLP (``format="json"`` or ``"protobuf"``) and/or
        push them to an OTLP/HTTP ``endpoint`` (protobuf, e.g. ``http://127.0.0.1:6006``;
        ``/v1/traces`` is appended unless given); returns the number of spans."""
        from agentlab.errors import ConfigError
        from agentlab.store.otlp import push_otlp, write_otlp

        if path is None and endpoint is None:
            raise ConfigError("export_otlp needs a path and/or an endpoint")
        res = read_tail(self.path / TRACE_DIR, None)
        self._report(res.problems)
        n = 0
        if path is not None:
            n = write_otlp(res.rows, Path(path), manifest=self.manifest, fmt=format)
        if endpoint is not None:
            n = push_otlp(res.rows, endpoint, manifest=self.manifest, headers=headers)
        return n

    def close(self) -> None:
        """Release the DuckDB connection and temp files."""
        with self._lock:
            if self._release is not None:
                self._release()
                self._con, self._cache, self._release = None, None, None
            if self._scratch is not None:
                self._scratch.close()
                self._scratch = None

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"
