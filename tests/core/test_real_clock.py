"""``RealClock``: ``now`` is ``time.time`` itself (no Python frame), still a ``Clock``."""

from __future__ import annotations

import pickle
import time

from agentlab.core.clock import Clock, RealClock


def test_real_clock_now_is_wall_time_and_it_is_a_clock() -> None:
    clock = RealClock()
    before = time.time()
    now = clock.now()
    assert before <= now <= time.time()
    assert isinstance(clock, Clock) and not clock.is_virtual
    assert clock.now is time.time  # no method wrapper: one C call per timestamp
    assert isinstance(pickle.loads(pickle.dumps(clock)).now(), float)
