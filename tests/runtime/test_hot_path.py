"""The society's per-step hot path (issue 16): each agent-step its own task (timeouts and
task groups stay the agent's), rows and spans buffered per batch, sampled ``llm.call`` spans, ``StepRandom``, and
one packed-store read per batch."""

from __future__ import annotations

import asyncio
import contextvars
import json
import pickle
import random
import time
from pathlib import Path
from typing import Any

import pytest

from agentlab.agents.base import AgentBase
from agentlab.agents.registry import register_agent
from agentlab.errors import ConfigError
from agentlab.runtime import RunServices, Society
from agentlab.runtime.batch import AgentSpec, BatchSpec, step_agent_batch
from agentlab.runtime.step_rng import StepRandom, derive_seed
from agentlab.store import open_run
from agentlab.store.packed_store import PackedStore

_SEEN: contextvars.ContextVar[str | None] = contextvars.ContextVar("test_seen", default=None)
_LOG: list[tuple[str, str | None]] = []  # (agent, what it saw of _SEEN after its await)
_STARTED: list[str] = []


@register_agent("test_sleeper")
class Sleeper(AgentBase):
    """Sets a context variable, sleeps ``sleep_s`` (real time), records what it sees."""

    def initial_state(self) -> dict[str, Any]:
        return {"steps": 0}

    async def step(self, tick: int) -> None:
        _STARTED.append(self.agent_id)
        _SEEN.set(self.agent_id)
        await asyncio.sleep(float(self.config.get("sleep_s", 0.0)))
        _LOG.append((self.agent_id, _SEEN.get()))
        self.state["steps"] += 1


@register_agent("test_scoped")
class Scoped(AgentBase):
    """Enters ``asyncio.timeout`` and a ``TaskGroup`` before its first await (user code may)."""

    def initial_state(self) -> dict[str, Any]:
        return {"steps": 0}

    async def step(self, tick: int) -> None:
        me = asyncio.current_task()
        _TASKS.append(me)
        async with asyncio.timeout(float(self.config.get("timeout_s", 5.0))):
            async with asyncio.TaskGroup() as tg:
                tg.create_task(asyncio.sleep(float(self.config.get("sleep_s", 0.0))))
        assert asyncio.current_task() is me
        self.state["steps"] += 1


_TASKS: list[Any] = []


def _spans(run: Path) -> list[dict[str, Any]]:
    return [
        json.loads(x) for f in (run / "trace").glob("*.jsonl") for x in f.read_bytes().splitlines()
    ]


def _rows(run: Path, dataset: str) -> list[dict[str, Any]]:
    return [
        json.loads(x)
        for f in sorted((run / "replay" / dataset).glob("*.jsonl"))
        for x in f.read_bytes().splitlines()
    ]


def test_agents_that_wait_still_run_concurrently_and_do_not_share_context(
    tmp_path: Path,
) -> None:
    _LOG.clear()
    soc = Society.create(tmp_path, agents=[{"type": "test_sleeper", "n": 20,
                         "config": {"sleep_s": 0.2}}], progress=False)  # fmt: skip
    t = time.perf_counter()
    soc.run_sync(ticks=1)
    wall = time.perf_counter() - t
    # 20 x 0.2 s one after another would be 4 s: the waiting steps overlap
    assert wall < 2.0, wall
    assert sorted(a for a, _ in _LOG) == sorted(soc.agent_ids)
    # a context variable an agent set before waiting is its own, not a batch-mate's
    assert all(seen == agent for agent, seen in _LOG)
    assert all(s["steps"] == 1 for s in soc.agent_states().values())
    assert len(_rows(tmp_path, "agent_states")) == 20


def test_timeouts_and_task_groups_in_a_step_belong_to_the_agent_not_its_batch(
    tmp_path: Path,
) -> None:
    # one agent whose timeout fires (its step fails) must not cancel its batch-mates
    _TASKS.clear()
    agents = [{"type": "test_scoped", "n": 6, "config": {"sleep_s": 0.05}},
              {"type": "test_scoped", "n": 1, "prefix": "late",
               "config": {"sleep_s": 5.0, "timeout_s": 0.2}}]  # fmt: skip
    soc = Society.create(tmp_path, agents=agents, retry={"max_attempts": 1}, progress=False)
    soc.run_sync(ticks=1)
    rows = _rows(tmp_path, "agent_states")
    ok = sorted(r["agent_id"] for r in rows if r["ok"])
    failed = [r["agent_id"] for r in rows if not r["ok"]]
    assert len(ok) == 6 and len(failed) == 1 and failed[0].startswith("late"), rows
    errors = _rows(tmp_path, "agent_errors")
    assert [e["error_class"] for e in errors] == ["TimeoutError"]
    assert len({id(t) for t in _TASKS}) == 7  # every step ran in a task of its own


def test_a_cancelled_batch_leaves_no_agent_running(tmp_path: Path) -> None:
    _LOG.clear()
    _STARTED.clear()
    soc = Society.create(tmp_path, agents=[{"type": "test_sleeper", "n": 5,
                         "config": {"sleep_s": 30}}], progress=False)  # fmt: skip
    spec = BatchSpec(1, 0, [AgentSpec(a, "test_sleeper") for a in soc.agent_ids])

    async def go() -> None:
        task = asyncio.ensure_future(step_agent_batch(spec, soc.proxy))
        while len(_STARTED) < 5:  # every agent is inside its sleep
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert pending == []  # the waiting agents' tasks were cancelled and awaited

    asyncio.run(go())
    assert _LOG == []  # no agent got past its sleep
    assert not (tmp_path / "replay" / "agent_states").exists() or not _rows(
        tmp_path, "agent_states"
    )


def test_llm_call_spans_can_be_sampled_and_rows_stay_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(name: str, rate: str) -> tuple[int, set[str]]:
        monkeypatch.setenv("AGENTLAB_LLM_SPANS", rate)
        out = tmp_path / name
        soc = Society.create(out, agents=[{"type": "counter", "n": 40,
                             "config": {"llm_calls": 2}}], llm="sim/instant", seed=1,
                             progress=False)  # fmt: skip
        soc.run_sync(ticks=2)
        soc.close()
        assert len(_rows(out, "llm_calls")) == 40 * 2 * 2
        llm = [s for s in _spans(out) if s["name"] == "llm.call"]
        return len(llm), {f"{s['attributes']['gen_ai.agent.id']}@{s['attributes']['agentlab.tick']}"
                          for s in llm}  # fmt: skip

    n_all, _ = run("all", "1")
    assert n_all == 160
    n_none, _ = run("none", "0")
    assert n_none == 0
    n_half, who = run("half", "0.5")
    assert 40 < n_half < 120  # about half, by a hash of agent, tick and call number
    assert run("half_again", "0.5") == (n_half, who)  # the same calls on a rerun
    monkeypatch.setenv("AGENTLAB_LLM_SPANS", "lots")
    with pytest.raises(ConfigError, match="AGENTLAB_LLM_SPANS"):
        RunServices(tmp_path / "x", "sim/instant")
    with pytest.raises(ConfigError, match="llm_spans"):
        RunServices(tmp_path / "x", "sim/instant", llm_spans=2.0)


def test_batch_spans_and_rows_keep_their_shape(tmp_path: Path) -> None:
    soc = Society.create(tmp_path, agents=[{"type": "counter", "n": 6,
                         "config": {"llm_calls": 1}}], llm="sim/instant", seed=3,
                         progress=False, batch_size=4)  # fmt: skip
    soc.run_sync(ticks=1)
    soc.close()
    spans = open_run(tmp_path).spans_df()
    llm = spans[spans.name == "llm.call"]
    assert len(llm) == 6 and set(llm.kind) == {"client"} and set(llm.status) == {"ok"}
    for _, sp in llm.iterrows():
        a = json.loads(sp.attributes) if isinstance(sp.attributes, str) else sp.attributes
        assert a["agentlab.tick"] == 1 and a["gen_ai.operation.name"] == "chat"
        assert sp.end >= sp.start and len(sp.trace_id) == 32 and len(sp.span_id) == 16
    # one trace (the tick's); each call under its own agent's step span
    steps = spans[spans.name == "agent.step"]
    assert llm.span_id.is_unique and set(spans.trace_id) == set(llm.trace_id)
    assert sorted(llm.parent) == sorted(steps.span_id) and spans.trace_id.nunique() == 1
    assert (spans.name == "society.batch").sum() == 2
    calls = open_run(tmp_path).llm_calls_df()
    assert sorted(calls.agent_id) == sorted(soc.agent_ids) and set(calls.stage) == {"count"}


def test_step_random_is_a_cheap_deterministic_random() -> None:
    seed = derive_seed(7, "a1", 3)
    a, b = StepRandom(seed), StepRandom(seed)
    draws = [a.random() for _ in range(5)]
    assert draws == [b.random() for _ in range(5)]
    assert isinstance(a, random.Random) and all(0.0 <= x < 1.0 for x in draws)
    assert StepRandom(derive_seed(7, "a2", 3)).random() != StepRandom(seed).random()
    r = StepRandom(1)
    r.random()
    clone = pickle.loads(pickle.dumps(r))
    assert [clone.randint(0, 9) for _ in range(20)] == [r.randint(0, 9) for _ in range(20)]
    st = r.getstate()
    x = r.gauss(0, 1)
    r.setstate(st)
    assert r.gauss(0, 1) == x
    # the derived methods of random.Random work on its core
    r.shuffle(lst := list(range(10)))
    assert sorted(lst) == list(range(10)) and len(r.sample(range(100), 5)) == 5
    assert r.getrandbits(0) == 0 and r.getrandbits(130) < 2**130
    with pytest.raises(ValueError):
        r.getrandbits(-1)
    # a fair stream: mean and spread of 20k uniforms, and every value of a small range
    u = [StepRandom(5).random() for _ in range(1)] + [r.random() for _ in range(20_000)]
    mean = sum(u) / len(u)
    assert abs(mean - 0.5) < 0.01
    assert {r.randrange(6) for _ in range(200)} == set(range(6))


def test_packed_read_many_sees_pending_writes(tmp_path: Path) -> None:
    store = PackedStore(tmp_path / "a.sqlite", group_commit=True)
    store.write_many("a1", {"k": b"1", "j": b"2"})
    store.flush()
    store.write_many("a1", {"k": b"3"})  # pending
    store.write_many("a2", {"k": b"4"})  # pending, new agent
    got = store.read_many(["a1", "a2", "a3"], ["k", "j"])
    assert got == {("a1", "k"): b"3", ("a1", "j"): b"2", ("a2", "k"): b"4"}
    assert store.read_many([], ["k"]) == {}
    ids = [f"b{i:04d}" for i in range(1200)]  # more than one query's worth
    for a in ids:
        store.write_many(a, {"k": a.encode()})
    store.flush()
    got = store.read_many(ids, ["k"])
    assert len(got) == 1200 and got["b1199", "k"] == b"b1199"


def test_load_agent_from_preloaded_bytes_equals_from_workspace(tmp_path: Path) -> None:
    from agentlab.agents.base import load_agent
    from agentlab.agents.builtin import CounterAgent
    from agentlab.agents.workspace import Workspace, preload

    soc = Society.create(tmp_path, agents={"counter": 3}, seed=2, progress=False,
                         store="packed")  # fmt: skip
    soc.run_sync(ticks=3)
    store, ids, c = soc.store, soc.agent_ids, soc.tick
    loaded = preload(store, ids, c)
    assert loaded is not None and set(loaded) == set(ids)
    for a in ids:
        ws = Workspace.of_known(store, a)
        assert ws == Workspace(store, a)
        ref = CounterAgent.from_workspace(ws, committed_tick=c)
        for slot in (loaded[a][1], None, b"garbage"):  # guessed slot, missing, unreadable
            got = load_agent(CounterAgent, ws, None, c, loaded[a][0], slot)
            assert (got.state, got.base_tick, got._base_slot) == (
                ref.state, ref.base_tick, ref._base_slot,
            )  # fmt: skip
        # the other slot (tick c - 1) is not the committed one: both slots are read
        other = store.read(a, f"state/state.{1 - c % 2}.json")
        got = load_agent(CounterAgent, ws, None, c, loaded[a][0], other)
        assert got.base_tick == c and got.state == ref.state
    assert preload(_dir_store(tmp_path), ids, c) is None  # reads key by key


def _dir_store(path: Path) -> Any:
    from agentlab.store.agent_store import DirectoryStore

    return DirectoryStore(path / "agents")


def test_step_random_randint_fast_path_matches_random_random() -> None:
    for seed in range(100):
        a, b = StepRandom(seed), StepRandom(seed)
        for lo, hi in ((0, 999), (0, 0), (5, 6), (-10, 10), (3, 1_000_003), (0, 2**70)):
            assert a.randint(lo, hi) == random.Random.randint(b, lo, hi)
    with pytest.raises(ValueError):
        StepRandom(1).randint(5, 4)


def test_open_refuses_an_invalid_agent_id_in_a_hand_edited_society_file(tmp_path: Path) -> None:
    from agentlab.errors import InvalidAgentIdError

    soc = Society.create(tmp_path, agents={"counter": 2}, progress=False, store="packed")
    soc.close()
    meta = json.loads((tmp_path / "SOCIETY.json").read_text())
    meta["agents"][0][0] = "../escape"
    (tmp_path / "SOCIETY.json").write_text(json.dumps(meta))
    with pytest.raises(InvalidAgentIdError, match="escape"):
        Society.open(tmp_path, progress=False)


def test_packed_read_pairs_equals_read_many_with_pending_writes(tmp_path: Path) -> None:
    # The batch's one-row-per-agent read must see exactly what read_many sees, pending
    # group-commit writes included, even when only one of the two keys is on disk.
    store = PackedStore(tmp_path / "a.sqlite", group_commit=True)
    rnd = random.Random(0)
    ids = [f"a{i:04d}" for i in range(1200)]  # more than one query's worth
    keys = ["config.json", "state/state.0.json", "state/state.1.json"]
    for a in ids:
        for k in keys:
            if rnd.random() < 0.8:
                store.write_many(a, {k: f"{a}{k}".encode()})
        if rnd.random() < 0.5:
            store.flush()
    for trial in range(4):
        for a in rnd.sample(ids, 300):
            store.write_known(a, rnd.choice(keys), f"{a}-{trial}".encode())  # pending
        sample = rnd.sample(ids, 700)
        for second in keys[1:]:
            ref = store.read_many(sample, ("config.json", second))
            want = {
                a: (ref[a, "config.json"], ref.get((a, second)))
                for a in sample
                if (a, "config.json") in ref
            }
            assert store.read_pairs(sample, "config.json", second) == want
        if trial % 2:
            store.flush()
    assert store.read_pairs([], "config.json", keys[1]) == {}


class _Escaped(BaseException):
    """Not an ``Exception``: a step's own handler lets it through (like a cancellation)."""


@register_agent("test_escaper")
class Escaper(AgentBase):
    """Agent ``<prefix>0`` raises a BaseException; the others wait ``sleep_s`` first."""

    async def step(self, tick: int) -> None:
        _STARTED.append(self.agent_id)
        if self.agent_id.endswith("0"):
            await asyncio.sleep(0.05)
            raise _Escaped(self.agent_id)
        await asyncio.sleep(float(self.config.get("sleep_s", 0.0)))
        _LOG.append((self.agent_id, None))


def test_what_escapes_a_step_ends_its_batch_and_cancels_the_batch_mates(tmp_path: Path) -> None:
    _LOG.clear()
    _STARTED.clear()
    soc = Society.create(tmp_path, agents=[{"type": "test_escaper", "n": 4,
                         "config": {"sleep_s": 30}}], progress=False)  # fmt: skip
    spec = BatchSpec(1, 0, [AgentSpec(a, "test_escaper") for a in soc.agent_ids])

    async def go() -> None:
        with pytest.raises(_Escaped):
            await asyncio.wait_for(step_agent_batch(spec, soc.proxy), 10)
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []

    asyncio.run(go())
    assert sorted(_STARTED) == sorted(soc.agent_ids) and _LOG == []


def test_derive_seed_fast_path_hashes_the_same_bytes() -> None:
    import hashlib

    def reference(seed: Any, agent_id: str, tick: Any, salt: str = "") -> int:
        text = f"{seed}\x1f{agent_id}\x1f{tick}\x1f{salt}".encode()
        return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1

    cases = [(0, "a1", 1), (-5, "x-y.z", 10**30, "salt"), (True, "b", 2), (3, "c", False),
             (7, "ü", 0), (2**70, "a", -1)]  # fmt: skip
    for case in cases:
        assert derive_seed(*case) == reference(*case), case
