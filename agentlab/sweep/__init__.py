"""Sweeps: a parameterised notebook over a grid, each point a complete run directory.

``sweep(notebook, grid, out=..., executor="ray"|"local")`` runs points with papermill (a
child process per point, as Ray tasks or a local pool); ``record(name, value)`` is how a
notebook reports results; ``Sweep.df()`` collects one row per point.

``agentlab.sweep`` names both this package and its function: the package is callable
(``agentlab.sweep(nb, grid, out=...)``, ``from agentlab import sweep; sweep(...)``) and
keeps its attributes (``agentlab.sweep.current_output_dir()``), whatever was imported
first. Before, the first import decided: after ``from agentlab import record``, ``from
agentlab import sweep`` gave a module that could not be called; otherwise
``agentlab.sweep.current_output_dir`` was an attribute of a function.
"""

import inspect
import sys
import types
from typing import Any

from agentlab.sweep.grid import expand_grid, parse_param_args, point_id
from agentlab.sweep.results import (
    current_output_dir,
    read_results,
    record,
    record_figure,
    record_table,
    recorded,
)
from agentlab.sweep.sweep import Sweep, open_sweep, sweep

__all__ = [
    "Sweep",
    "current_output_dir",
    "expand_grid",
    "open_sweep",
    "parse_param_args",
    "point_id",
    "read_results",
    "record",
    "record_figure",
    "record_table",
    "recorded",
    "sweep",
]


class _CallableSweepPackage(types.ModuleType):
    """This package, callable as :func:`~agentlab.sweep.sweep.sweep` (module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Sweep:
        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableSweepPackage
__signature__ = inspect.signature(sweep)  # (what `agentlab.sweep?` shows in a notebook)
