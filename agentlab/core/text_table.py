"""Plain-text tables for a terminal: what ``agentlab report``, ``agentlab runs``,
``agentlab experiment`` and ``agentlab sweep`` print (numbers right-aligned and readable,
long values cut)."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["format_seconds", "format_table"]


def _cell(value: Any, width: int = 28) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        text = str(value)
    elif isinstance(value, int):
        text = f"{value:,}"
    elif isinstance(value, float):
        text = f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    elif isinstance(value, list | dict):
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _cut_middle(text: str, width: int) -> str:
    """``text`` cut in the middle: names of nested runs differ at their end (a sweep
    point's hash, the experiment in it), so a cut end made every row read the same."""
    if len(text) <= width:
        return text
    head = (width - 1) // 3
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def format_table(df: pd.DataFrame, *, width: int = 28, names: dict[str, int] | None = None) -> str:
    """An aligned plain-text table (numbers right-aligned, long values cut); the columns
    in ``names`` (column -> width) are identifiers, cut in the middle at their width."""
    cols = [str(c) for c in df.columns]
    names = names or {}
    cells = [
        [_cut_middle(str(v), names[c]) if c in names else _cell(v, width)
         for c, v in zip(cols, row, strict=True)]
        for row in df.itertuples(index=False)
    ]  # fmt: skip
    numeric = [
        all(isinstance(v, int | float) and not isinstance(v, bool) for v in df[c].dropna())
        for c in df.columns
    ]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    out = [line(cols), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out)


def format_seconds(x: Any, missing: str = "n/a") -> str:
    """A duration with a readable unit: ``0.0123`` → ``"12.3 ms"``, ``2934`` → ``"2,934 s"``
    (never ``"2.93e+03 s"``); None or NaN → ``missing``."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return missing
    if not math.isfinite(v):
        return missing
    if v == 0:
        return "0 s"
    if abs(v) < 1e-3:
        return f"{v * 1e6:.3g} µs"
    if abs(v) < 1:
        return f"{v * 1e3:.3g} ms"
    if abs(v) >= 1000:
        return f"{v:,.0f} s"
    return f"{v:.3g} s"
