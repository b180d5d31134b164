"""Small datasets shipped with agentlab: personas and the topology task pool.

    >>> from agentlab import datasets
    >>> datasets.available()
    ['personas', 'topology_tasks']
    >>> personas = datasets.load("personas")      # list[dict], validated

Files live in the repository's ``datasets/`` folder (editable installs) or in
``agentlab/_datasets`` inside a wheel (pyproject force-includes ``datasets`` there). Their
fields and provenance are documented in ``datasets/README.md``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from agentlab.datasets.models import BigFive, Persona, TopologyTask
from agentlab.errors import CorruptRecordError, StoreError, UnknownNameError

__all__ = [
    "BigFive",
    "Persona",
    "TopologyTask",
    "available",
    "data_dir",
    "load",
    "load_models",
    "path",
]


@dataclass(frozen=True)
class _Dataset:
    filename: str
    model: type[BaseModel] | None  # None: a directory (e.g. a reference run), not rows


_DATASETS: dict[str, _Dataset] = {
    "personas": _Dataset("personas.jsonl", Persona),
    "topology_tasks": _Dataset("topology_tasks.jsonl", TopologyTask),
    # added by the lead: a small run directory for reader tests and the replay notebook
    "reference_run": _Dataset("reference_run", None),
}


def data_dir() -> Path:
    """The folder holding the dataset files (wheel layout first, then the source tree)."""
    here = Path(__file__).resolve().parent.parent  # .../agentlab
    for candidate in (here / "_datasets", here.parent / "datasets"):
        if candidate.is_dir():
            return candidate
    raise StoreError(
        f"agentlab's datasets folder is missing (looked in {here / '_datasets'} and "
        f"{here.parent / 'datasets'}); reinstall agentlab"
    )


def _entry(name: str) -> _Dataset:
    entry = _DATASETS.get(name)
    if entry is None:
        raise UnknownNameError("dataset", name, list(_DATASETS))
    return entry


def path(name: str) -> Path:
    """Where dataset ``name`` lives on disk.

    Raises:
        UnknownNameError: listing the known dataset names.
        StoreError: the dataset is known but not installed.
    """
    entry = _entry(name)
    p = data_dir() / entry.filename
    if not p.exists():
        raise StoreError(f"dataset {name!r} is not installed (expected at {p})")
    return p


def available() -> list[str]:
    """Names of the datasets present in this installation, sorted."""
    try:
        root = data_dir()
    except StoreError:
        return []
    return sorted(n for n, d in _DATASETS.items() if (root / d.filename).exists())


@lru_cache(maxsize=8)
def _load_validated(p: str, mtime_ns: int, name: str) -> str:
    # cache the validated file text; callers get fresh dicts by parsing it again
    entry = _DATASETS[name]
    assert entry.model is not None
    text = Path(p).read_text(encoding="utf-8")
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry.model.model_validate_json(line)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise CorruptRecordError(
                f"{p}:{i}: not a valid {entry.model.__name__}: {problems}"
            ) from None
    return text


def load(name: str) -> list[dict[str, Any]]:
    """Rows of dataset ``name`` as plain dicts, validated against its schema.

    Each call returns new objects, so callers may mutate them freely.

    Raises:
        UnknownNameError: listing the known dataset names.
        CorruptRecordError: a row does not match the schema.
    """
    entry = _entry(name)
    p = path(name)
    if entry.model is None:
        raise StoreError(f"dataset {name!r} is a directory ({p}); use datasets.path({name!r})")
    text = _load_validated(str(p), p.stat().st_mtime_ns, name)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_models(name: str) -> list[Any]:
    """Rows of dataset ``name`` as pydantic model instances (``Persona``, ``TopologyTask``)."""
    entry = _entry(name)
    if entry.model is None:
        raise StoreError(f"dataset {name!r} is a directory; use datasets.path({name!r})")
    return [entry.model.model_validate(r) for r in load(name)]
