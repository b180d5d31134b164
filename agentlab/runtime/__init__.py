"""Layer 5 — runtime: ``Society`` (ticks, local/Ray executors, resume), ``RunServices``.

See ``README.md`` in this directory. Ray is imported only when the Ray executor is used.
"""

from __future__ import annotations

from typing import Any

from agentlab.runtime.batch import (
    AgentSpec,
    AgentSpecs,
    BatchResult,
    BatchSpec,
    RetryPolicy,
    step_agent_batch,
)
from agentlab.runtime.executors import LocalExecutor, RayExecutor, make_executor
from agentlab.runtime.proxy import ServiceProxy
from agentlab.runtime.recorded import Recording, recorded_run
from agentlab.runtime.services import AgentContext, RecordingLLM, RunServices, derive_seed
from agentlab.runtime.society import Society

__all__ = [
    "AgentContext",
    "AgentSpec",
    "AgentSpecs",
    "AgentSystem",
    "BatchResult",
    "BatchSpec",
    "LocalExecutor",
    "RayExecutor",
    "Recording",
    "RecordingLLM",
    "RetryPolicy",
    "RunServices",
    "ServiceProxy",
    "Society",
    "derive_seed",
    "make_executor",
    "recorded_run",
    "step_agent_batch",
]

# --- re-exports of agentlab.runtime.threads (suspendable agents; another module's area) ---
# Loaded lazily so that this package imports even while `threads` is absent or half-written.
_LAZY = {"AgentSystem": "agentlab.runtime.threads"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentlab.runtime' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
