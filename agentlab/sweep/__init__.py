"""Sweeps: a parameterised notebook over a grid, each point a complete run directory.

``sweep(notebook, grid, out=..., executor="ray"|"local")`` runs points with papermill (a
child process per point, as Ray tasks or a local pool); ``record(name, value)`` is how a
notebook reports results; ``Sweep.df()`` collects one row per point.
"""

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
