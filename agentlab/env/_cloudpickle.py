"""cloudpickle without ``import ray``: Ray vendors cloudpickle as one stdlib-only file.

``import ray.cloudpickle`` runs ``ray/__init__`` (3-10 s here), so when the standalone
``cloudpickle`` package is not installed this module executes Ray's vendored
``ray/cloudpickle/cloudpickle.py`` in its own namespace. Pickles made this way reference
``agentlab.env._cloudpickle`` helpers, importable wherever agentlab is.
"""
# ruff: noqa

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.find_spec("ray")  # finds the package without importing it
if _spec is None or _spec.origin is None:
    raise ImportError(
        "pickling a notebook-defined class needs cloudpickle: pip install cloudpickle "
        "(or agentlab[ray])"
    )
_path = Path(_spec.origin).parent / "cloudpickle" / "cloudpickle.py"
exec(compile(_path.read_text(), str(_path), "exec"), globals())
