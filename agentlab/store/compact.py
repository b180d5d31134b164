"""Parquet compaction of one dataset: ``<dir>/_compact.parquet``.

The file is written to a temp name and renamed, and it carries its own coverage in the
Parquet key-value metadata (``agentlab`` → ``{"schema_version", "offsets": {shard: bytes},
"rows"}``), so a reader can never pair a new Parquet file with old offsets. Rows are sorted
by ``(_shard, _seq)``.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from agentlab.store._tables import (
    COMPACT_META_KEY,
    COMPACT_SCHEMA_VERSION,
    DatasetState,
    q,
    quote_str,
)
from agentlab.store.layout import COMPACT_NAME

__all__ = ["compact_dataset"]


def compact_dataset(con: Any, st: DatasetState) -> int:
    """Write the refreshed rows of ``st.name`` (as stored) to Parquet; returns the number of rows."""
    target = st.directory / COMPACT_NAME
    if not st.directory.is_dir():
        return 0
    (n,) = con.execute(f"SELECT count(*) FROM {q(st.source)}").fetchone()
    meta = orjson.dumps(
        {"schema_version": COMPACT_SCHEMA_VERSION, "offsets": st.covered, "rows": int(n)}
    ).decode()
    tmp = st.directory / f".{COMPACT_NAME}.{os.getpid()}.tmp"
    try:
        con.execute(
            f"COPY (SELECT * FROM {q(st.source)} ORDER BY _shard, _seq) TO {quote_str(str(tmp))} "
            f"(FORMAT parquet, COMPRESSION zstd, "
            f"KV_METADATA {{{COMPACT_META_KEY}: {quote_str(meta)}}})"
        )
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return int(n)
