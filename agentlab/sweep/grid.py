"""Parameter grids: expansion, stable point ids, and CLI value parsing."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentlab.errors import ConfigError

__all__ = ["expand_grid", "parse_param_args", "parse_value", "point_id"]

Grid = Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Any]]


def expand_grid(grid: Grid) -> list[dict[str, Any]]:
    """A dict of lists → its cartesian product; a list of dicts → itself (copied).

    Order is deterministic: the product follows the dict's key order, last key fastest.
    Duplicate points are an error (they would share one output directory).
    """
    if isinstance(grid, Mapping):
        for k, v in grid.items():
            if isinstance(v, str | bytes) or not isinstance(v, Sequence):
                raise ConfigError(f"grid value for {k!r} must be a list of values, got {v!r}")
            if len(v) == 0:
                raise ConfigError(f"grid value for {k!r} is empty; give at least one value")
        keys = list(grid)
        points = [
            dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())
        ]
    elif isinstance(grid, Sequence) and not isinstance(grid, str | bytes):
        points = []
        for i, p in enumerate(grid):
            if not isinstance(p, Mapping):
                raise ConfigError(f"grid point {i} must be a dict of parameters, got {p!r}")
            points.append(dict(p))
    else:
        raise ConfigError(
            f"grid must be a dict of lists or a list of dicts, got {type(grid).__name__}"
        )
    ids = [point_id(p) for p in points]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ConfigError(f"grid has duplicate points: {', '.join(dupes)}")
    return points


def _slug(value: Any) -> str:
    s = re.sub(r"[^A-Za-z0-9.\-]+", "-", str(value)).strip("-")
    return s[:24] or "x"


def point_id(params: Mapping[str, Any]) -> str:
    """A readable, stable directory name for one point: ``k1=v1_k2=v2-<hash8>``."""
    canon = json.dumps(params, sort_keys=True, default=str)
    digest = hashlib.sha1(canon.encode()).hexdigest()[:8]
    readable = "_".join(f"{_slug(k)}={_slug(v)}" for k, v in sorted(params.items()))
    return f"{readable[:80]}-{digest}" if readable else digest


def parse_value(text: str) -> Any:
    """CLI text → int, float, bool, None or str (JSON literals also accepted)."""
    low = text.strip().lower()
    if low in {"true", "false"}:
        return low == "true"
    if low in {"none", "null"}:
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    if text[:1] in '[{"':
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass
    return text


def parse_param_args(items: Sequence[str], *, multi: bool = True) -> dict[str, Any]:
    """``["topology=a,b", "agents=3,4"]`` → ``{"topology": ["a","b"], "agents": [3,4]}``.

    With ``multi=False`` each value is a single scalar (for ``agentlab paper -p``).
    """
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"parameter {item!r} must look like NAME=VALUE[,VALUE...]")
        name, _, raw = item.partition("=")
        name = name.strip()
        if not name.isidentifier():
            raise ConfigError(f"parameter name {name!r} is not a valid Python identifier")
        out[name] = [parse_value(v) for v in raw.split(",")] if multi else parse_value(raw)
    return out
