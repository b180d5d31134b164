"""The dataset catalog ``replay/_schema.json``: column types, descriptions, owners.

Registration merges into the file under an exclusive ``fcntl`` lock and replaces it
atomically, so writers in many processes can register concurrently and a reader never
sees a half-written catalog. Types are DuckDB type names from a small set (see
:data:`COLUMN_TYPES`); a list type is written ``VARCHAR[]``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from agentlab.errors import ConfigError
from agentlab.store.atomic import atomic_write_bytes, read_json
from agentlab.store.catalog import ROW_COLUMNS, SPAN_COLUMNS
from agentlab.store.layout import REPLAY_DIR, SCHEMA_NAME, validate_dataset

__all__ = [
    "COLUMN_TYPES",
    "ROW_COLUMNS",
    "SCHEMA_VERSION",
    "SPAN_COLUMNS",
    "infer_type",
    "load_schema",
    "merge_columns",
    "normalize_type",
    "register_dataset",
]

SCHEMA_VERSION = 1

#: accepted column types; aliases on the right map to the DuckDB name on the left
COLUMN_TYPES: dict[str, tuple[str, ...]] = {
    "VARCHAR": ("str", "string", "text"),
    "BIGINT": ("int", "integer", "int64"),
    "DOUBLE": ("float", "float64", "real"),
    "BOOLEAN": ("bool",),
    "JSON": ("json", "dict", "object", "any"),
}
_ALIASES = {a.upper(): t for t, names in COLUMN_TYPES.items() for a in (t, *names)}
_ALIASES["INTEGER"] = "BIGINT"


def normalize_type(t: str) -> str:
    """``"int"`` → ``"BIGINT"``, ``"str[]"`` → ``"VARCHAR[]"``; raise on unknown types."""
    raw = str(t).strip()
    is_list = raw.endswith("[]")
    base = _ALIASES.get(raw[:-2].strip().upper() if is_list else raw.upper())
    if base is None or (is_list and base == "JSON"):
        valid = ", ".join(sorted(COLUMN_TYPES)) + " (or a list of a scalar type, e.g. VARCHAR[])"
        raise ConfigError(f"unknown column type {t!r}; valid: {valid}")
    return base + "[]" if is_list else base


def infer_type(value: Any) -> str | None:
    """The column type for a Python value; ``None`` for ``None`` (decide later)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        return "BIGINT"
    if isinstance(value, float):
        return "DOUBLE"
    if isinstance(value, str):
        return "VARCHAR"
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return "VARCHAR[]"
    return "JSON"


def merge_columns(
    old: Mapping[str, str], new: Mapping[str, str], *, dataset: str, strict: bool = True
) -> dict[str, str]:
    """Union of two column maps; BIGINT widens to DOUBLE; other conflicts raise if strict."""
    out = dict(old)
    for name, t in new.items():
        have = out.get(name)
        if have is None or have == t:
            out[name] = t
        elif {have, t} == {"BIGINT", "DOUBLE"}:
            out[name] = "DOUBLE"
        elif strict:
            raise ConfigError(
                f"dataset {dataset!r} column {name!r} is registered as {have}; "
                f"cannot re-register it as {t}"
            )
    return out


def schema_path(run_dir: Path) -> Path:
    return run_dir / REPLAY_DIR / SCHEMA_NAME


def load_schema(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The catalog document (``{"schema_version", "datasets": {name: entry}}``)."""
    doc = read_json(schema_path(Path(run_dir)), default=None)
    if not isinstance(doc, dict):
        return {"schema_version": SCHEMA_VERSION, "datasets": {}}
    doc.setdefault("datasets", {})
    return doc


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def register_dataset(
    run_dir: Path,
    dataset: str,
    columns: Mapping[str, str],
    *,
    description: str | None = None,
    module: str | None = None,
    strict: bool = True,
) -> dict[str, str]:
    """Merge one dataset's entry into the catalog; returns the merged column map."""
    validate_dataset(dataset)
    cols = {}
    for name, t in columns.items():
        if name in ROW_COLUMNS:
            raise ConfigError(f"column name {name!r} is reserved (every row carries it)")
        cols[str(name)] = normalize_type(t)
    path = schema_path(run_dir)
    with _locked(path.with_name(".schema.lock")):
        doc = load_schema(run_dir)
        doc["schema_version"] = SCHEMA_VERSION
        entry = doc["datasets"].get(dataset) or {"columns": {}, "created": time.time()}
        merged = merge_columns(entry.get("columns", {}), cols, dataset=dataset, strict=strict)
        changed = merged != entry.get("columns")
        entry["columns"] = merged
        if description and entry.get("description") != description:
            entry["description"], changed = description, True
        if module and entry.get("module") != module:
            entry["module"], changed = module, True
        entry.setdefault("description", "")
        entry.setdefault("module", None)
        if changed or dataset not in doc["datasets"]:
            doc["datasets"][dataset] = entry
            # orjson keeps column order (atomic_write_json would sort the keys)
            atomic_write_bytes(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2), fsync=False)
    return merged
