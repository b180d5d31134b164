"""IATHistogram: live log-binned inter-arrival-time histogram of LLM calls per group.

Follows ``llm_calls`` and groups calls by a column (``topology`` or ``stage``). Calls land
in the log when they *finish*, not in start order, so each group keeps its sorted start
times and inserting a start between two others replaces one gap by two: the histogram is
exact at every frame, not just at the end. Counts travel as one float64 buffer
``(groups × bins)``. The burst threshold is fixed and stated (``DEFAULT_BURST_THRESHOLD``,
the same default as the analysis layer) so it does not move during a run;
``burst_threshold="otsu"`` picks Otsu's split of each group's log-IAT histogram instead.
Optional fits (lognormal and exponential, from running sums) are drawn as expected counts.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import traitlets as t

from agentlab.core.axes import log_time_ticks
from agentlab.viz._base import LiveWidget, load_css, load_esm
from agentlab.viz._static import card, fmt_num, step_chart_svg, svg_img

__all__ = ["DEFAULT_BURST_THRESHOLD", "IATHistogram", "IATModel", "otsu_threshold"]

#: seconds: gaps shorter than this count as "in a burst" (fixed so a live view is stable)
DEFAULT_BURST_THRESHOLD = 0.05

_GROUP_CHOICES = ("topology", "stage", "model", "agent_id", None)


class _Group:
    __slots__ = ("counts", "n_pos", "starts", "sum_iat", "sum_log", "sum_log2")

    def __init__(self, n_bins: int) -> None:
        self.starts: list[float] = []
        self.counts = np.zeros(n_bins, dtype=np.float64)
        self.n_pos = 0  # gaps > 0 (the ones a log fit can use)
        self.sum_iat = 0.0
        self.sum_log = 0.0
        self.sum_log2 = 0.0


class IATModel:
    """Exact streaming inter-arrival histograms per group (no widget code).

    Args:
        group_by: label column to split by (``topology``, ``stage``, ...; ``None`` = one).
        lo, hi: bin range in seconds; gaps below ``lo`` (including 0) fall in the first
            bin, above ``hi`` in the last.
        bins_per_decade: log resolution.
    """

    def __init__(
        self,
        group_by: str | None = "topology",
        lo: float = 1e-4,
        hi: float = 1e3,
        bins_per_decade: int = 8,
    ) -> None:
        if group_by not in _GROUP_CHOICES:
            from agentlab.errors import ConfigError

            raise ConfigError(f"unknown group_by {group_by!r}; valid: {_GROUP_CHOICES!r}")
        if not 0 < lo < hi:
            from agentlab.errors import ConfigError

            raise ConfigError(f"need 0 < lo < hi, got lo={lo!r}, hi={hi!r}")
        self.group_by = group_by
        self.log_lo = math.log10(lo)
        self.per_decade = bins_per_decade
        self.n_bins = round((math.log10(hi) - self.log_lo) * bins_per_decade)
        self.edges = [10 ** (self.log_lo + i / bins_per_decade) for i in range(self.n_bins + 1)]
        self.groups: dict[str, _Group] = {}

    def _bin(self, gap: float) -> int:
        if gap <= self.edges[0]:
            return 0
        i = int((math.log10(gap) - self.log_lo) * self.per_decade)
        return min(max(i, 0), self.n_bins - 1)

    def _change(self, g: _Group, gap: float, sign: int) -> None:
        g.counts[self._bin(gap)] += sign
        g.sum_iat += sign * gap
        if gap > 0:
            lg = math.log(gap)
            g.n_pos += sign
            g.sum_log += sign * lg
            g.sum_log2 += sign * lg * lg

    def add(self, group: str, start: float) -> None:
        """Insert one call start into ``group`` (any order)."""
        g = self.groups.get(group)
        if g is None:
            g = self.groups[group] = _Group(self.n_bins)
        s = g.starts
        i = bisect.bisect_right(s, start)
        left = s[i - 1] if i > 0 else None
        right = s[i] if i < len(s) else None
        if left is not None and right is not None:
            self._change(g, right - left, -1)
        if left is not None:
            self._change(g, start - left, +1)
        if right is not None:
            self._change(g, right - start, +1)
        s.insert(i, start)

    def ingest(self, rows: list[dict[str, Any]]) -> bool:
        """Add ``llm_calls`` rows (uses ``start`` and the group column)."""
        changed = False
        for r in rows:
            try:
                start = float(r["start"])
            except (KeyError, TypeError, ValueError):
                continue
            group = "all" if self.group_by is None else str(r.get(self.group_by) or "(none)")
            self.add(group, start)
            changed = True
        return changed

    def counts(self) -> np.ndarray:
        """``(groups × bins)`` counts, groups in first-seen order."""
        if not self.groups:
            return np.zeros((0, self.n_bins))
        return np.vstack([g.counts for g in self.groups.values()])

    def fits(self) -> dict[str, np.ndarray]:
        """Expected counts per bin under a lognormal and an exponential fit, per group."""
        ln = np.zeros((len(self.groups), self.n_bins))
        ex = np.zeros_like(ln)
        edges = np.asarray(self.edges)
        for gi, g in enumerate(self.groups.values()):
            n = float(g.counts.sum())
            if g.n_pos >= 2:
                mu = g.sum_log / g.n_pos
                var = max(g.sum_log2 / g.n_pos - mu * mu, 1e-12)
                z = (np.log(edges) - mu) / math.sqrt(2 * var)
                cdf = 0.5 * (1 + np.vectorize(math.erf)(z))
                ln[gi] = np.diff(cdf) * g.n_pos
            if n > 0 and g.sum_iat > 0:
                rate = n / g.sum_iat
                cdf = 1 - np.exp(-rate * edges)
                cdf[0] = 0.0  # first bin also holds gaps below lo
                ex[gi] = np.diff(cdf) * n
        return {"lognormal": ln, "exponential": ex}

    def thresholds(self) -> list[float | None]:
        """Burst threshold per group (seconds), by Otsu's method on the log bins."""
        return [otsu_threshold(g.counts, self.edges) for g in self.groups.values()]


def otsu_threshold(counts: np.ndarray, edges: list[float]) -> float | None:
    """The bin edge that best splits a log histogram into two classes (Otsu), or None."""
    c = np.asarray(counts, dtype=float)
    total = c.sum()
    if total < 4 or np.count_nonzero(c) < 2:
        return None
    centers = np.arange(len(c), dtype=float)
    w0 = np.cumsum(c)[:-1]
    w1 = total - w0
    m0 = np.cumsum(c * centers)[:-1]
    mt = (c * centers).sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (mt * w0 / total - m0) ** 2 / (w0 * w1 / total)
    between[~np.isfinite(between)] = -1
    k = int(np.argmax(between))
    if between[k] <= 0:
        return None
    return float(edges[k + 1])


class IATHistogram(LiveWidget):
    """Live log-binned inter-arrival histogram per topology (or stage).

    Args:
        run: run directory, store ``Run`` or ``Society``.
        group_by: ``"topology"`` (default), ``"stage"``, ``"model"``, ``"agent_id"`` or None.
        burst_threshold: threshold in seconds (default ``DEFAULT_BURST_THRESHOLD``), or
            ``"otsu"`` for Otsu's split per group (moves as data arrives).
        fit: draw lognormal / exponential fits.
        **kwargs: see :class:`~agentlab.viz._base.LiveWidget`.
    """

    _esm = load_esm("iat_histogram.js", charts=True)
    _css = load_css()

    datasets = ("llm_calls",)
    group_by = t.Unicode("topology").tag(sync=True)
    edges = t.List(t.Float()).tag(sync=True)
    groups = t.List(t.Unicode()).tag(sync=True)
    totals = t.List(t.Int()).tag(sync=True)
    counts = t.Bytes(b"").tag(sync=True)
    thresholds: t.List[Any] = t.List().tag(sync=True)
    fit_names = t.List(t.Unicode()).tag(sync=True)
    fit_counts = t.Bytes(b"").tag(sync=True)
    calls = t.Int(0).tag(sync=True)
    #: ``[seconds, label]`` at every decade of the bin range (agentlab.core.axes)
    x_ticks: t.List[Any] = t.List().tag(sync=True)

    def __init__(
        self,
        run: Any,
        *,
        group_by: str | None = "topology",
        burst_threshold: float | str = DEFAULT_BURST_THRESHOLD,
        fit: bool = False,
        **kwargs: Any,
    ) -> None:
        if burst_threshold != "otsu" and not (
            isinstance(burst_threshold, int | float) and burst_threshold > 0
        ):
            from agentlab.errors import ConfigError

            raise ConfigError(f"burst_threshold={burst_threshold!r}; valid: seconds > 0 or 'otsu'")
        self._model = IATModel(group_by)
        self._fixed = None if burst_threshold == "otsu" else float(burst_threshold)
        self._fit = fit
        super().__init__(run, **kwargs)
        self.group_by = group_by or "all"
        self.edges = self._model.edges
        self.x_ticks = [[v, lab] for v, lab in log_time_ticks(self.edges[0], self.edges[-1])]

    def _ingest(self, dataset: str, rows: list[dict[str, Any]]) -> bool:
        return self._model.ingest(rows)

    def _frame(self) -> dict[str, Any]:
        m = self._model
        counts = m.counts()
        traits: dict[str, Any] = {
            "groups": list(m.groups),
            "totals": [int(x) for x in counts.sum(axis=1)],
            "counts": counts.astype("<f8").tobytes(),
            "calls": sum(len(g.starts) for g in m.groups.values()),
            "thresholds": [self._fixed] * len(m.groups)
            if self._fixed is not None
            else m.thresholds(),
        }
        if self._fit:
            fits = m.fits()
            traits["fit_names"] = list(fits)
            traits["fit_counts"] = np.stack(list(fits.values()), axis=1).astype("<f8").tobytes()
        return traits

    # --- static form -------------------------------------------------------------------

    def _text(self) -> str:
        per = ", ".join(f"{g}: {n}" for g, n in zip(self.groups, self.totals, strict=False))
        return f"IATHistogram {self.run_dir}: {self.calls} LLM calls; gaps per group: {per}"

    def _static_html(self) -> str:
        m = self._model
        counts = m.counts()
        rows: dict[str, Sequence[float]] = {g: list(counts[i]) for i, g in enumerate(m.groups)}
        marks = {}
        thr = self._fixed if self._fixed is not None else None
        if thr is not None:
            marks[f"burst < {fmt_num(thr)} s"] = thr
        chart = svg_img(
            step_chart_svg(
                m.edges, rows, x_label="gap between LLM call starts (log scale)",
                y_label="gaps per bin", marks=marks,
            ),
            "histogram of inter-arrival times of LLM calls",
        )  # fmt: skip
        status = f"{fmt_num(sum(len(g.starts) for g in m.groups.values()))} calls"
        if self.group_by != "all":
            status += f" by {self.group_by}"
        return card("iat", "Inter-arrival times", status, chart)
