"""Adversarial: a packed society killed with a real SIGKILL from outside, at random wall
times of its ticks (not at instrumented points), then reopened and run on: its agents,
log rows and spans equal a straight run's. Plus the packed store's odd inputs."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentlab.store.packed_store import PackedStore, export_dirs
from tests.runtime.resume_helpers import strict_rows, strict_spans

UNTIL = 6
_SCRIPT = """
import sys
from pathlib import Path
from agentlab.runtime import Society
run, until = Path(sys.argv[1]), int(sys.argv[2])
if (run / "SOCIETY_STEP.json").exists():
    s = Society.open(run, progress=False)
else:
    s = Society.create(run, agents=[{"type": "counter", "n": 2500, "config": {"llm_calls": 1}},
                                    {"type": "counter", "n": 500}],
                       llm="sim/instant", seed=3, batch_size=200, clock="virtual",
                       progress=False, store="packed")
print("ready", flush=True)
s.run_sync(until=until)
s.close()
"""


def _child(run: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, str(run), str(UNTIL)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _summary(run: Path) -> dict[str, Any]:
    from agentlab.runtime import Society

    s = Society.open(run, progress=False)
    out = {"tick": s.tick, "agents": s.agent_states()}
    s.close()
    out["rows"] = strict_rows(run)
    out["spans"] = strict_spans(run)
    return out


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    run = tmp_path_factory.mktemp("straight") / "run"
    p = _child(run)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
    t = time.perf_counter()
    _, err = p.communicate(timeout=120)
    run_s = time.perf_counter() - t  # its ticks, after start-up: where the kills must land
    assert p.returncode == 0, err
    return {**_summary(run), "run_s": run_s}


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(3))
def test_real_sigkill_mid_tick_then_open_equals_straight_run(
    straight: dict[str, Any], tmp_path: Path, trial: int
) -> None:
    rng = random.Random(1000 + trial)
    run = tmp_path / "run"
    kills = tries = 0
    scale = 1.0  # of the straight run's time, halved each time a run outran every kill
    while tries < 3 or (not kills and tries < 8):  # killed up to three times at random
        p = _child(run)
        assert p.stdout is not None
        if tries == 0 and trial == 0:  # the first kill of one trial lands in start-up/create
            time.sleep(rng.uniform(0.3, 1.2) * scale)
        else:  # the others mid-run, in any of its ticks (a share of the straight run's
            # time: a fixed window outlasted the whole run on a fast idle box, and then no
            # kill landed; a resumed run has fewer ticks left, so a later kill may miss)
            assert p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
            time.sleep(rng.uniform(0.02, 0.85) * straight["run_s"] * scale)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.communicate(timeout=60)
        tries += 1
        if not kills:  # it ran to the end before any kill: this box ran it faster than it
            # ran the straight run (the load moves), so the run starts over, killed sooner
            shutil.rmtree(run, ignore_errors=True)
            scale /= 2
    assert kills, "no kill landed"
    p = _child(run)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    got = _summary(run)
    assert got["tick"] == UNTIL == straight["tick"]
    assert got["agents"] == straight["agents"]
    assert got["rows"] == straight["rows"]
    assert got["spans"] == straight["spans"]


IDS = ["a1", "A1", "x.y-z_9", "9" * 128, "b"]
KEYS = ["config.json", "state/state.0.json", "state/state.1.json", "AGENT.json", "notes/ü.txt"]


@pytest.mark.parametrize("group_commit", [False, True])
def test_packed_store_reads_what_was_written_under_random_operations(
    tmp_path: Path, group_commit: bool
) -> None:
    """A random mix of write_many, write_known, flush and delete against a dict model:
    read, read_many, read_pairs (the batch preload), agents and keys always agree, with
    empty, binary, unicode and 100 KB values and ids that differ only in case; the
    export to directories holds the same bytes."""
    from agentlab.store.agent_store import DirectoryStore

    for seed in range(6):
        rng = random.Random(seed)
        store = PackedStore(tmp_path / f"{seed}" / "agents.sqlite", group_commit=group_commit)
        model: dict[tuple[str, str], bytes] = {}

        def value(rng: random.Random = rng) -> bytes:
            return rng.choice(
                [b"", b"\x00\xff" * rng.randint(0, 5), "ünï ✓".encode() * 3, bytes(100_000)]
            )

        for step in range(250):
            op, a, k = rng.random(), rng.choice(IDS), rng.choice(KEYS)
            where = (seed, step)
            if op < 0.3:
                items = {kk: value() for kk in rng.sample(KEYS, rng.randint(1, 3))}
                store.write_many(a, items)
                model.update({(a, kk): v for kk, v in items.items()})
            elif op < 0.5 and k.startswith("state/"):
                v = value()
                store.write_known(a, k, v)
                model[a, k] = v
            elif op < 0.55:
                store.flush()
            elif op < 0.6:
                store.delete(a)
                model = {ak: v for ak, v in model.items() if ak[0] != a}
            elif op < 0.7:
                assert store.read(a, k) == model.get((a, k)), where
            elif op < 0.8:
                sel, ks = rng.sample(IDS, rng.randint(0, 5)), rng.sample(KEYS, rng.randint(1, 3))
                want = {(x, y): model[x, y] for x in sel for y in ks if (x, y) in model}
                assert store.read_many(sel, ks) == want, where
            elif op < 0.9:
                sel = rng.sample(IDS, rng.randint(0, 5))
                first, second = rng.sample(KEYS, 2)
                want_pairs = {
                    x: (model[x, first], model.get((x, second))) for x in sel if (x, first) in model
                }
                assert store.read_pairs(sel, first, second) == want_pairs, where
            elif op < 0.95:
                assert store.agents() == sorted({x for x, _ in model}), where
            else:
                assert store.keys(a) == sorted(kk for x, kk in model if x == a), where
        store.flush()
        # a second connection (another process would open its own) sees the same rows
        again = PackedStore(store.path)
        assert {(x, y): again.read(x, y) for x, y in model} == model
        out = tmp_path / f"{seed}" / "export"
        assert export_dirs(store, out) == len({x for x, _ in model})
        exported = DirectoryStore(out)
        assert {(x, y): exported.read(x, y) for x, y in model} == model


def test_a_packed_run_exported_to_directories_runs_on_as_a_directory_run(
    tmp_path: Path,
) -> None:
    """``export_dirs`` into the run's ``agents/`` and the SQLite file removed: the run
    reopens on the directory store and its next ticks equal the packed run's."""
    from agentlab.runtime import Society
    from agentlab.store.packed_store import PACKED_FILE

    def make(run: Path) -> Any:
        return Society.create(run, agents=[{"type": "counter", "n": 30, "config": {"llm_calls": 1}}],
                              env=["social_feed"], llm="sim/instant", seed=3, batch_size=8,
                              clock="virtual", progress=False, store="packed")  # fmt: skip

    straight = make(tmp_path / "a" / "run")
    straight.run_sync(until=4)
    want = straight.agent_states()
    straight.close()
    run = tmp_path / "b" / "run"
    soc = make(run)
    soc.run_sync(until=2)
    soc.close()
    assert export_dirs(PackedStore(run / PACKED_FILE), run / "agents") == 30
    for f in run.glob(PACKED_FILE + "*"):
        f.unlink()
    soc = Society.open(run, progress=False)
    assert type(soc.store).__name__ == "DirectoryStore"
    soc.run_sync(until=4)
    assert soc.agent_states() == want
    soc.close()
    assert strict_rows(run) == strict_rows(tmp_path / "a" / "run")


def _register_odd_state_agent() -> None:
    from agentlab.agents.base import AgentBase
    from agentlab.agents.registry import register_agent

    @register_agent("adversarial_odd_state")
    class OddState(AgentBase):
        """State of every awkward shape: empty containers, unicode, 200 KB, deep nesting."""

        def initial_state(self) -> dict[str, Any]:
            return {}

        async def step(self, tick: int) -> None:
            svc = self.services
            assert svc is not None
            r = await svc.llm.complete([{"role": "user", "content": f"ünï {self.agent_id}"}])
            n = svc.rng.randint(0, 3)
            self.state = {
                "empty": {} if n else [],
                "text": "ünïcødé ✓ 日本語 \u0000 \t" * (tick + 1),
                "big": r.text * (2000 if n == 0 else 1),
                "deep": {"a": [[{"b": [tick, None, True, 1.5e-300, -0.0]}]]},
                "ticks": [*self.state.get("ticks", []), tick],
            }


@pytest.mark.parametrize("store", ["packed", "directory"])
def test_unicode_large_and_empty_state_survive_reopening(tmp_path: Path, store: str) -> None:
    from agentlab.runtime import Society

    _register_odd_state_agent()

    def run(path: Path, reopen: bool) -> Any:
        soc = Society.create(path, agents=[{"type": "adversarial_odd_state", "n": 12}],
                             llm="sim/instant", seed=8, batch_size=5, clock="virtual",
                             progress=False, store=store)  # fmt: skip
        if reopen:
            soc.run_sync(until=2)
            soc.close()
            soc = Society.open(path, progress=False)
        out = soc.run_sync(until=4)
        assert out["errors"] == 0
        states = soc.agent_states()
        soc.close()
        return states

    straight, reopened = run(tmp_path / "a" / "run", False), run(tmp_path / "b" / "run", True)
    assert straight == reopened
    assert all(s["ticks"] == [1, 2, 3, 4] for s in straight.values())
    assert max(len(s["big"]) for s in straight.values()) > 100_000
