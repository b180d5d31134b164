"""Resume equals an uninterrupted run for a realistic society — timing fields included.

LLM persona agents on ``social_feed`` with ``sim/vllm-3b`` under the virtual clock: a
straight run to tick N versus the same run stopped at a tick, reopened with
``Society.open`` in a NEW process (fresh interpreter, fresh hash seed) and run on. Every
committed agent state file, the env checkpoint, the commit's learned LLM state and every
log row (``env_events``, ``messages``, ``llm_calls``, ``timeline``, ``agent_states`` ...)
must be identical; see ``resume_helpers`` for the three columns that may differ and why.
"""

from __future__ import annotations

import json
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
import json, sys
from agentlab import Society
from agentlab.llm import LLMClient
run, until, n, faults = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
try:
    s = Society.open(run, progress=False)
except Exception:
    s = Society.create(
        run, agents=n, env=["social_feed"], llm=LLMClient("sim/vllm-3b", seed=7, **faults),
        clock="virtual", seed=7, batch_size=64, progress=False,
    )
s.run_sync(until=until)
s.close()
"""


def _run(run: Path, until: int, n: int, faults: dict[str, float]) -> None:
    # A new interpreter per part: nothing survives in memory between the parts.
    run_in_new_process(CHILD, str(run), str(until), str(n), json.dumps(faults))


def _llm_rows(run: Path) -> list[dict]:
    return dataset_rows(run, "llm_calls")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("n", "stops", "until", "faults"),
    [
        # the case the issue found: 200 agents, stop at tick 1, reopen, run to tick 4
        (200, [1], 4, {}),
        # faults make the limiter cut and retries back off: reopened twice
        (60, [1, 3], 5, {"sim_p_rate_limit": 0.1, "sim_p_timeout": 0.05}),
    ],
    ids=["200-agents-stop-at-1", "60-agents-faults-two-reopens"],
)
def test_resumed_llm_society_equals_straight_run_including_timing(
    tmp_path: Path, n: int, stops: list[int], until: int, faults: dict[str, float]
) -> None:
    straight, resumed = tmp_path / "a" / "run", tmp_path / "b" / "run"  # same run_id
    _run(straight, until, n, faults)
    for stop in [*stops, until]:
        _run(resumed, stop, n, faults)

    ref, got = strict_rows(straight), strict_rows(resumed)
    assert got.keys() == ref.keys()
    assert got == ref, diff_summary(ref, got)
    assert committed_files(resumed) == committed_files(straight)
    assert strict_spans(resumed) == strict_spans(straight)

    # The comparison has teeth: timings are real queueing under load, not constants.
    rows = _llm_rows(straight)
    assert len(rows) >= 2 * n * until // 2
    assert len({r["start"] for r in rows}) > len(rows) // 2
    if not faults:  # AIMD above the 8 slots: calls queue at the server
        assert any((r["queue_wait"] or 0) > 0 for r in rows), "no call ever queued"
    else:
        assert any(r["outcome"] != "ok" or r["attempts"] > 1 for r in rows)
        step = json.loads((straight / "SOCIETY_STEP.json").read_bytes())
        assert step["llm"]["limiter"]["decreases"] > 0, "faults never cut the AIMD limit"
