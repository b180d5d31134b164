"""agentlab — simulate societies of LLM agents and measure the traffic they generate.

The top level is deliberately light: ``import agentlab`` loads no litellm, Ray, DuckDB,
plotly or Jupyter machinery. Each public name below is imported on first use.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it (imported lazily on first attribute access)
_EXPORTS: dict[str, str] = {
    "LLMClient": "agentlab.llm",
    "VirtualClock": "agentlab.core.clock",
    "RealClock": "agentlab.core.clock",
    "CallRecord": "agentlab.core.records",
    "open_run": "agentlab.store",
    "Society": "agentlab.runtime",
    "AgentBase": "agentlab.agents",
    "register_agent": "agentlab.agents",
    "EnvBase": "agentlab.env",
    "tool": "agentlab.env",
    "Msg": "agentlab.messaging",
    "MsgHub": "agentlab.messaging",
    "sequential": "agentlab.messaging",
    "fanout": "agentlab.messaging",
    "Experiment": "agentlab.topology",
    "calibrate": "agentlab.analysis.calibrate",
    "fit_calibration": "agentlab.analysis.calibrate",
    "SimProfile": "agentlab.llm",
    "record": "agentlab.sweep",
    "AgentSystem": "agentlab.runtime",
    "recorded_run": "agentlab.runtime",
    "show": "agentlab.viz",
    "live": "agentlab.viz",
    "LLMAgent": "agentlab.messaging",
    "FailurePolicy": "agentlab.messaging",
    "play_werewolf": "agentlab.games",
    "fit_iat": "agentlab.analysis",
    "open_sweep": "agentlab.sweep",
    "summarize_run": "agentlab.store",
}

__all__ = ["__version__", *_EXPORTS, "sweep"]  # (sweep: the package, callable as its function)

#: subpackages reachable as attributes after a plain ``import agentlab``
#: (``agentlab.datasets.path("reference_run")``, as the docs write it), imported on first use
_SUBPACKAGES = frozenset({"agents", "analysis", "core", "datasets", "env", "games", "llm",
                          "messaging", "runtime", "store", "sweep", "topology", "view", "viz"})  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None and name in _SUBPACKAGES:
        return importlib.import_module(f"agentlab.{name}")  # (sets the attribute itself)
    if module is None:
        raise AttributeError(f"module 'agentlab' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # cache: the next access skips __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, *_SUBPACKAGES})


if "ipykernel" in sys.modules:  # a notebook: its stop button reaches any await
    from agentlab.core.kernel_wakeup import wake_cells_in_kernel

    wake_cells_in_kernel()
