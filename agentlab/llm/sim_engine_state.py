"""Saved state of the simulated vLLM engine (:mod:`agentlab.llm.sim_engine`): everything that
affects its future steps, as JSON-able data (:meth:`EngineState.export_state`) and back
(:meth:`EngineState.restore_state`).

A mixin of :class:`~agentlab.llm.sim_engine.Engine`, which owns the attributes (kept apart
from the step loop so that module has room under the house's line limit).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from agentlab.llm.sim_kv import KVCache
from agentlab.llm.sim_request import EngineRequest, State

__all__ = ["EngineState"]


class EngineState:
    """``export_state`` / ``restore_state`` of :class:`~agentlab.llm.sim_engine.Engine`."""

    kv: KVCache | None
    _s: State
    steps_total: int
    finished_total: int
    aborted_total: int
    generated_total: int
    preemptions_total: int
    version: int  # (the engine's property: bumping it re-plans)
    _plan: State | None
    _views: dict[int, EngineRequest]
    _recount: Callable[[], None]  # (the plan's: counts the live blocks of those present)

    def export_state(self) -> dict[str, Any]:
        """Everything that affects future steps, JSON-able."""
        s = self._s
        return {
            "t": None if math.isinf(s.t) else s.t,
            "queue": [self._queued(r) for r in s.q[s.qi :] if not r.done],
            "running": [r.to_dict() for r in s.running],
            "steps_total": self.steps_total,
            "finished_total": self.finished_total,
            "aborted_total": self.aborted_total,
            "generated_total": self.generated_total,
            "preemptions_total": self.preemptions_total,
            "kv": None if self.kv is None else self.kv.export_state(),
        }

    def _queued(self, r: EngineRequest) -> dict[str, Any]:
        # A queued request the plan has admitted keeps the prefix-cache hit bound it was
        # admitted with: a plan bounds a request's hits when it admits it (``_bound``), with
        # the evictions known then, and the restored engine's plan must admit it as this
        # one did (bounding it again after later evictions would plan other steps: its
        # predictions would differ from this engine's). Saved, not re-planned here: making
        # the live plan follow every eviction instead cost 3-6x the engine's CPU under
        # overload (a lowered bound far ahead re-plans everything after it).
        d = r.to_dict()
        v = self._views.get(r.rid) if self._plan is not None else None
        if v is not None and v.left_at is not None and not (v.aborted and v.prefilled == 0):
            d["plan_bound"] = [v.plan_cached, v.seen_ev]
        elif (keep := r.keep if v is None else v.keep) is not None:
            d["plan_bound"] = list(keep)  # (restored with one, not admitted by a plan since)
        return d

    def restore_state(self, d: dict[str, Any]) -> dict[int, EngineRequest]:
        """Load :meth:`export_state` output; returns the restored requests by id."""
        s = self._s = State()
        s.t = -math.inf if d.get("t") is None else float(d["t"])
        queued = [*d.get("queue", []), *d.get("waiting", []), *d.get("pending", [])]
        s.q = sorted((EngineRequest.from_dict(x) for x in queued), key=lambda r: r.arrival)
        s.running = [EngineRequest.from_dict(x) for x in d.get("running", [])]
        self.steps_total = int(d.get("steps_total", 0))
        self.finished_total = int(d.get("finished_total", 0))
        self.aborted_total = int(d.get("aborted_total", 0))
        self.generated_total = int(d.get("generated_total", 0))
        self.preemptions_total = int(d.get("preemptions_total", 0))
        if self.kv is not None and d.get("kv"):
            self.kv.restore_state(d["kv"])
        self._recount()  # the live blocks of the restored requests
        self.version += 1
        return {r.rid: r for r in (*s.q, *s.running)}
