"""``agent_errors.traceback`` keeps its header and the innermost frames when a deep stack
(or a long checkout path) runs past the limit: CI's clone path once cut the header off."""

from __future__ import annotations

from agentlab.runtime.batch import TRACEBACK_CHARS, _clip_traceback


def _deep(n: int) -> str:
    frames = "".join(
        f'  File "/a/long/checkout/path/mod{i}.py", line {i}, in f\n    g()\n' for i in range(n)
    )
    return "Traceback (most recent call last):\n" + frames + "ValueError: boom\n"


def test_a_long_traceback_keeps_header_and_innermost_frames() -> None:
    tb = _deep(200)
    clipped = _clip_traceback(tb)
    assert len(clipped) == TRACEBACK_CHARS
    assert clipped.startswith("Traceback (most recent call last):\n")
    assert "frames elided" in clipped
    assert clipped.endswith('mod199.py", line 199, in f\n    g()\nValueError: boom\n')


def test_a_short_traceback_is_kept_whole() -> None:
    tb = _deep(3)
    assert _clip_traceback(tb) == tb
