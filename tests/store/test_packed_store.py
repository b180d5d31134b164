"""PackedStore: the AgentStore protocol, a packed society equal to a directory one, resume
equal to an uninterrupted run, kill -9 anywhere (including mid agent-write) then resume."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import random
import signal
from pathlib import Path
from typing import Any

import pytest

import agentlab.runtime  # noqa: F401  (imported once here; forked children inherit it)
from agentlab.errors import ConfigError, StoreError
from agentlab.store.agent_store import AgentStore, DirectoryStore
from agentlab.store.packed_store import PACKED_FILE, PackedStore, export_dirs, open_agent_store
from tests.runtime.society_helpers import final_state, log_rows

UNTIL = 3


def test_protocol_round_trip_and_errors(tmp_path: Path) -> None:
    st = PackedStore(tmp_path / "a.sqlite")
    assert isinstance(st, AgentStore)
    st.write_many("a1", {"config.json": b"{}", "state/state.0.json": b"x"})
    st.write_many("a0", {"AGENT.json": b"{}"})
    assert st.read("a1", "state/state.0.json") == b"x" and st.read("a1", "nope") is None
    assert st.agents() == ["a0", "a1"] and st.keys("a1") == ["config.json", "state/state.0.json"]
    assert st.exists("a0") and not st.exists("a1")
    st.write_many("a1", {"state/state.0.json": b"y"})  # replace
    g = PackedStore(tmp_path / "a.sqlite", group_commit=True)
    g.write_many("a2", {"AGENT.json": b"g"})
    assert g.read("a2", "AGENT.json") == b"g" and st.read("a2", "AGENT.json") is None
    g.flush()  # one transaction for everything pending
    assert st.read("a2", "AGENT.json") == b"g"
    g.delete("a2")
    again = pickle.loads(pickle.dumps(st))  # by path: a fresh connection
    assert again.read("a1", "state/state.0.json") == b"y"
    st.delete("a1")
    assert again.agents() == ["a0"]
    with pytest.raises(StoreError, match=r"invalid workspace key '\.\./x'"):
        st.write_many("a0", {"../x": b""})
    assert st.keys("a0") == ["AGENT.json"]  # the bad batch wrote nothing
    with pytest.raises(ConfigError, match="synchronous='SOMETIMES'"):
        PackedStore(tmp_path / "b.sqlite", synchronous="SOMETIMES")
    with pytest.raises(ConfigError, match=r"unknown store 'zip'.*directory, packed"):
        open_agent_store(tmp_path, "zip")
    assert isinstance(open_agent_store(tmp_path / "run"), DirectoryStore)
    assert isinstance(open_agent_store(tmp_path / "run", "packed"), PackedStore)
    assert isinstance(open_agent_store(tmp_path / "run"), PackedStore)  # detected by its file


def test_pending_and_stored_values_read_back_as_bytes_of_the_caller_s_copy(tmp_path: Path) -> None:
    # values wait (and are bound) as bytearrays of their own: a caller's buffer changed
    # after the write changes nothing, and every read hands out bytes
    g = PackedStore(tmp_path / "a.sqlite", group_commit=True)
    buf = bytearray(b"v1")
    g.write_many("a1", {"config.json": buf})
    g.write_known("a1", "state/state.0.json", b"s0")
    buf[:] = b"xx"
    reads = [
        g.read("a1", "config.json"),
        g.read_many(["a1"], ["config.json"])["a1", "config.json"],
        *g.read_pairs(["a1"], "config.json", "state/state.0.json")["a1"],
    ]
    assert reads == [b"v1", b"v1", b"v1", b"s0"] and {type(r) for r in reads} == {bytes}
    g.flush()
    fresh = PackedStore(tmp_path / "a.sqlite")
    assert fresh.read_pairs(["a1"], "config.json", "state/state.0.json") == {"a1": (b"v1", b"s0")}
    fresh.write_known("a1", "state/state.1.json", b"s1")  # no group commit: at once
    assert type(fresh.read("a1", "state/state.1.json")) is bytes


def _society(run: Path, store: str, until: int) -> dict[str, Any]:
    from agentlab.runtime import Society

    if (run / "SOCIETY_STEP.json").exists():
        s = Society.open(run, progress=False)
    else:
        s = Society.create(
            run,
            agents=12,
            env=["social_feed"],
            llm="sim/vllm-3b",
            seed=5,
            batch_size=5,
            clock="virtual",
            progress=False,
            store=store,
        )
    s.run_sync(until=until)
    s.close()
    return final_state(run)


def test_packed_society_equals_directory_and_resume_equals_uninterrupted(
    tmp_path: Path,
) -> None:
    # same run name (it is the run_id in every row) in different folders
    dir_run, packed_run, resumed_run = (tmp_path / x / "run" for x in ("d", "p", "r"))
    ref = _society(dir_run, "directory", UNTIL)
    packed = _society(packed_run, "packed", UNTIL)
    assert (packed_run / PACKED_FILE).exists()
    assert not (packed_run / "agents").exists()  # no per-agent directories
    assert packed["agents"] == ref["agents"] and packed["env"] == ref["env"]
    assert log_rows(packed_run) == log_rows(dir_run)
    # stop after tick 1, reopen, finish: the same as the uninterrupted run
    _society(resumed_run, "packed", 1)
    resumed = _society(resumed_run, "packed", UNTIL)
    assert resumed["agents"] == ref["agents"] and resumed["env"] == ref["env"]
    assert log_rows(resumed_run) == log_rows(dir_run)
    # the readable per-agent view: export to directories, same workspaces byte for byte
    out = tmp_path / "export"
    store = PackedStore(packed_run / PACKED_FILE)
    assert export_dirs(store, out) == 12
    d = DirectoryStore(out)
    for a in store.agents():
        assert d.keys(a) == store.keys(a)
        assert all(d.read(a, k) == store.read(a, k) for k in store.keys(a))
    with pytest.raises(StoreError, match="already holds agent directories"):
        export_dirs(store, out)
    # a fork of the packed run (a directory run) has the parent's agents
    from agentlab.runtime import Society

    parent = Society.open(packed_run, progress=False)
    try:
        child = parent.fork(tmp_path / "f" / "run", progress=False)
        assert child.agent_states() == packed["agents"]
        child.close()
    finally:
        parent.close()
    # the run reader's per-agent view reads the packed store too
    from agentlab.store.run import open_run

    run = open_run(packed_run)
    try:
        view = run.agent(store.agents()[0])
        assert view.files == store.keys(store.agents()[0]) and view.read("AGENT.json")
    finally:
        run.close()


def test_export_dirs_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agentlab.cli import main

    st = PackedStore(tmp_path / "run" / PACKED_FILE)
    st.write_many("a0", {"AGENT.json": b"{}", "state/state.0.json": b"s"})
    assert main(["export-dirs", str(tmp_path / "run"), str(tmp_path / "out")]) == 0
    assert "exported 1 agents" in capsys.readouterr().out
    assert (tmp_path / "out" / "a0" / "state" / "state.0.json").read_bytes() == b"s"
    assert main(["export-dirs", str(tmp_path / "nothing"), str(tmp_path / "o2")]) == 2
    assert "has no packed agent store" in capsys.readouterr().err


def test_packed_society_on_ray_equals_local(ray_session: Any, tmp_path: Path) -> None:
    from agentlab.runtime import Society

    def run(where: Path, executor: str) -> dict[str, Any]:
        s = Society.create(
            where,
            agents=8,
            env=["social_feed"],
            llm="sim/vllm-3b",
            seed=3,
            batch_size=3,
            executor=executor,
            progress=False,
            store="packed",
        )
        s.run_sync(ticks=2)
        s.close()
        return final_state(where)

    local, ray = run(tmp_path / "l" / "run", "local"), run(tmp_path / "r" / "run", "ray")
    assert ray["agents"] == local["agents"] and ray["env"] == local["env"]


def _child(run_dir: str, kill_at: int, mode: str, count_file: str) -> None:
    # Forked child: SIGKILL itself at the K-th durable event — a log write, a commit rename,
    # or a packed-store transaction (before or after it reaches SQLite).
    events = [0]
    real_replace, real_write = os.replace, os.write
    real_many, real_commit = PackedStore.write_many, PackedStore._commit

    def hit() -> bool:
        events[0] += 1
        return events[0] == kill_at

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def replace(src, dst, *a, **k):  # type: ignore[no-untyped-def]
        if mode == "before" and hit():
            die()
        real_replace(src, dst, *a, **k)
        if mode != "before" and hit():
            die()

    def write(fd, data):  # type: ignore[no-untyped-def]
        if hit():
            if mode == "torn" and len(data) > 1:
                real_write(fd, bytes(data[: len(data) // 2]))
            die()
        return real_write(fd, data)

    def write_many(self, agent_id, items):  # type: ignore[no-untyped-def]
        if mode == "before" and hit():
            die()
        real_many(self, agent_id, items)
        if mode != "before" and hit():
            die()

    def commit(self, rows, what):  # type: ignore[no-untyped-def]
        # the SQLite transaction itself (one per agent write, or one per batch when the
        # runtime's store group-commits)
        if mode == "before" and hit():
            die()
        real_commit(self, rows, what)
        if mode != "before" and hit():
            die()

    def insert_new(self, rows):  # type: ignore[no-untyped-def]
        # a bulk create transaction (one per segment of new agents)
        if mode == "before" and hit():
            die()
        real_insert(self, rows)
        if mode != "before" and hit():
            die()

    real_insert = PackedStore.insert_new
    os.replace, os.write = replace, write  # type: ignore[assignment]
    PackedStore.write_many = write_many  # type: ignore[method-assign]
    PackedStore._commit = commit  # type: ignore[method-assign]
    PackedStore.insert_new = insert_new  # type: ignore[method-assign]
    _society(Path(run_dir), "packed", UNTIL)
    if count_file:
        Path(count_file).write_text(str(events[0]))
    os._exit(0)


def _run_child(run: Path, kill_at: int = 0, mode: str = "after", count: str = "") -> int:
    p = mp.get_context("fork").Process(target=_child, args=(str(run), kill_at, mode, count))
    p.start()
    p.join(120)
    assert p.exitcode is not None, "society child hung"
    return p.exitcode


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Any, int]:
    d = tmp_path_factory.mktemp("ref") / "run"
    count = d.parent / "events.txt"
    assert _run_child(d, count=str(count)) == 0
    return final_state(d), log_rows(d), int(count.read_text())


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("trial", range(8))
def test_kill9_anywhere_then_resume_equals_uninterrupted(
    reference: tuple[dict[str, Any], Any, int], tmp_path: Path, trial: int
) -> None:
    ref_state, ref_rows, n_events = reference
    rng = random.Random(77 + trial)
    run = tmp_path / "run"
    for attempt in range(2):
        code = _run_child(run, rng.randint(1, n_events), rng.choice(["before", "after", "torn"]))
        if attempt == 0:
            assert code == -signal.SIGKILL, f"first child was not killed (exit code {code})"
        if code == 0:
            break
    if not (run / "SOCIETY_STEP.json").exists() or final_state(run)["tick"] < UNTIL:
        assert _run_child(run) == 0
    got = final_state(run)
    assert got["tick"] == UNTIL
    assert got["agents"] == ref_state["agents"] and got["env"] == ref_state["env"]
    assert log_rows(run) == ref_rows
