"""A codegen society resumes exactly: the code cache and the router counters are committed
with the tick (``env/ticks/<tick>/routers.json``), so a run stopped and reopened in a new
process hits the cache where the uninterrupted run does and logs the same rows and spans.

LLM persona agents on ``social_feed`` that ask the env's ``codegen`` router (programs run in
sandbox worker processes) on ``sim/vllm-3b`` under the virtual clock.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime.resume_helpers import (
    committed_files,
    dataset_rows,
    diff_summary,
    run_in_new_process,
    strict_rows,
    strict_spans,
)

CHILD = r"""
import sys
from agentlab import Society
from agentlab.agents import AgentBase, register_agent
from agentlab.llm import LLMClient

@register_agent("feed_reader")
class FeedReader(AgentBase):
    # asks the same thing every tick: its program is cached after the first
    async def step(self, tick):
        await self.services.env.ask("read my feed and like the newest post")

run, until = sys.argv[1], int(sys.argv[2])
try:
    s = Society.open(run, progress=False)
except Exception:
    s = Society.create(
        run, agents=[{"type": "llm", "n": 16, "config": {"env_mode": "ask"}},
                     {"type": "feed_reader", "n": 4}],
        env=[{"type": "social_feed", "router": "codegen"}],
        llm=LLMClient("sim/vllm-3b", seed=5), clock="virtual", seed=5, progress=False,
    )
s.run_sync(until=until)
s.close()
"""


def _run(run: Path, until: int) -> None:
    run_in_new_process(CHILD, str(run), str(until))


@pytest.mark.slow
def test_resumed_codegen_society_equals_straight_run(tmp_path: Path) -> None:
    straight, resumed = tmp_path / "a" / "run", tmp_path / "b" / "run"  # same run_id
    until, stop = 5, 2
    _run(straight, until)
    _run(resumed, stop)
    _run(resumed, until)

    ref, got = strict_rows(straight), strict_rows(resumed)
    assert got == ref, diff_summary(ref, got)
    assert committed_files(resumed) == committed_files(straight)
    assert strict_spans(resumed) == strict_spans(straight)
    routers = f"env/ticks/{until}/routers.json"
    assert (resumed / routers).read_bytes() == (straight / routers).read_bytes()

    # teeth: after the stop, programs cached before it are reused
    later_hits = [
        r for r in dataset_rows(straight, "env_requests") if r["tick"] > stop and r["cache_hit"]
    ]
    assert later_hits, "no cache hit after the stop: the test would not see a lost cache"
