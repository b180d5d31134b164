"""The stop rule (``runtime/stop_rule.py``): a tick whose agent steps all failed (or more
than ``max_error_share`` of them) is not committed and ``run()`` raises."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentlab.errors import ConfigError, TickFailedError
from agentlab.llm import LLMClient
from agentlab.llm.sim_serve import SimServeHandle, start_sim_server
from agentlab.runtime import Society
from agentlab.store import open_run

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def server() -> Iterator[SimServeHandle]:
    with start_sim_server("instant", seed=0) as h:
        yield h


def _missing_model(h: SimServeHandle) -> LLMClient:
    # the server answers 404 model_not_found to every call: every LLM agent's step fails
    return LLMClient("openai/no-such-model", base_url=h.base_url, max_retries=0)


def _status(run_dir: Path) -> str:
    return str(json.loads((run_dir / "run.json").read_text())["status"])


def test_a_tick_with_no_successful_step_is_not_committed_and_run_raises(
    server: SimServeHandle, tmp_path: Path
) -> None:
    run_dir = tmp_path / "all_fail"
    s = Society.create(run_dir, agents={"llm": 4}, env=["social_feed"], llm=_missing_model(server),
                       progress=False)  # fmt: skip
    with pytest.raises(TickFailedError, match=r"tick 1 was not committed.*4 of 4.*no-such-model"):
        s.run_sync(ticks=3)
    assert s.tick == 0 and _status(run_dir) == "failed"
    # the failed tick's errors are readable until the run is opened again
    assert len(open_run(run_dir).df("agent_errors")) >= 4
    s.close()
    s = Society.open(run_dir, progress=False)
    assert s.tick == 0 and open_run(run_dir).df("agent_errors").empty  # cut back on resume
    s.close()


def test_max_error_share_stops_a_partly_failed_tick(server: SimServeHandle, tmp_path: Path) -> None:
    agents = {"counter": 2, "llm": 3}  # counters never call the LLM: 3 of 5 fail
    strict = Society.create(tmp_path / "strict", agents=agents, llm=_missing_model(server),
                            max_error_share=0.5, progress=False)  # fmt: skip
    with pytest.raises(TickFailedError, match=r"60% of agents failed, above max_error_share=0.5"):
        strict.run_sync(ticks=1)
    assert strict.tick == 0
    strict.close()
    default = Society.create(tmp_path / "default", agents=agents, llm=_missing_model(server),
                             progress=False)  # fmt: skip
    out = default.run_sync(ticks=2)  # some steps succeed: the default rule lets it commit
    assert default.tick == 2 and out["steps"] == 4 and out["errors"] >= 6
    default.close()


def test_max_error_share_none_never_stops(server: SimServeHandle, tmp_path: Path) -> None:
    s = Society.create(tmp_path / "never", agents={"llm": 2}, llm=_missing_model(server),
                       max_error_share=None, progress=False)  # fmt: skip
    out = s.run_sync(ticks=2)
    assert s.tick == 2 and out["steps"] == 0 and out["errors"] >= 4
    s.close()
    with pytest.raises(ConfigError, match="max_error_share"):
        Society.create(tmp_path / "bad", agents=1, max_error_share=1.5)
