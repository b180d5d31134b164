"""``sql_over_runs``: one DuckDB query over the run logs of many runs (a sweep's points).

```python
sql_over_runs({"lr=0.1": "out/p1/run", "lr=0.2": "out/p2/run"},
              "select point, count(*) n from llm_calls group by point order by point")
```

Every dataset the query names becomes a view that unions that dataset over all runs that
have it (``UNION ALL BY NAME``, so runs may differ in columns), with a leading ``point``
column holding the mapping key. Each run's part is read exactly as :meth:`Run.sql` reads it
(Parquet compaction plus newer JSONL, torn lines skipped and reported as warnings).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentlab.errors import ConfigError
from agentlab.store import duck
from agentlab.store._tables import TableCache, q, quote_str
from agentlab.store.run import Run
from agentlab.store.scratch import ScratchDir
from agentlab.store.views import fetch_df, name_datasets

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["POINT_COLUMN", "sql_over_runs"]

#: name of the column that says which run a row came from
POINT_COLUMN = "point"
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def sql_over_runs(
    run_dirs: Mapping[str, str | os.PathLike[str]],
    query: str,
    params: Sequence[Any] | None = None,
    *,
    tables: Mapping[str, pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """Run ``query`` over the union of many runs' datasets.

    Args:
        run_dirs: ``{point: run directory}``; the key becomes the ``point`` column.
        query: DuckDB SQL; each dataset (and ``spans``) is a view over all runs. A run's own
            column named ``point`` is hidden by the key column.
        params: positional ``?`` parameters.
        tables: more tables for the query, ``{name: DataFrame}`` (a sweep's ``points``:
            each run's parameters); a name may not be a dataset's.

    Returns:
        The query result as a DataFrame (views as in :meth:`Run.sql`: no ``_shard``/``_seq``,
        ``*_at`` timestamps, ``JSON`` columns as Python objects).

    Raises:
        StoreError: a run directory does not exist.
        ConfigError: ``run_dirs`` is empty.
    """
    if not run_dirs:
        raise ConfigError("sql_over_runs needs at least one run directory; got an empty mapping")
    runs = {str(k): Run(v) for k, v in run_dirs.items()}
    words = set(_WORD.findall(query))
    tmp = ScratchDir("agentlab-runs")  # DuckDB's table cache
    con, catalog = duck.connect()
    try:
        cache = TableCache(con, tmp.path)
        parts: dict[str, list[str]] = {}
        for i, (point, run) in enumerate(runs.items()):
            for name in run.dataset_names():
                if name not in words:
                    continue  # only what the query can reference is read
                directory, columns = run._dir_and_columns(name)
                st = cache.state(f"_r{i}_{name}", directory, columns)
                cache.refresh(st)
                hide = f" EXCLUDE ({q(POINT_COLUMN)})" if POINT_COLUMN in columns else ""
                parts.setdefault(name, []).append(
                    f"SELECT {quote_str(point)} AS {q(POINT_COLUMN)}, *{hide} FROM {q(st.name)}"
                )
        for name, selects in parts.items():
            con.execute(f"CREATE VIEW {q(name)} AS " + " UNION ALL BY NAME ".join(selects))
        for name, frame in (tables or {}).items():
            if name in parts:
                raise ConfigError(f"table {name!r} would hide the dataset of that name")
            con.register(name, frame)
        seen: set[str] = set()
        for msg, warn in cache.problems:
            if warn and msg not in seen:
                seen.add(msg)
                warnings.warn(msg, stacklevel=2)
        try:
            return fetch_df(con.execute(query, list(params or [])))
        except Exception as exc:  # (a misspelt dataset: DuckDB's CatalogException)
            names = {n for run in runs.values() for n in run.dataset_names()}
            name_datasets(exc, names | set(tables or {}))
            raise
    finally:
        duck.release(con, catalog)
        tmp.close()
        for run in runs.values():
            run.close()
