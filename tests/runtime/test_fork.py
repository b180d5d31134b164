"""``Society.fork``: a new run from a committed tick of another, with changed parameters.

Realistic path: LLM persona agents on ``social_feed`` with ``sim/vllm-3b`` under the
virtual clock. A fork with nothing changed must continue exactly like its parent — every
log row (timing included; ``run_id`` names the run, so it is left out) and the committed
agent and env state; a fork with a change shares the history and then diverges.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentlab.agents import AgentBase, register_agent
from agentlab.errors import ConfigError
from agentlab.runtime import Society
from tests.runtime.resume_helpers import dataset_rows, diff_summary, strict_rows

ROOT = Path(__file__).resolve().parents[2]
KW: dict[str, Any] = {
    "agents": 60,
    "env": ["social_feed"],
    "llm": "sim/vllm-3b",
    "clock": "virtual",
    "seed": 7,
    "progress": False,
}


def _rows(run: Path, *, upto: int | None = None) -> dict[str, Counter[str]]:
    """strict_rows without ``run_id`` (the run's name), optionally only ticks <= upto."""
    out: dict[str, Counter[str]] = {}
    for name, rows in strict_rows(run).items():
        c: Counter[str] = Counter()
        for r, n in rows.items():
            d = json.loads(r)
            d.pop("run_id", None)
            if upto is None or d.get("tick") is None or d["tick"] <= upto:
                c[json.dumps(d, sort_keys=True)] += n
        if c:  # a dataset with no rows up to ``upto`` (e.g. llm_attempts) is no rows
            out[name] = c
    return out


def _run(s: Society, until: int) -> None:
    asyncio.run(s.run(until=until))
    s.close()


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A parent run to tick 4 that keeps every tick's checkpoint."""
    run = tmp_path_factory.mktemp("fork") / "parent"
    _run(Society.create(run, keep_checkpoints=True, **KW), 4)
    return run


@pytest.mark.parametrize("at", [0, 2, 3])
def test_unchanged_fork_continues_exactly_like_its_parent(
    parent: Path, tmp_path: Path, at: int
) -> None:
    fork = Society.fork_run(parent, tmp_path / "fork", at_tick=at, progress=False)
    assert fork.tick == at
    _run(fork, 4)
    ref, got = _rows(parent), _rows(tmp_path / "fork")
    assert got == ref, diff_summary(ref, got)
    a = Society.open(parent, progress=False)
    b = Society.open(tmp_path / "fork", progress=False)
    assert b.agent_states() == a.agent_states()
    assert b.env_state() == a.env_state()
    a.close()
    b.close()
    meta = json.loads((tmp_path / "fork" / "SOCIETY.json").read_text())
    assert meta["parent"] == {"run": str(parent.resolve()), "tick": at}


def test_last_tick_can_always_be_forked_and_earlier_ones_need_checkpoints(
    tmp_path: Path,
) -> None:
    p = Society.create(tmp_path / "p", **KW)
    asyncio.run(p.run(ticks=2))
    fork = p.fork(tmp_path / "f")  # the instance method, at the last commit
    with pytest.raises(ConfigError, match="keep_checkpoints=True"):
        p.fork(tmp_path / "g", at_tick=1)
    _run(p, 4)
    _run(fork, 4)
    assert _rows(tmp_path / "f") == _rows(tmp_path / "p")


def test_changed_fork_shares_the_history_then_diverges(parent: Path, tmp_path: Path) -> None:
    fork = Society.fork_run(
        parent, tmp_path / "fork", at_tick=2, progress=False, llm="sim/cloud", seed=8
    )
    _run(fork, 4)
    got = _rows(tmp_path / "fork")
    assert _rows(tmp_path / "fork", upto=2) == _rows(parent, upto=2)  # shared history
    assert got["llm_calls"] != _rows(parent)["llm_calls"]
    models = {json.loads(r)["model"]: json.loads(r)["tick"] > 2 for r in got["llm_calls"]}
    assert models == {"sim/vllm-3b": False, "sim/cloud": True}
    step = json.loads((tmp_path / "fork" / "SOCIETY_STEP.json").read_text())
    assert step["tick"] == 4
    meta = json.loads((tmp_path / "fork" / "SOCIETY.json").read_text())
    assert meta["seed"] == 8 and meta["llm"]["model"] == "sim/cloud"


def test_bad_fork_requests_name_the_problem(parent: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot change \['agents'\]"):
        Society.fork_run(parent, tmp_path / "a", agents=3)
    with pytest.raises(ConfigError, match=r"committed tick .*\(0\.\.4\), got 9"):
        Society.fork_run(parent, tmp_path / "b", at_tick=9)
    with pytest.raises(ConfigError, match="seed"):
        Society.fork_run(parent, tmp_path / "c", seed="8")
    with pytest.raises(ConfigError, match="its own directory"):
        Society.fork_run(parent, parent)
    Society.fork_run(parent, tmp_path / "d", progress=False).close()
    with pytest.raises(ConfigError, match="already holds a society"):
        Society.fork_run(parent, tmp_path / "d")


def test_cli_run_fork(parent: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "changes.toml"
    cfg.write_text("seed = 9\n[retry]\nmax_attempts = 3\n")
    out = tmp_path / "cli-fork"
    cmd = [sys.executable, "-m", "agentlab.cli", "run", str(cfg), "--fork", f"{parent}@3"]
    r = subprocess.run(
        [*cmd, "--out", str(out), "--until", "5"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    assert f"forked {parent}@3" in r.stdout
    meta = json.loads((out / "SOCIETY.json").read_text())
    assert meta["seed"] == 9 and meta["retry"]["max_attempts"] == 3
    assert meta["parent"]["tick"] == 3
    assert json.loads((out / "SOCIETY_STEP.json").read_text())["tick"] == 5
    bad = tmp_path / "bad.toml"
    bad.write_text("agents = 5\n")
    r = subprocess.run(
        [sys.executable, "-m", "agentlab.cli", "run", str(bad), "--fork", f"{parent}@3",
         "--out", str(tmp_path / "x")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and "come from the parent run" in r.stderr


def test_a_fork_that_keeps_checkpoints_can_itself_be_forked_at_its_start(
    parent: Path, tmp_path: Path
) -> None:
    # virtual time on Ray is refused for a model the time server cannot keep exact
    with pytest.raises(ConfigError, match="clock 'virtual' on executor 'ray' needs"):
        Society.fork_run(parent, tmp_path / "ray", executor="ray", llm="sim/instant")
    assert not (tmp_path / "ray" / "SOCIETY.json").exists()
    child = Society.fork_run(parent, tmp_path / "child", at_tick=1, progress=False)
    _run(child, 3)  # the parent keeps checkpoints; the child inherits the setting
    grandchild = Society.fork_run(tmp_path / "child", tmp_path / "gc", at_tick=1)
    _run(grandchild, 4)
    assert _rows(tmp_path / "gc") == _rows(parent)


BUSY_PARENT = r"""
import sys
from agentlab import Society
s = Society.create(sys.argv[1], agents={"counter": 30}, env=["social_feed"], seed=2,
                   progress=False)
s.run_sync(ticks=1)
print("ready", flush=True)
s.run_sync(ticks=100000)
"""


@pytest.mark.slow
def test_forks_of_a_parent_another_process_is_writing_are_consistent(tmp_path: Path) -> None:
    from agentlab.store import open_run

    parent = tmp_path / "parent"
    env = {**os.environ, "AGENTLAB_PROGRESS": "0"}
    cmd = [sys.executable, "-c", BUSY_PARENT, str(parent)]
    writer = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    ticks = []
    try:
        for i in range(20):
            out = tmp_path / f"fork{i}"
            fork = Society.fork_run(parent, out, progress=False)
            # the fork's agents are the parent's as of the fork's tick: the totals each
            # agent reported at that tick in the (copied) log
            rows = open_run(out).df("agent_states")
            rows = rows[rows["tick"] == fork.tick]
            logged = {r.agent_id: _total(r.summary) for r in rows.itertuples()}
            states = {a: s["total"] for a, s in fork.agent_states().items()}
            assert states == logged and len(states) == 30
            fork.close()
            ticks.append(fork.tick)
    finally:
        writer.kill()
        writer.wait(30)
    assert len(set(ticks)) > 1, ticks  # the parent committed ticks meanwhile


def _total(summary: Any) -> int:
    return int((json.loads(summary) if isinstance(summary, str) else summary)["total"])


def test_a_failed_fork_leaves_nothing_behind(tmp_path: Path) -> None:
    from agentlab.errors import CorruptRecordError

    damaged = tmp_path / "damaged"
    _run(Society.create(damaged, agents={"counter": 5}, env=["social_feed"], progress=False), 1)
    victim = damaged / "agents" / sorted(os.listdir(damaged / "agents"))[3] / "state"
    for slot in victim.iterdir():
        slot.write_bytes(b"not a slot")  # committed state damaged outside agentlab
    out = tmp_path / "fork"
    with pytest.raises(CorruptRecordError):
        Society.fork_run(damaged, out)
    assert not out.exists()  # no WRITER.lock, no half-written agents/
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(CorruptRecordError):
        Society.fork_run(damaged, mine)
    assert os.listdir(mine) == ["notes.txt"]  # what was there stays, nothing else


def test_a_forks_seed_changes_its_randomness_llm_included(tmp_path: Path) -> None:
    # persona agents draw nothing from the per-agent generator: only the LLM's seed matters
    p = Society.create(tmp_path / "p", agents=6, env=["social_feed"], llm="sim/vllm-3b",
                       clock="virtual", seed=7, progress=False)  # fmt: skip
    asyncio.run(p.run(ticks=1))
    same = p.fork(tmp_path / "same", progress=False)
    other = p.fork(tmp_path / "other", seed=99, progress=False)
    for s in (p, same, other):
        _run(s, 3)
    later = {name: _rows(tmp_path / name) for name in ("p", "same", "other")}
    assert later["same"] == later["p"]
    assert later["other"]["llm_calls"] != later["p"]["llm_calls"]
    assert later["other"]["agent_states"] != later["p"]["agent_states"]
    meta = json.loads((tmp_path / "other" / "SOCIETY.json").read_text())
    assert meta["seed"] == 99 and meta["llm"]["seed"] == 99


@register_agent("fork_feed_reader")
class _FeedReader(AgentBase):
    """Asks the same thing every tick: its program is in the code cache after the first."""

    async def step(self, tick: int) -> None:
        await self.services.env.ask("read my feed and like the newest post")


@pytest.mark.slow
def test_a_codegen_fork_carries_the_router_state(tmp_path: Path) -> None:
    """The fork gets the parent's ``routers.json`` of tick ``t`` (code cache, counters):
    its next ticks hit the cache where the parent's do, so it continues exactly."""
    kw: dict[str, Any] = {
        **KW,
        "agents": [{"type": "llm", "n": 6, "config": {"env_mode": "ask"}},
                   {"type": "fork_feed_reader", "n": 3}],
        "env": [{"type": "social_feed", "router": "codegen"}],
    }  # fmt: skip
    parent = tmp_path / "parent"
    _run(Society.create(parent, keep_checkpoints=True, **kw), 3)
    at = 1
    fork = Society.fork_run(parent, tmp_path / "fork", at_tick=at, progress=False)
    routers = f"env/ticks/{at}/routers.json"
    assert (tmp_path / "fork" / routers).read_bytes() == (parent / routers).read_bytes()
    _run(fork, 3)
    ref, got = _rows(parent), _rows(tmp_path / "fork")
    assert got == ref, diff_summary(ref, got)
    last = "env/ticks/3/routers.json"
    assert (tmp_path / "fork" / last).read_bytes() == (parent / last).read_bytes()
    # teeth: the parent reuses programs cached before the fork tick
    hits = [r for r in dataset_rows(parent, "env_requests") if r["tick"] > at and r["cache_hit"]]
    assert hits, "no cache hit after the fork tick: the test would not see a lost cache"
