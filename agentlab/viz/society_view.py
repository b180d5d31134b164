"""SocietyView: the society's vital signs per committed tick, with sparklines and controls.

It follows the ``timeline`` dataset (one row per committed tick). The numbers per tick go
to the browser as float64 binary buffers (snapshot + delta, see ``_follow.Journal``); the
headline figures travel as a small JSON dict. Start / pause / stop call the attached
society (``live(society)``), which acts on them between ticks.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import numpy as np
import traitlets as t

from agentlab.viz._base import LiveWidget, load_css, load_esm
from agentlab.viz._follow import Journal

__all__ = ["SERIES_COLUMNS", "SocietyModel", "SocietyView"]

#: columns of the binary series, in order (``k`` is the journal index, the merge key)
SERIES_COLUMNS = (
    "k",
    "tick",
    "ts",
    "agents",
    "steps",
    "llm_calls",
    "tokens",
    "errors",
    "wall_s",
    "aimd_limit",
    "in_flight",
    "steps_per_s",
    "calls_per_s",
)
_SUMMED = ("steps", "llm_calls", "tokens", "errors", "wall_s")


def _num(value: Any) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return math.nan
    return f


class SocietyModel:
    """Folds ``timeline`` rows into per-tick series and running totals (no widget code).

    Args:
        max_points: ticks kept for the sparklines.
        snapshot_interval: seconds between full series snapshots.
    """

    def __init__(self, max_points: int = 2000, snapshot_interval: float = 1.0) -> None:
        self.journal: Journal[list[float]] = Journal(max_points, snapshot_interval, max_delta=400)
        self.totals = dict.fromkeys(_SUMMED, 0.0)
        self.last: dict[str, float] = {}
        self.ticks = 0

    def ingest(self, rows: list[dict[str, Any]]) -> bool:
        """Add timeline rows; returns whether anything changed."""
        out: list[list[float]] = []
        for r in rows:
            vals = {c: _num(r.get(c)) for c in SERIES_COLUMNS[1:11]}
            wall = vals["wall_s"]
            ok = wall > 0 and not math.isnan(wall)
            vals["steps_per_s"] = vals["steps"] / wall if ok else math.nan
            vals["calls_per_s"] = vals["llm_calls"] / wall if ok else math.nan
            for c in _SUMMED:
                if not math.isnan(vals[c]):
                    self.totals[c] += vals[c]
            self.last = vals
            out.append(
                [float(self.journal.count + len(out))] + [vals[c] for c in SERIES_COLUMNS[1:]]
            )
            self.ticks += 1
        self.journal.extend(out)
        return bool(out)

    def summary(self) -> dict[str, Any]:
        """Headline figures: last tick's values, totals and whole-run rates (JSON-safe)."""
        clean = {k: (None if math.isnan(v) else v) for k, v in self.last.items()}
        wall = self.totals["wall_s"]
        return {
            **clean,
            "ticks": self.ticks,
            "total_steps": self.totals["steps"],
            "total_llm_calls": self.totals["llm_calls"],
            "total_tokens": self.totals["tokens"],
            "total_errors": self.totals["errors"],
            "total_wall_s": wall,
            "mean_steps_per_s": self.totals["steps"] / wall if wall > 0 else None,
            "mean_calls_per_s": self.totals["llm_calls"] / wall if wall > 0 else None,
        }

    def frame(self, force_snapshot: bool = False) -> dict[str, Any]:
        """Trait values of one frame: the summary plus series snapshot and/or delta."""
        base, delta = self.journal.frame(force_snapshot)
        traits: dict[str, Any] = {"summary": self.summary(), "series_delta": _encode(delta)}
        if base is not None:
            traits["series_base"] = _encode(base)
        return traits


def _encode(rows: list[list[float]]) -> bytes:
    """Rows → little-endian float64 bytes (NaN for missing); sent as a binary buffer."""
    if not rows:
        return b""
    return np.asarray(rows, dtype="<f8").tobytes()


def decode_series(data: bytes) -> np.ndarray:
    """Inverse of the wire encoding: an ``(n, len(SERIES_COLUMNS))`` float64 array."""
    return np.frombuffer(data, dtype="<f8").reshape(-1, len(SERIES_COLUMNS))


class SocietyView(LiveWidget):
    """Tick, agents, agent-steps/s, LLM calls/s, tokens, errors, AIMD limit, in-flight.

    Args:
        run: run directory, store ``Run`` or ``Society``.
        society: the running society, to enable start / pause / stop (optional).
        ticks: ticks to run when *start* is pressed on a society that is not running.
        **kwargs: see :class:`~agentlab.viz._base.LiveWidget`.
    """

    _esm = load_esm("society_view.js")
    _css = load_css()

    datasets = ("timeline",)
    summary = t.Dict().tag(sync=True)
    series_columns = t.List(t.Unicode(), default_value=list(SERIES_COLUMNS)).tag(sync=True)
    series_base = t.Bytes(b"").tag(sync=True)
    series_delta = t.Bytes(b"").tag(sync=True)
    controls = t.Bool(False).tag(sync=True)
    status = t.Unicode("following").tag(sync=True)
    last_action = t.Unicode("").tag(sync=True)

    def __init__(self, run: Any, *, society: Any = None, ticks: int | None = None, **kwargs: Any):
        self._model = SocietyModel()
        self._society = society
        self._ticks = ticks
        self._task: asyncio.Future[Any] | None = None
        super().__init__(run, **kwargs)
        self.controls = society is not None

    def _ingest(self, dataset: str, rows: list[dict[str, Any]]) -> bool:
        return self._model.ingest(rows)

    def _frame(self) -> dict[str, Any]:
        traits = self._model.frame()
        traits["status"] = self._status()
        return traits

    def _status(self) -> str:
        soc = self._society
        if soc is None:
            return "following" if self._follower.running else "static"
        for attr in ("status", "state"):
            value = getattr(soc, attr, None)
            if isinstance(value, str):
                return value
        if getattr(soc, "paused", False) is True:
            return "paused"
        if self._task is not None:
            if not self._task.done():
                return "stopping" if self.last_action in ("pause", "stop") else "running"
            # Society.pause()/stop() both end run() after the current tick
            return {"pause": "paused", "stop": "stopped"}.get(self.last_action, "finished")
        return "ready"

    def attach_task(self, task: asyncio.Future[Any]) -> None:
        """Tell the view which background task runs the society (for status/start)."""
        self._task = task

    def _on_front_msg(self, msg: dict[str, Any]) -> None:
        if msg.get("type") != "control" or self._society is None:
            return
        action = msg.get("action")
        soc = self._society
        if action == "pause" and hasattr(soc, "pause"):
            soc.pause()
        elif action == "stop" and hasattr(soc, "stop"):
            soc.stop()
        elif action == "start":
            if getattr(soc, "paused", False) and hasattr(soc, "resume"):
                soc.resume()
            elif (self._task is None or self._task.done()) and self._ticks:
                # a paused/stopped Society continues where it stopped when run again
                self._task = asyncio.ensure_future(soc.run(ticks=self._ticks))
            elif hasattr(soc, "resume"):
                soc.resume()
        else:
            return
        self.last_action = str(action)
        self._follower.coalescer.mark()
