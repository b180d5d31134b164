"""A per-tick progress bar (`core.progress_bar`: a widget in notebooks, text in terminals)."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["TickProgress"]


class TickProgress:
    """Shows ticks done plus steps/s, LLM calls/s and errors; a no-op when disabled."""

    def __init__(self, total: int | None, *, enabled: bool = True) -> None:
        self.bar: Any = None
        self.steps = self.calls = self.errors = 0
        self.t0 = time.perf_counter()
        if enabled and (total is None or total > 0):  # None: open-ended, until stop()
            from agentlab.core.progress_bar import progress_bar

            self.bar = progress_bar(total, "society", "tick")

    def update(self, row: dict[str, Any]) -> None:
        """Advance by one committed tick (its ``timeline`` row)."""
        self.steps += row["steps"]
        self.calls += row["llm_calls"]
        self.errors += row["errors"]
        if self.bar is None:
            return
        dt = max(time.perf_counter() - self.t0, 1e-9)
        self.bar.set_postfix(
            tick=row["tick"],
            steps_s=f"{self.steps / dt:,.0f}",
            llm_s=f"{self.calls / dt:,.0f}",
            errors=self.errors,
            refresh=False,
        )
        self.bar.update(1)

    def close(self) -> None:
        """Close the bar (keeps the last line on screen)."""
        if self.bar is not None:
            self.bar.close()
