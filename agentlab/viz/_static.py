"""Static forms of the widgets: self-contained HTML + inline SVG, no script, no network.

A widget's ``text/html`` snapshot is what a saved notebook, GitHub's renderer, nbconvert
and ``agentlab paper`` show without a kernel. Everything here is plain markup with inline
styles (notebook sanitizers drop ``<style>`` and ``<script>``) and every piece of run
data goes through :func:`html.escape`: agent text is untrusted.
"""

from __future__ import annotations

import base64
import html
import itertools
import math
from collections.abc import Iterable, Sequence

from agentlab.core.axes import log_time_ticks

__all__ = [
    "PALETTE",
    "card",
    "empty_svg",
    "esc",
    "fmt_num",
    "fmt_tick",
    "line_chart_svg",
    "step_chart_svg",
    "svg_img",
    "thin_ticks",
    "tiles_html",
]

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")
_FONT = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:12px"


def esc(value: object) -> str:
    """Text → HTML-safe text (quotes included, so it is safe inside attributes too)."""
    return html.escape("" if value is None else str(value), quote=True)


def fmt_num(value: object, digits: int = 3) -> str:
    """A readable number: integers with thousands separators, floats to ``digits``
    significant figures, ``–`` for missing."""
    if value is None or isinstance(value, bool):
        return "–" if value is None else str(value)
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(f) or math.isinf(f):
        return "–"
    if f.is_integer() and abs(f) < 1e15:
        return f"{int(f):,}"
    if abs(f) >= 10**digits:  # "3,931", never "3.93e+03"
        return f"{f:,.0f}"
    return f"{f:.{digits}g}"


def fmt_tick(value: float) -> str:
    """A short axis label, as the live charts write it (``fmtTick`` in widgets/_common.js):
    from 10,000 on in k / M / G with at most three significant digits ("12.5k", "250k",
    "1.5M"); below, :func:`fmt_num`. Every label stays distinct: rounding to a whole k / M
    wrote the ticks 1M, 1.5M, 2M as "1M, 2M, 2M"."""
    if not math.isfinite(value) or abs(value) < 1e4:
        return fmt_num(value)
    for unit, suffix in ((1e3, "k"), (1e6, "M"), (1e9, "G")):
        text = f"{value / unit:.3g}"  # (999,999 rounds to "1e+03" k: the next unit, "1M")
        if abs(float(text)) < 1000 or suffix == "G":
            break
    return (text.rstrip("0").rstrip(".") if "." in text and "e" not in text else text) + suffix


def svg_img(svg: str, alt: str) -> str:
    """An SVG as an ``<img>`` with a ``data:`` URI: notebook sanitizers (JupyterLab's for
    untrusted notebooks) strip inline ``<svg>`` but keep images."""
    if not svg.startswith("<svg"):
        return svg  # the "(no data yet)" placeholder
    b64 = base64.b64encode(svg.encode()).decode()
    return f'<img alt="{esc(alt)}" src="data:image/svg+xml;base64,{b64}" style="margin:2px">'


def card(kind: str, title: str, status: str, body: str) -> str:
    """The frame every static widget shares; the class ``agentlab-static-<kind>`` (and
    ``data-agentlab-static``, which sanitizers drop) names the kind."""
    return (
        f'<div class="agentlab-static agentlab-static-{esc(kind)}" '
        f'data-agentlab-static="{esc(kind)}" style="{_FONT};border:1px solid #ddd;'
        'border-radius:4px;padding:6px 8px;margin:4px 0;color:#222;background:#fff">'
        f'<div style="margin-bottom:4px"><b>{esc(title)}</b> '
        f'<span style="color:#666">{esc(status)}</span>'
        '<span style="float:right;color:#999;font-size:10px">static snapshot</span></div>'
        f"{body}</div>"
    )


def tiles_html(items: Iterable[tuple[str, str]]) -> str:
    """A row of ``(value, label)`` tiles."""
    cells = "".join(
        '<td style="text-align:center;padding:2px 8px">'
        f'<div style="font-size:16px">{esc(v)}</div>'
        f'<div style="font-size:10px;color:#777">{esc(label)}</div></td>'
        for v, label in items
    )
    return f'<table style="border-collapse:collapse"><tr>{cells}</tr></table>'


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def _y_axis(lo: float, hi: float) -> tuple[list[float], list[str], int]:
    """The y ticks over ``[lo, hi]``, their labels, and the plot's left edge: wide enough
    that the widest label ends clear of the rotated axis title (which takes x < 20); a
    fixed 52 px cut "1,000,000" to "000,000" under the title."""
    ticks = _ticks(lo, hi, 4)
    labels = [fmt_tick(t) for t in ticks]
    # ~6 px a digit or letter and ~3 px a comma or point at the 10 px label font
    widest = max((sum(3 if c in ",." else 6 for c in lab) for lab in labels), default=0)
    return ticks, labels, max(52, 26 + widest)


def _frame_svg(
    width: int,
    height: int,
    x_label: str,
    y_label: str,
    x_ticks: Sequence[tuple[float, str]],
    y_ticks: Sequence[tuple[float, str]],
    L: int,
) -> list[str]:
    # plot area: x in [L, width-R], y in [T, height-B]; tick positions are already mapped
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" style="{_FONT};font-size:10px">',
    ]
    B = 34
    parts.append(
        f'<line x1="{L}" y1="{height - B}" x2="{width - 10}" y2="{height - B}" stroke="#999"/>'
        f'<line x1="{L}" y1="22" x2="{L}" y2="{height - B}" stroke="#999"/>'
    )
    for x, lab in x_ticks:
        # a label centred on a tick near the right edge would be cut ("1000 s" as "1000"):
        # it ends at the edge instead
        half = _CHAR_PX * len(lab) / 2
        anchor, tx = ("end", float(width - 1)) if x + half > width - 1 else ("middle", x)
        parts.append(
            f'<line x1="{x:.1f}" y1="{height - B}" x2="{x:.1f}" y2="{height - B + 4}" '
            f'stroke="#999"/><text x="{tx:.1f}" y="{height - B + 15}" text-anchor="{anchor}" '
            f'fill="#444">{esc(lab)}</text>'
        )
    for y, lab in y_ticks:
        parts.append(
            f'<line x1="{L - 4}" y1="{y:.1f}" x2="{width - 10}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{L - 6}" y="{y + 3:.1f}" text-anchor="end" fill="#444">{esc(lab)}</text>'
        )
    parts.append(
        f'<text x="{(L + width - 10) / 2:.0f}" y="{height - 4}" text-anchor="middle" '
        f'fill="#222">{esc(x_label)}</text>'
        f'<text transform="translate(12 {(height - B) / 2 + 4:.0f}) rotate(-90)" '
        f'text-anchor="middle" fill="#222">{esc(y_label)}</text>'
    )
    return parts


def empty_svg(message: str, width: int = 420, height: int = 200) -> str:
    """A chart-sized SVG box with ``message`` in its middle (an empty state)."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">'
        f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" fill="#fafafa" '
        f'stroke="#ddd"/><text x="{width / 2:.0f}" y="{height / 2:.0f}" text-anchor="middle" '
        f'fill="#777">{esc(message)}</text></svg>'
    )


def line_chart_svg(
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    *,
    x_label: str,
    y_label: str,
    width: int = 420,
    height: int = 200,
    integer_x: bool = False,
    min_points: int = 1,
    empty: str = "no data yet",
) -> str:
    """Lines ``{name: (xs, ys)}`` with axes, tick labels, axis titles and a legend; while
    every series has fewer than ``min_points`` finite points (as the live chart decides), a
    chart-sized box saying ``empty``. A series of one point is drawn as a dot."""
    finite = {
        name: [
            (x, y) for x, y in zip(xs, ys, strict=False) if math.isfinite(x) and math.isfinite(y)
        ]
        for name, (xs, ys) in series.items()
    }
    pts = [p for ps in finite.values() for p in ps]
    if not pts or max(len(ps) for ps in finite.values()) < min_points:
        return empty_svg(empty, width, height)
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(0.0, min(p[1] for p in pts)), max(p[1] for p in pts)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        y1 = y0 + 1
    yt, y_labels, L = _y_axis(y0, y1)
    R, T, B = 10, 22, 34
    sx = lambda v: L + (v - x0) / (x1 - x0) * (width - L - R)  # noqa: E731
    sy = lambda v: height - B - (v - y0) / (y1 - y0) * (height - B - T)  # noqa: E731
    xt = [t for t in _ticks(x0, x1) if not integer_x or float(t).is_integer()]
    parts = _frame_svg(
        width,
        height,
        x_label,
        y_label,
        [(sx(t), fmt_num(t)) for t in xt],
        [(sy(t), lab) for t, lab in zip(yt, y_labels, strict=True)],
        L,
    )
    legend = []
    for i, (name, ps) in enumerate(finite.items()):
        color = PALETTE[i % len(PALETTE)]
        if len(ps) == 1:  # (a one-point polyline draws nothing)
            cx, cy = ps[0]
            parts.append(f'<circle cx="{sx(cx):.1f}" cy="{sy(cy):.1f}" r="3" fill="{color}"/>')
        else:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ps)
            parts.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{path}"/>'
            )
        legend.append((name, color))
    parts.extend(_legend(legend, width))
    parts.append("</svg>")
    return "".join(parts)


def step_chart_svg(
    edges: Sequence[float],
    rows: dict[str, Sequence[float]],
    *,
    x_label: str,
    y_label: str,
    marks: dict[str, float] | None = None,
    width: int = 560,
    height: int = 220,
) -> str:
    """Histograms on log-spaced ``edges`` (one step line per row) with vertical ``marks``
    (e.g. the burst threshold) and decade tick labels."""
    n = len(edges) - 1
    if n <= 0 or not rows:
        return empty_svg("no LLM calls yet", width, height)
    ymax = max([max(r) for r in rows.values() if len(r)] + [1.0])
    yt, y_labels, L = _y_axis(0.0, ymax)
    R, T, B = 10, 22, 34
    lx0, lx1 = math.log10(edges[0]), math.log10(edges[-1])
    sx = lambda v: L + (math.log10(v) - lx0) / (lx1 - lx0) * (width - L - R)  # noqa: E731
    sy = lambda v: height - B - v / ymax * (height - B - T)  # noqa: E731
    parts = _frame_svg(
        width,
        height,
        x_label,
        y_label,
        thin_ticks([(sx(v), lab) for v, lab in log_time_ticks(edges[0], edges[-1])]),
        [(sy(t), lab) for t, lab in zip(yt, y_labels, strict=True)],
        L,
    )
    legend = []
    for i, (name, counts) in enumerate(rows.items()):
        color = PALETTE[i % len(PALETTE)]
        pts = [f"{sx(edges[0]):.1f},{sy(0):.1f}"]
        for j in range(n):
            pts.append(f"{sx(edges[j]):.1f},{sy(counts[j]):.1f}")
            pts.append(f"{sx(edges[j + 1]):.1f},{sy(counts[j]):.1f}")
        pts.append(f"{sx(edges[-1]):.1f},{sy(0):.1f}")
        parts.append(
            f'<polyline fill="{color}" fill-opacity="0.12" stroke="{color}" '
            f'stroke-width="1.5" points="{" ".join(pts)}"/>'
        )
        legend.append((name, color))
    for label, value in (marks or {}).items():
        if edges[0] < value < edges[-1]:
            x = sx(value)
            parts.append(
                f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{height - B}" stroke="#555" '
                f'stroke-dasharray="4 3"/><text x="{x + 3:.1f}" y="{T + 10}" fill="#555">'
                f"{esc(label)}</text>"
            )
    parts.extend(_legend(legend, width))
    parts.append("</svg>")
    return "".join(parts)


#: width of one character of a 10 px axis label, about (for fitting labels)
_CHAR_PX = 6.5


def thin_ticks(
    ticks: list[tuple[float, str]], char_px: float = _CHAR_PX
) -> list[tuple[float, str]]:
    """Keep every k-th ``(x, label)`` with the smallest k whose labels do not overlap
    (≥ 8 px apart at ~``char_px`` per character), so spacing stays regular."""
    for k in range(1, len(ticks) + 1):
        kept = ticks[::k]
        if all(
            b[0] - a[0] >= char_px * (len(a[1]) + len(b[1])) / 2 + 8
            for a, b in itertools.pairwise(kept)
        ):
            return kept
    return ticks[:1]


def _legend(items: list[tuple[str, str]], width: int) -> list[str]:
    if len(items) < 2 and not (items and items[0][0]):
        return []
    out = []
    x = 56.0
    for name, color in items[:8]:
        label = name[:24]
        out.append(
            f'<rect x="{x:.0f}" y="3" width="10" height="10" fill="{color}"/>'
            f'<text x="{x + 14:.0f}" y="12" fill="#222">{esc(label)}</text>'
        )
        x += 24 + 6.2 * len(label)
    return out
