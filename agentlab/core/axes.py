"""Axis tick rules of every chart (pure; no plotting library): log-scale time axes, and
the integer parameters of sweep charts.

The plotly figures (:mod:`agentlab.analysis.figures`), the static SVG snapshots
(:mod:`agentlab.viz._static`) and the live widgets (the IAT widget receives these ticks as
a trait; ``widgets/iat_histogram.js`` only drops labels that would collide at the width it
is drawn at) all label a time axis at decades with short labels::

    >>> log_time_ticks(0.002, 20)
    [(0.01, '10 ms'), (0.1, '100 ms'), (1.0, '1 s'), (10.0, '10 s')]
"""

from __future__ import annotations

import math

__all__ = ["decade_label", "integer_ticks", "log_time_ticks"]


def decade_label(seconds: float) -> str:
    """Short label of a power of ten of seconds: ``1e-3`` → ``"1 ms"``, ``10`` → ``"10 s"``.

    1 µs to 1000 s get a unit; beyond, a short exponent (``"1e-07 s"``, ``"1e+04 s"``).
    """
    d = round(math.log10(seconds))
    if 0 <= d <= 3:
        return f"{10**d} s"
    if -3 <= d < 0:
        return f"{10 ** (d + 3)} ms"
    if -6 <= d < -3:
        return f"{10 ** (d + 6)} µs"
    return f"{10.0**d:.0e} s"


def log_time_ticks(lo: float, hi: float) -> list[tuple[float, str]]:
    """``(seconds, label)`` at every decade in ``[lo, hi]``, or the two decades around a
    range that holds none.

    Args:
        lo, hi: axis range in seconds (``0 < lo < hi``); anything else gives ``[]``.

    Returns:
        Decade ticks with short labels (1 ms, 10 ms, 100 ms, 1 s, 10 s, ...). A renderer
        may thin them to fit its width, never add minor labels.
    """
    if not (0 < lo < hi and math.isfinite(hi)):
        return []
    d0 = math.ceil(math.log10(lo) - 1e-9)
    d1 = math.floor(math.log10(hi) + 1e-9)
    if d1 < d0:  # no decade inside: the two around the range
        d0, d1 = d1, d0
    return [(10.0**d, decade_label(10.0**d)) for d in range(d0, d1 + 1)]


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
