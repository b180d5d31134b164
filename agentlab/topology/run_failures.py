"""The stop rule of a topology experiment: runs that keep failing stop it.

A workflow run whose LLM failures survive the client's retries ends with ``status="error"``,
recorded, and the experiment goes on: one bad call does not stop a study. But a model the
server lacks, an expired API key or an endpoint gone down fails every run: 450 of them ran
to the end (each with its retries and time-outs) and the experiment said ``done``. As a
society judges each tick's agent steps (``runtime/stop_rule.py``), an experiment judges its
last five finished runs (:data:`WINDOW`, or all of them when it plans fewer): it stops when
none of them succeeded, or, with ``max_error_share=x`` below 1, when more than ``x`` of them
failed; ``None`` never stops. It then raises :class:`~agentlab.errors.RunsFailedError`
(status ``failed``) naming the first error of the window. Its commit goes back to before
the first failed run since the last one that succeeded (in the order runs finished): those
runs are not kept (their rows stay readable until the experiment is continued), so fixing
the cause and continuing it (``Experiment.open(out).run()``) runs them again with the rest.
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["WINDOW", "FailureWatch", "check_rule"]

#: finished runs the rule judges (a society judges a tick's agents)
WINDOW = 5


def check_rule(rule: Any) -> float | None:
    """``max_error_share`` as given: a share in [0, 1] or ``None``.

    Raises:
        ValueError: anything else (the caller's ``ConfigError`` names the argument).
    """
    if rule is None:
        return None
    if isinstance(rule, bool) or not isinstance(rule, (int, float)) or not 0 <= rule <= 1:
        raise ValueError(f"max_error_share must be a share in [0, 1] or None, got {rule!r}")
    return float(rule)


class FailureWatch:
    """Judges each finished run (see the module docstring) and remembers the commit to go
    back to: the one before the first failed run since the last that succeeded."""

    def __init__(self, rule: float | None, planned: int, commit: dict[str, Any] | None) -> None:
        self.rule = rule
        self.window = max(1, min(WINDOW, planned))
        self.recent: deque[tuple[str, bool, str]] = deque(maxlen=self.window)
        self._last = commit  # the latest commit
        self.keep: dict[str, Any] | None = commit  # before the trailing failed runs
        self.streak = 0  # failed runs since the last that succeeded

    def finished(self, row: dict[str, Any], commit: dict[str, Any] | None) -> str | None:
        """Record a finished run (its ``experiment_runs`` row, and the commit written after
        it); the reason to stop, or ``None``."""
        failed = row.get("status") != "ok"
        if not failed:
            self.streak, self.keep = 0, commit
        elif self.streak == 0:
            self.streak, self.keep = 1, self._last
        else:
            self.streak += 1
        self._last = commit
        error = str(row.get("error") or row.get("status"))
        self.recent.append((str(row.get("run_id")), failed, error))
        if self.rule is None or len(self.recent) < self.window:
            return None
        failures = [(r, e) for r, f, e in self.recent if f]
        n = len(failures)
        if n == len(self.recent):
            why = f"none of the last {n} runs succeeded"
        elif n / len(self.recent) > self.rule:
            why = (f"{n} of the last {len(self.recent)} runs failed, above "
                   f"max_error_share={self.rule:g}")  # fmt: skip
        else:
            return None
        run_id, error = failures[0]
        return f"{why}; first: {run_id}: {error}"
