"""The static snapshot's SVG charts keep their axis labels readable at any magnitude."""

from __future__ import annotations

import re

from agentlab.viz._static import fmt_tick, line_chart_svg, step_chart_svg

#: y tick labels: right-aligned ``<text>`` at x = L - 6
_Y_LABEL = re.compile(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="end" fill="#444">([^<]*)</text>')


def _y_labels(svg: str) -> list[tuple[float, str]]:
    return [(float(x), text) for x, text in _Y_LABEL.findall(svg)]


def test_tick_labels_are_short_and_distinct() -> None:
    """Rounded to a whole k or M, the ticks 1M, 1.5M, 2M read "1M, 2M, 2M" (the live chart's
    axis did); short labels keep three significant digits."""
    ticks = [0, 500_000, 1_000_000, 1_500_000, 2_000_000, 2_500_000]
    assert [fmt_tick(t) for t in ticks] == ["0", "500k", "1M", "1.5M", "2M", "2.5M"]
    assert [fmt_tick(t) for t in (7_500, 10_000, 12_500, 999_999, 1.25e6, 2.5e9, -15_000)] == [
        "7,500", "10k", "12.5k", "1M", "1.25M", "2.5G", "-15k",
    ]  # fmt: skip
    assert [fmt_tick(t) for t in (0.5, 0.0125, float("nan"))] == ["0.5", "0.0125", "–"]


def test_large_values_keep_their_y_labels_clear_of_the_axis_title() -> None:
    """A society's tokens per tick reach millions: with a fixed 52 px left margin the label
    "1,000,000" started left of the picture and under the rotated y-axis title (which
    takes x < 20), read as "000,000". Every label is short and ends where its left edge
    (about 6 px a character) clears the title."""
    for ys in ([520_000, 980_000, 1_010_000], [3.0, 4.5, 5.2], [12_000, 47_500, 81_000]):
        svg = line_chart_svg({"tokens": ([1, 2, 3], ys)}, x_label="tick", y_label="tokens")
        labels = _y_labels(svg)
        assert len(labels) >= 3, svg
        for x, text in labels:
            assert len(text) <= 5, labels
            assert x - 6 * len(text) >= 20, (x, text)
    hist = step_chart_svg([1e-3, 1e-2, 1e-1], {"all": [250_000, 1_200_000]},
                          x_label="gap", y_label="gaps per bin")  # fmt: skip
    assert {t for _, t in _y_labels(hist)} >= {"0", "500k", "1M"}
    assert all(x - 6 * len(t) >= 20 for x, t in _y_labels(hist))
