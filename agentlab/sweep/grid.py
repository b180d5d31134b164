"""Parameter grids: expansion, stable point ids, and CLI value parsing."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentlab.errors import ConfigError

__all__ = [
    "check_params",
    "expand_grid",
    "load_params_file",
    "notebook_defaults",
    "parse_param_args",
    "parse_value",
    "point_id",
]

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
    """CLI text → a YAML value (papermill's ``-y`` semantics): ``3`` → int, ``0.5`` →
    float, ``true``/``false`` → bool, ``null`` → None, ``[a, b]`` → list, ``{k: v}`` →
    dict; anything else stays the string it is."""
    import yaml

    try:
        return yaml.safe_load(text) if text.strip() else text
    except yaml.YAMLError:
        return text


def _grid_values(name: str, raw: str) -> list[Any]:
    """The grid values of ``NAME=RAW``: a YAML list gives its items; ``a,b`` or
    ``["a","b"],["c"]`` (top-level commas) give one value per item; else one value."""
    import yaml

    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        value = _NOT_YAML
    if isinstance(value, list):
        return value
    if "," in raw:
        try:
            items = yaml.safe_load(f"[{raw}]")  # top-level commas separate values
        except yaml.YAMLError as exc:
            raise ConfigError(
                f"parameter {name}={raw!r} is not a YAML value or list: {exc}"
            ) from exc
        if isinstance(items, list):
            return items
    if value is _NOT_YAML:
        raise ConfigError(f"parameter {name}={raw!r} is not a YAML value")
    return [value]


_NOT_YAML = object()


def parse_param_args(items: Sequence[str], *, multi: bool = True) -> dict[str, Any]:
    """``-p`` arguments → parameters; values are YAML.

    With ``multi=True`` (sweeps) each parameter maps to its list of grid values:
    ``agents=3,4`` / ``agents=[3, 4]`` → ``[3, 4]``; ``topologies=["a","b"],["c"]`` →
    ``[["a", "b"], ["c"]]``; ``seed=0`` → ``[0]``. With ``multi=False`` (``agentlab
    paper``) each value is one YAML value: ``topologies=[a, b]`` → ``["a", "b"]``.
    """
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"parameter {item!r} must look like NAME=VALUE")
        name, _, raw = item.partition("=")
        name = name.strip()
        if not name.isidentifier():
            raise ConfigError(f"parameter name {name!r} is not a valid Python identifier")
        out[name] = _grid_values(name, raw) if multi else parse_value(raw)
    return out


def load_params_file(path: str, *, multi: bool = True) -> dict[str, Any]:
    """A YAML (or JSON) file of ``name: value`` → parameters. With ``multi=True`` a
    list value is the parameter's grid values and a scalar is one value."""
    from pathlib import Path

    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--params file {path!r} does not exist")
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"--params file {path!r} is not valid YAML: {exc}") from exc
    if doc is None:
        return {}
    if not isinstance(doc, dict) or not all(isinstance(k, str) for k in doc):
        raise ConfigError(f"--params file {path!r} must map parameter names to values")
    if not multi:
        return dict(doc)
    return {k: v if isinstance(v, list) else [v] for k, v in doc.items()}


def notebook_defaults(notebook: Any) -> dict[str, Any]:
    """The default values of a notebook's ``parameters`` cell (literals evaluated, other
    expressions as their source), read with Python's own parser: papermill's line regex
    dropped a parameter whose comment held a quote pair (``run_dir = ""  # "" = ...``,
    notebook 05's first line: ``-p run_dir=...`` was refused as unknown) or whose value
    spans lines. A cell Python cannot parse (an IPython magic) goes to papermill's."""
    import ast

    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    cell = next((c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])),
                None)  # fmt: skip
    if cell is None:
        return {}
    try:
        tree = ast.parse(cell.source)
    except SyntaxError:
        return _papermill_defaults(notebook)
    out: dict[str, Any] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
        )  # fmt: skip
        for t in targets:
            if isinstance(t, ast.Name):
                value = node.value  # type: ignore[union-attr]
                try:
                    out[t.id] = ast.literal_eval(value)
                except (ValueError, SyntaxError, TypeError):
                    out[t.id] = ast.get_source_segment(cell.source, value)
    return out


def _papermill_defaults(notebook: Any) -> dict[str, Any]:
    import ast

    import papermill

    out: dict[str, Any] = {}
    for name, info in papermill.inspect_notebook(str(notebook)).items():
        try:
            out[name] = ast.literal_eval(info["default"])
        except (ValueError, SyntaxError):
            out[name] = info["default"]
    return out


def check_params(notebook: Any, names: Iterable[str]) -> None:
    """Refuse parameters the notebook's ``parameters`` cell does not define (papermill
    would inject them silently, and a typo would run the defaults)."""
    import papermill  # noqa: F401 - what runs the notebook: a missing extra is said first

    known = notebook_defaults(notebook)
    unknown = sorted(set(names) - set(known))
    if unknown:
        valid = ", ".join(sorted(known)) or "(none: the notebook has no parameters cell)"
        raise ConfigError(
            f"unknown parameter(s) {', '.join(unknown)} for {notebook}; valid: {valid}"
        )
