"""A society keeps no GC-tracked object per agent, so a full collection costs the same at
any N (it walked ~2 objects per agent before: ``AgentSpec`` and the ``[id, type]`` pairs).
"""

from __future__ import annotations

import gc
import pickle
from pathlib import Path
from typing import Any

import pytest

from agentlab.agents.base import AgentBase
from agentlab.agents.registry import register_agent
from agentlab.runtime import AgentSpec, AgentSpecs, Society
from agentlab.runtime.batch import BatchSpec
from agentlab.runtime.gc_tuning import GC_GEN1_THRESHOLD

_GC_SEEN: list[tuple[tuple[int, int, int], int]] = []


@register_agent("test_gc_probe")
class GCProbe(AgentBase):
    """Records the GC's thresholds and frozen-object count as its step sees them."""

    def initial_state(self) -> dict[str, Any]:
        return {"steps": 0}

    async def step(self, tick: int) -> None:
        _GC_SEEN.append((gc.get_threshold(), gc.get_freeze_count()))
        self.state["steps"] += 1


def _tracked_after_open(path: Path, n: int) -> int:
    soc = Society.create(path, agents={"counter": n}, progress=False, store="packed")
    soc.close()
    soc = Society.open(path, progress=False)
    gc.collect()  # tuples of str are untracked by a collection that sees them
    tracked = len(gc.get_objects())
    assert len(soc.agent_ids) == n
    soc.close()
    return tracked


def test_tracked_objects_do_not_grow_with_the_number_of_agents(tmp_path: Path) -> None:
    _tracked_after_open(tmp_path / "warm", 100)  # imports, caches
    small = _tracked_after_open(tmp_path / "small", 1_000)
    large = _tracked_after_open(tmp_path / "large", 20_000)
    assert large - small < 500, (small, large)  # was ~2 per agent: +38,000


def test_agent_specs_read_like_a_list_of_agent_specs() -> None:
    specs = AgentSpecs(["a", "b", "c"], ["counter", "counter", "echo"])
    assert len(specs) == 3 and specs[1] == AgentSpec("b", "counter")
    assert list(specs) == [AgentSpec("a", "counter"), AgentSpec("b", "counter"),
                           AgentSpec("c", "echo")]  # fmt: skip
    part = specs[1:]
    assert isinstance(part, AgentSpecs) and part.ids == ("b", "c")
    assert part == [AgentSpec("b", "counter"), AgentSpec("c", "echo")]
    again = pickle.loads(pickle.dumps(BatchSpec(1, 0, part)))
    assert again.agents == part and again.agents.ids == ("b", "c")  # type: ignore[attr-defined]
    assert [s.agent_id for s in specs[::-1]] == ["c", "b", "a"]


def test_society_batches_carry_their_own_slice(tmp_path: Path) -> None:
    soc = Society.create(tmp_path, agents={"counter": 10}, progress=False, batch_size=4)
    batches = soc._batches(1)
    assert [len(b.agents) for b in batches] == [4, 4, 2]
    assert [a for b in batches for a in b.agents] == list(soc.agent_specs)
    assert len(pickle.dumps(batches[2])) < len(pickle.dumps(batches[0]))
    soc.close()


def test_no_per_agent_list_is_left_for_a_full_collection_to_walk(tmp_path: Path) -> None:
    # A tracked list of n items is walked item by item by every full collection even when
    # its items are untracked (a cache miss each at 1M): nothing the society holds may be
    # a tracked container with one item per agent.
    n = 5_000
    soc = Society.create(tmp_path, agents={"counter": n}, progress=False, store="packed")
    soc.run_sync(1)
    gc.collect()
    gc.collect()  # a tuple of tuples is untracked once its items were (the next pass)
    big, seen, todo = [], set(), [soc]
    while todo:  # everything reachable from the society through tracked objects
        obj = todo.pop()
        if id(obj) in seen or not gc.is_tracked(obj) or isinstance(obj, type):
            continue
        seen.add(id(obj))
        if isinstance(obj, list | tuple | dict | set) and len(obj) >= n:
            big.append(type(obj).__name__)
        if not hasattr(obj, "__module__") or not str(getattr(obj, "__name__", "")):
            todo.extend(gc.get_referents(obj))
    assert big == [], big
    soc.close()


def test_a_run_tunes_the_gc_for_its_length_and_puts_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gc_tuning.GCTuning: generation-1 threshold raised and the heap frozen while the run
    # steps agents; as before once run() returns (nothing stays frozen for good)
    monkeypatch.delenv("AGENTLAB_GC_FREEZE", raising=False)
    gc.unfreeze()  # another test's litellm import may have frozen its heap
    before = gc.get_threshold()
    soc = Society.create(tmp_path, agents={"test_gc_probe": 3}, progress=False)
    _GC_SEEN.clear()
    soc.run_sync(2)
    assert len(_GC_SEEN) == 6
    for thresholds, frozen in _GC_SEEN:
        assert thresholds[1] == max(before[1], GC_GEN1_THRESHOLD)
        assert (thresholds[0], thresholds[2]) == (before[0], before[2])
        assert frozen > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    gc.freeze()  # something else froze first (litellm): left frozen, not unfrozen by us
    _GC_SEEN.clear()
    soc.run_sync(1)
    assert _GC_SEEN and all(t[1] == max(before[1], GC_GEN1_THRESHOLD) for t, _ in _GC_SEEN)
    assert gc.get_freeze_count() > 0 and gc.get_threshold() == before
    gc.unfreeze()
    monkeypatch.setenv("AGENTLAB_GC_FREEZE", "0")  # off: the GC as the process set it
    _GC_SEEN.clear()
    soc.run_sync(1)
    assert all(seen == (before, 0) for seen in _GC_SEEN) and len(_GC_SEEN) == 3
    soc.close()


def test_overlapping_runs_share_one_gc_setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two societies running at once in one process: the first to start sets the GC up,
    # the last to end puts it back (not the first to end, not to the tuned values)
    import asyncio

    monkeypatch.delenv("AGENTLAB_GC_FREEZE", raising=False)
    gc.unfreeze()
    before = gc.get_threshold()
    a = Society.create(tmp_path / "a", agents={"test_gc_probe": 2}, progress=False)
    b = Society.create(tmp_path / "b", agents={"test_gc_probe": 2}, progress=False)
    _GC_SEEN.clear()

    async def both() -> None:
        await asyncio.gather(a.run(ticks=1), b.run(ticks=3))

    asyncio.run(both())
    assert len(_GC_SEEN) == 8
    assert all(t[1] == max(before[1], GC_GEN1_THRESHOLD) and f > 0 for t, f in _GC_SEEN)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    a.close()
    b.close()
