"""The society view's numbers: ``timeline`` rows folded into per-tick series and totals.

No widget code: :class:`SocietyModel` is what ``SocietyView`` (live and static) reads, and
:func:`empty_states` what its charts say while they have no point. Rates are per second of
the society's clock that each tick's work took (:meth:`SocietyModel.tick_seconds`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agentlab.viz._follow import Journal

__all__ = [
    "NO_TICKS",
    "RATES_EMPTY",
    "SERIES_COLUMNS",
    "STATIC_CHARTS",
    "SocietyModel",
    "decode_series",
    "empty_states",
    "encode_series",
]

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
    "latency_mean_s",
    "steps_per_s",
    "calls_per_s",
)
_SUMMED = ("steps", "llm_calls", "tokens", "errors", "wall_s")
#: the columns read from a timeline row (the rest, rates, are derived from them)
_FROM_ROW = tuple(c for c in SERIES_COLUMNS[1:] if c not in ("steps_per_s", "calls_per_s"))


def _num(value: Any) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return math.nan
    return f


class SocietyModel:
    """Folds ``timeline`` rows into per-tick series and running totals (no widget code).

    Args:
        max_points: ticks kept for the charts.
        snapshot_interval: seconds between full series snapshots.
        virtual: the run's clock is virtual (rates per simulated second); ``SocietyView``
            sets :attr:`virtual` from the run before its first rows.
    """

    def __init__(
        self, max_points: int = 2000, snapshot_interval: float = 1.0, *, virtual: bool = False
    ) -> None:
        self.journal: Journal[list[float]] = Journal(max_points, snapshot_interval, max_delta=400)
        self.totals = dict.fromkeys(_SUMMED, 0.0)
        self.last: dict[str, float] = {}
        self.ticks = 0
        #: the run's clock is virtual (set before the first rows: SocietyView reads it)
        self.virtual = virtual
        self._prev_ts = math.nan
        self.clock_s = 0.0  # clock seconds of the ticks whose duration is known
        self.timed = {"steps": 0.0, "llm_calls": 0.0}  # their steps and calls

    def tick_seconds(self, vals: dict[str, float]) -> float:
        """Seconds of the society's clock that the tick's work took (NaN: unknown).

        Real clock: the row's own ``wall_s``. The gap between two commits, used before,
        also held the time nothing ran (paused, stopped, before *start* was pressed again,
        a resume the next day) and drove the rates to about 0. Virtual clock: the gap to
        the previous commit's ``ts``, in simulated seconds (``wall_s`` is the host's time
        to compute it). The virtual clock passes only while a tick runs (a pause, a stop,
        a reopen go on from the last commit's time) and starts at 0 (``society_build``),
        which tick 1's gap is taken from.
        """
        if not self.virtual:
            dt = vals["wall_s"]
        else:
            prev = self._prev_ts
            if math.isnan(prev) and vals["tick"] == 1:
                prev = 0.0
            dt = vals["ts"] - prev
            self._prev_ts = vals["ts"]
        return dt if dt > 0 else math.nan

    def ingest(self, rows: list[dict[str, Any]]) -> bool:
        """Add timeline rows; returns whether anything changed."""
        out: list[list[float]] = []
        for r in rows:
            vals = {c: _num(r.get(c)) for c in _FROM_ROW}
            dt = self.tick_seconds(vals)
            ok = not math.isnan(dt)
            vals["steps_per_s"] = vals["steps"] / dt if ok else math.nan
            vals["calls_per_s"] = vals["llm_calls"] / dt if ok else math.nan
            if ok:
                self.clock_s += dt
                self.timed["steps"] += vals["steps"]
                self.timed["llm_calls"] += vals["llm_calls"]
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
        clock_s = self.clock_s or None
        return {
            **clean,
            "ticks": self.ticks,
            "total_steps": self.totals["steps"],
            "total_llm_calls": self.totals["llm_calls"],
            "total_tokens": self.totals["tokens"],
            "total_errors": self.totals["errors"],
            "total_wall_s": wall,
            "clock_s": clock_s,
            "mean_steps_per_s": self.timed["steps"] / clock_s if clock_s else None,
            "mean_calls_per_s": self.timed["llm_calls"] / clock_s if clock_s else None,
        }

    def frame(self, force_snapshot: bool = False) -> dict[str, Any]:
        """Trait values of one frame: the summary plus series snapshot and/or delta."""
        base, delta = self.journal.frame(force_snapshot)
        traits: dict[str, Any] = {"summary": self.summary(), "series_delta": encode_series(delta)}
        if base is not None:
            traits["series_base"] = encode_series(base)
        return traits


def encode_series(rows: list[list[float]]) -> bytes:
    """Rows → little-endian float64 bytes (NaN for missing); sent as a binary buffer."""
    if not rows:
        return b""
    return np.asarray(rows, dtype="<f8").tobytes()


def decode_series(data: bytes) -> np.ndarray:
    """Inverse of the wire encoding: an ``(n, len(SERIES_COLUMNS))`` float64 array."""
    return np.frombuffer(data, dtype="<f8").reshape(-1, len(SERIES_COLUMNS))


#: what every chart says before the first tick. One tick is a point (drawn as a dot), not
#: "no ticks yet": the live charts said so over the tick-1 point they drew
NO_TICKS = "no ticks yet"
#: what the Rates chart says after ticks with no rate: none took any clock time (a virtual
#: clock that no call's latency moved)
RATES_EMPTY = "no rates: these ticks took no clock time"

#: the static snapshot's charts, the live view's four (``CHARTS`` in
#: widgets/society_view.js, same order): image text, y-axis title, (series column, legend
#: label) pairs, and what the chart says once ticks came without a point for it
STATIC_CHARTS: tuple[tuple[str, str, tuple[tuple[str, str], ...], str], ...] = (
    ("LLM calls and agent-steps per second of clock time, by tick", "per second of clock time",
     (("calls_per_s", "LLM calls/s"), ("steps_per_s", "agent-steps/s")), RATES_EMPTY),
    ("AIMD limit and LLM calls in flight at each commit, by tick", "concurrent LLM calls",
     (("aimd_limit", "AIMD limit"), ("in_flight", "in flight at commit")),
     "no AIMD limit or in-flight count recorded"),
    ("tokens per tick", "tokens per tick", (("tokens", "tokens"),), "no token counts recorded"),
    ("mean LLM call latency, by tick", "seconds",
     (("latency_mean_s", "mean LLM call latency"),), "no answered LLM calls yet"),
)  # fmt: skip


def empty_states(ticks: int) -> list[str]:
    """What each chart says while it has no point (:data:`STATIC_CHARTS` order): the
    snapshot's and the live view's (the ``chart_empty`` trait) alike."""
    return [NO_TICKS if ticks == 0 else why for *_, why in STATIC_CHARTS]
