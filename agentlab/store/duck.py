"""One DuckDB database per process, shared by every open run: each run's connection is a
cursor of it with an in-memory catalog of its own attached and made its default.

``duckdb.connect(":memory:")`` starts a database instance: 12 ms here, and its close 3 ms
more, on every ``open_run``. A folder report over 330 small runs spent half its time
there. A cursor of one shared instance with an attached in-memory catalog costs ~1 ms and
keeps what a run creates apart as well: tables, views and schemas live in its catalog (a
view binds to its own catalog's tables), registered frames and settings such as
``TimeZone`` belong to its connection. Releasing it detaches the catalog, which frees its
memory; a run left unclosed is released when it is collected (``weakref.finalize``), as a
connection of its own would have been. What a run's queries and ``SHOW TABLES`` see is its
own catalog; DuckDB's catalog listings (``duckdb_tables()``, ``information_schema``) name
the other open runs' catalogs too.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any

__all__ = ["connect", "release"]

_lock = threading.Lock()
_base: tuple[int, Any] | None = None  # (pid, the database's first connection)
_names = itertools.count(1)


def _database() -> Any:
    """The shared database's connection (a new one in a forked child: DuckDB's threads and
    locks do not survive a fork)."""
    global _base
    if _base is None or _base[0] != os.getpid():
        import duckdb

        _base = (os.getpid(), duckdb.connect(":memory:"))
    return _base[1]


def connect() -> tuple[Any, str]:
    """A connection whose default catalog is a fresh, empty in-memory one; its name."""
    with _lock:  # (a connection is not thread-safe; cursor() of it under the lock)
        cur = _database().cursor()
        name = f"run_{next(_names)}"
    cur.execute(f"ATTACH ':memory:' AS {name}")
    cur.execute(f"USE {name}")
    return cur, name


def release(cur: Any, name: str) -> None:
    """Close ``cur`` and drop its catalog (everything in it), from a cursor of our own: a
    caller may have closed ``cur`` already or left it inside a failed transaction."""
    cur.close()
    with _lock:
        if _base is None or _base[0] != os.getpid():
            return  # (the database went with the parent process)
        own = _base[1].cursor()
    try:
        own.execute(f"DETACH DATABASE IF EXISTS {name}")
    finally:
        own.close()
