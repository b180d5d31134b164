"""``agentlab.record``: how a notebook reports values, tables and figures to its run.

Inside a sweep point or ``agentlab paper``, the environment variable ``AGENTLAB_RUN_DIR``
names the point's output directory; values go to ``results.jsonl`` there (one JSON line
per call, so a crash keeps what was recorded before). Outside a sweep they are kept in
memory (``recorded()``), so the same notebook runs interactively unchanged.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "current_output_dir",
    "read_results",
    "record",
    "record_figure",
    "record_table",
    "recorded",
]

_MEMORY: dict[str, Any] = {}
RESULTS_FILE = "results.jsonl"


def current_output_dir() -> Path | None:
    """The directory a sweep/paper gave this notebook, or ``None`` when interactive."""
    d = os.environ.get("AGENTLAB_RUN_DIR")
    return Path(d) if d else None


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    json.dumps(value)  # raises TypeError for unsupported values, with the type in the message
    return value


def _append(kind: str, name: str, payload: Any) -> None:
    out = current_output_dir()
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"kind": kind, "name": name, "value": payload, "ts": time.time()}) + "\n"
    # One O_APPEND write per record: whole lines even if the kernel dies mid-notebook.
    fd = os.open(out / RESULTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def record(name: str, value: Any) -> Any:
    """Record a scalar (or small JSON value) under ``name``; returns ``value`` unchanged."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"record name must be a non-empty string, got {name!r}")
    try:
        payload = _jsonable(value)
    except TypeError as exc:
        raise ConfigError(
            f"record({name!r}): value of type {type(value).__name__} is not "
            "JSON-serialisable; record numbers/strings, or use record_table"
        ) from exc
    _MEMORY[name] = payload
    _append("value", name, payload)
    return value


def record_table(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """Record a DataFrame as ``tables/<name>.csv`` next to the results; returns ``df``."""
    _MEMORY[name] = df
    out = current_output_dir()
    if out is not None:
        (out / "tables").mkdir(parents=True, exist_ok=True)
        df.to_csv(out / "tables" / f"{name}.csv", index=True)
        _append("table", name, f"tables/{name}.csv")
    return df


def record_figure(name: str, fig: Any) -> Any:
    """Record a plotly figure as ``figures/<name>.json`` (its data, for reproducibility checks)."""
    _MEMORY[name] = fig
    out = current_output_dir()
    if out is not None:
        (out / "figures").mkdir(parents=True, exist_ok=True)
        (out / "figures" / f"{name}.json").write_text(fig.to_json())
        _append("figure", name, f"figures/{name}.json")
    return fig


def recorded() -> dict[str, Any]:
    """Everything recorded in this process (interactive use)."""
    return dict(_MEMORY)


def read_results(point_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The last recorded value per name in a point directory (tables/figures as paths)."""
    path = Path(point_dir) / RESULTS_FILE
    out: dict[str, Any] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line after a crash
        out[row["name"]] = row["value"]
    return out
