"""Axis tick rules of every chart (pure; no plotting library): log-scale time axes, and
the integer parameters of sweep charts.

The plotly figures (:mod:`agentlab.analysis.figures`), the static SVG snapshots
(:mod:`agentlab.viz._static`) and the live widgets (the IAT widget receives these ticks as
a trait; ``widgets/iat_histogram.js`` only drops labels that would collide at the width it
is drawn at) all label a time axis at decades with short labels, and a range of less than
two decades at its 2x and 5x steps too::

    >>> log_time_ticks(0.002, 20)
    [(0.01, '10 ms'), (0.1, '100 ms'), (1.0, '1 s'), (10.0, '10 s')]
    >>> [label for _, label in log_time_ticks(1.5, 80)]
    ['2 s', '5 s', '10 s', '20 s', '50 s']
"""

from __future__ import annotations

import math

__all__ = ["decade_label", "integer_ticks", "log_time_ticks", "time_label"]


def decade_label(seconds: float) -> str:
    """Short label of a power of ten of seconds: ``1e-3`` → ``"1 ms"``, ``10`` → ``"10 s"``.

    1 µs to 1000 s get a unit; beyond, a short exponent (``"1e-07 s"``, ``"1e+04 s"``).
    """
    return time_label(10.0 ** round(math.log10(seconds)))


def time_label(seconds: float) -> str:
    """Short label of a tick of seconds: ``0.05`` → ``"50 ms"``, ``2`` → ``"2 s"`` (1 µs to
    5000 s get a unit; beyond, a short exponent, as :func:`decade_label`)."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if scale * (1 - 1e-9) <= seconds < 1e4:
            return f"{round(seconds / scale, 6):g} {unit}"
    return f"{seconds:.0e} s"


def log_time_ticks(lo: float, hi: float) -> list[tuple[float, str]]:
    """``(seconds, label)`` at every decade in ``[lo, hi]``; a range holding fewer than two
    decades also gets the 2x and 5x steps inside it (a 1.5-80 s latency axis was labelled
    "10 s" alone); a range holding no such tick, the two decades around it.

    Args:
        lo, hi: axis range in seconds (``0 < lo < hi``); anything else gives ``[]``.

    Returns:
        Ticks with short labels (1 ms, 10 ms, 100 ms, 1 s, 10 s, ...; 2 s, 5 s, 20 s in a
        short range), ascending. A renderer may thin them to fit its width, never add
        minor labels.
    """
    if not (0 < lo < hi and math.isfinite(hi)):
        return []
    d0 = math.ceil(math.log10(lo) - 1e-9)
    d1 = math.floor(math.log10(hi) + 1e-9)
    values = [10.0**d for d in range(d0, d1 + 1)]
    if len(values) < 2:
        inside = lambda v: lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)  # noqa: E731
        steps = [m * 10.0**d for d in range(d1 - 1, d0 + 1) for m in (2, 5)]
        values = sorted(values + [v for v in steps if inside(v)])
    if not values:  # no tick inside: the two decades around the range
        values = [10.0**d1, 10.0**d0]
    return [(v, time_label(v)) for v in values]


#: most ticks :func:`integer_ticks` puts on an axis (one per value)
MAX_INTEGER_TICKS = 12


def integer_ticks(values: object, most: int = MAX_INTEGER_TICKS) -> list[int] | None:
    """Tick values for an axis of an integer parameter (agents, rounds, a seed): its
    values themselves, when every value is a whole number and there are at most ``most``
    of them; else ``None`` (leave the axis to the plotting library).

    A plotting library's automatic ticks put a 1-to-2 axis at 1.2, 1.4, ... (a sweep over
    ``agents = [1, 2]`` read as fractions of an agent)::

        >>> integer_ticks([4, 2, 2, 8])
        [2, 4, 8]
        >>> integer_ticks([0.5, 1.0]) is None
        True
    """
    try:
        seen = {float(v) for v in values}  # type: ignore[attr-defined]
    except (TypeError, ValueError):  # not numbers (categories): the library's own axis
        return None
    if not seen or len(seen) > most:
        return None
    if not all(math.isfinite(v) and v == int(v) for v in seen):
        return None
    return sorted(int(v) for v in seen)
