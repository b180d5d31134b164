"""Benchmarks print ratios of like to like: CPU over CPU, wall over wall (issue 26).

The shared helper ``benchmarks/_measure.py`` tags every time with its kind and refuses a
ratio of mixed kinds; each benchmark's floor and subject functions are run here with a fake
wall clock that jumps 1000 s on every read: a CPU-timed figure does not see it, so the ratio
cannot move with the machine's load.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def measure() -> ModuleType:
    """The helper module the benchmarks import (``from _measure import ...``): the same object,
    so a clock patched here is the clock their timers read."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    import _measure

    return _measure


@pytest.fixture
def slow_wall(monkeypatch: pytest.MonkeyPatch, measure: ModuleType) -> Iterator[None]:
    """``time.perf_counter`` (and the helper's wall clock) jump 1000 s on every read."""
    # from 0.0: whole numbers stay exact, so a difference is 1000.0, never 999.9999999999995
    # (which a start at perf_counter()'s current value gave once under load)
    state = {"t": 0.0}

    def fake() -> float:
        state["t"] += 1000.0
        return state["t"]

    monkeypatch.setattr(time, "perf_counter", fake)
    monkeypatch.setattr(measure, "clock_wall", fake)
    yield


def test_ratio_refuses_mixed_kinds(measure: ModuleType) -> None:
    cpu = measure.Measure(2e-5, "cpu", "cpu")
    tree = measure.Measure(1e-5, "cpu", "tree")
    wall = measure.Measure(1e-5, "wall", "wall")
    assert measure.ratio(cpu, tree) == pytest.approx(2.0)  # process and tree CPU: same kind
    with pytest.raises(ValueError, match="mixes cpu time"):
        measure.ratio(cpu, wall)
    with pytest.raises(ValueError, match="mixes wall time"):
        _ = wall + cpu
    with pytest.raises(TypeError):
        measure.ratio(cpu, 1e-5)  # a bare float carries no kind


def test_timer_kinds(measure: ModuleType) -> None:
    assert measure.Timer("cpu").kind == "cpu"
    assert measure.Timer("tree").kind == "cpu"
    assert measure.Timer("wall").kind == "wall"
    with pytest.raises(ValueError, match="valid"):
        measure.Timer("monotonic")


def test_cpu_timers_ignore_a_slow_wall_clock(measure: ModuleType, slow_wall: None) -> None:
    def spin() -> None:
        sum(range(20_000))

    for timer in ("cpu", "tree"):
        assert measure.time_call(spin, timer).seconds < 1.0
    assert measure.time_call(spin, "wall").seconds >= 1000.0  # the fake clock is in effect


def test_tree_cpu_counts_children(measure: ModuleType) -> None:
    """A child process's CPU shows in the tree timer and not in this process's."""
    import subprocess

    code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    with measure.Timer("tree") as tree, measure.Timer("cpu") as own:
        subprocess.run([sys.executable, "-c", code], check=True)
    assert tree.seconds >= 0.25
    assert own.seconds < tree.seconds


def test_tree_cpu_survives_a_descendant_orphaned_mid_interval(measure: ModuleType) -> None:
    """A grandchild counted at the start whose parent dies and which then exits (reaped by
    init, outside the tree) must not take its past CPU out of the interval: summing the tree
    twice and subtracting read -3.4 s here once."""
    import subprocess

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass"
    # the parent starts a grandchild that burns 0.4 s, then sleeps until told to leave
    parent_code = (
        "import subprocess, sys\n"
        f"g = subprocess.Popen([sys.executable, '-c', {burn.format(s=0.4)!r} + '\\nimport time; time.sleep(1.0)'])\n"
        "sys.stdin.readline()\n"  # leave without waiting for the grandchild
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdin=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the grandchild has burnt its CPU
        kids = [s for s in measure.tree_sample(parent.pid).procs.items() if s[0] != parent.pid]
        if kids and kids[0][1][0] >= 0.35:
            break
        time.sleep(0.05)
    with measure.Timer("tree") as tree:
        assert parent.stdin is not None
        parent.stdin.write(b"\n")
        parent.stdin.close()
        parent.wait()
        time.sleep(1.5)  # the orphan exits, reaped by init
        subprocess.run([sys.executable, "-c", burn.format(s=0.3)], check=True)
    assert tree.seconds >= 0.25  # the 0.3 s child still counts; the orphan's past does not subtract


def test_repeat_interleaves_and_keeps_min_median(measure: ModuleType) -> None:
    order: list[str] = []
    vals = iter([3.0, 30.0, 1.0, 10.0, 2.0, 20.0])

    def f(name: str):  # type: ignore[no-untyped-def]
        def g():  # type: ignore[no-untyped-def]
            order.append(name)
            return measure.Measure(next(vals), "cpu", "cpu")

        return g

    got = measure.repeat({"a": f("a"), "b": f("b")}, k=3)
    assert order == ["a", "b"] * 3
    assert got["a"].min.seconds == 1.0 and got["a"].median.seconds == 2.0
    assert got["b"].min.seconds == 10.0 and got["b"].median.seconds == 20.0


def test_society_floor_and_call_are_cpu(
    tmp_path: Path, measure: ModuleType, slow_wall: None
) -> None:
    """society.py's packed floor: CPU like the society's rows, so a slow wall clock (a
    loaded machine) moves neither it nor the printed ratio."""
    society = _load("society")
    fl = society.floor(300, str(tmp_path), seg=64)
    for name, m in fl.items():
        # a wall-timed layout would see the fake clock: >= 1000 s / 300 agents = 3.3 s each
        seconds = m.seconds if isinstance(m, measure.Measure) else m * 1e-6
        assert seconds < 0.05, (name, m)
        assert m.kind == "cpu", name
    assert set(fl) >= {"sqlite_batched_segment", "orjson_segment", "file_per_agent"}
    await_ = society.bare_await_us(2_000)
    assert await_.kind == "cpu" and await_.seconds < 0.01
    packed = fl["sqlite_batched_segment"] + await_
    subject = measure.Measure(packed.seconds * 4, "cpu", "cpu")
    assert measure.ratio(subject, packed) == pytest.approx(4.0)


def test_society_rows_floor_writes_the_steps_rows_in_cpu(
    tmp_path: Path, measure: ModuleType, slow_wall: None
) -> None:
    """society.py's log-rows floor term: the four rows a step of the benchmark's society
    writes (read back from a real run), written as JSONL in CPU time, so a slow wall clock
    moves neither it nor the full floor's ratio."""
    import orjson

    society = _load("society")
    samples = society.sample_step_rows(str(tmp_path))
    assert set(samples) == {"llm_calls", "agent_states", "agent.step", "llm.call"}
    assert samples["llm.call"]["name"] == "llm.call" and "request_id" in samples["llm_calls"]
    assert samples["agent_states"]["ok"] is True and "_seq" in samples["agent_states"]
    per_step, nbytes = society.rows_floor(300, str(tmp_path), samples, seg=64)
    assert per_step.kind == "cpu" and per_step.seconds < 0.05  # not the fake 1000 s per read
    # the same rows: within a few ids' digits of the samples' own JSON lines
    sample_bytes = sum(len(orjson.dumps(r)) + 1 for r in samples.values())
    assert abs(nbytes - sample_bytes) < 0.1 * sample_bytes, (nbytes, sample_bytes)
    full = society.floor(300, str(tmp_path), seg=64)["sqlite_batched_segment"] + per_step
    subject = measure.Measure(full.seconds * 3, "cpu", "cpu")
    assert measure.ratio(subject, full) == pytest.approx(3.0)


def test_society_step_cpu_ignores_a_slow_wall_clock(
    tmp_path: Path, measure: ModuleType, slow_wall: None
) -> None:
    society = _load("society")
    row = society._one(50, "local", 1, str(tmp_path), None, "packed")
    assert row["us_per_step_cpu"] < 50_000  # CPU per step: not the fake wall clock's 1000 s
    assert row["cpu_timer"] == "cpu"


def test_suspended_agents_rate_counts_compression_in_cpu(
    tmp_path: Path, measure: ModuleType, slow_wall: None
) -> None:
    sa = _load("suspended_agents")
    rows = asyncio.run(sa.run_config("scripted", "memory", 2, 5, 2, tmp_path))
    for r in rows:
        assert r["cpu_kind"] == "cpu"
        # CPU of the turns plus compress_cold: a fake 1000 s wall read in either would show
        assert r["cpu_s"] + r["compress_cpu_s"] < 5.0
        assert r["completions_per_cpu_s"] == pytest.approx(
            r["completions"] / (r["cpu_s"] + r["compress_cpu_s"])
        )
        assert r["per_call_cpu_us"] > 0
        assert len(r["per_call_cpu_us_by_turn"]) == 2  # one figure per turn (2 turns)


def test_replay_write_ratios_are_cpu_over_cpu(
    tmp_path: Path, measure: ModuleType, slow_wall: None
) -> None:
    """replay.py's printed ratios divide CPU rates by CPU rates: a slow wall clock leaves
    them alone while the wall rates collapse."""
    replay = _load("replay")
    sink = replay.ReplaySink(tmp_path, shard="t")
    sink.register("llm_calls", replay.COLUMNS, description="rows", module=__name__)
    rates = replay.write_rates(sink, 1, 2_000)
    assert rates["extend"] < 10  # wall rows/s under a 1000 s-per-read clock
    for name in ("orjson", "orjson_kept", "append", "extend"):
        assert rates[f"{name}_cpu"] > 10_000, name  # CPU rows/s: untouched


def test_every_benchmark_offers_quick_and_json() -> None:
    """``python benchmarks/NAME.py --quick`` (under a minute) and ``--json PATH`` are the
    house's benchmark contract; ``client_fanout.py``, ``ray_nodes.py`` and
    ``sim_engine_rows.py`` refused ``--quick``. Read from each one's ``--help``."""
    import subprocess

    names = sorted(p.stem for p in BENCH.glob("*.py") if not p.stem.startswith("_"))
    missing = {}
    for name in names:
        out = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), "--help"],
                             capture_output=True, text=True, timeout=120,
                             cwd=BENCH.parent)  # fmt: skip
        assert out.returncode == 0, (name, out.stderr[-500:])
        lacks = [flag for flag in ("--quick", "--json", "--out") if flag not in out.stdout]
        # --json PATH, or (sim_engine_rows, whose product is the rows file) --out PATH
        if "--quick" in lacks or ("--json" in lacks and "--out" in lacks):
            missing[name] = lacks
    assert not missing, missing
