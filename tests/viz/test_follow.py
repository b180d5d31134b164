"""Cursors, coalescing and snapshot+delta journals (no widget machinery)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlab.errors import ConfigError
from agentlab.store.tail import tail_rows
from agentlab.viz._follow import Coalescer, Follower, Journal, make_source, run_path
from tests.viz.conftest import LogWriter


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_tail_rows_resumes_from_cursor_and_waits_for_whole_lines(
    run_dir: Path, log: LogWriter
) -> None:
    log.write("timeline", [{"tick": 0}, {"tick": 1}])
    rows, cur = tail_rows(run_dir, "timeline")
    assert [r["tick"] for r in rows] == [0, 1]
    log.write("timeline", [{"tick": 2}], torn='{"tick": 3, "par')
    rows, cur = tail_rows(run_dir, "timeline", cur)
    assert [r["tick"] for r in rows] == [2]  # the torn line is not consumed
    with open(run_dir / "replay/timeline/test-1.jsonl", "a") as f:
        f.write('tial": 1}\n')
    rows, cur = tail_rows(run_dir, "timeline", cur)
    assert rows == [{"tick": 3, "partial": 1}]
    rows, _ = tail_rows(run_dir, "timeline", cur)
    assert rows == []


def test_tail_rows_missing_dataset_and_second_shard(run_dir: Path, log: LogWriter) -> None:
    assert tail_rows(run_dir, "messages")[0] == []
    log.write("messages", [{"i": 0}])
    other = LogWriter(run_dir, shard="test-2")
    other.write("messages", [{"i": 1}, {"i": 2}])
    rows, cur = tail_rows(run_dir, "messages")
    assert sorted(r["i"] for r in rows) == [0, 1, 2]
    assert set(cur) == {"test-1.jsonl", "test-2.jsonl"}


def test_coalescer_caps_frame_rate() -> None:
    clock = FakeClock()
    c = Coalescer(max_fps=20, clock=clock)
    sent = 0
    for step in range(1000):  # 1 s of changes every millisecond
        clock.t = step / 1000
        c.mark()
        if c.due():
            c.sent()
            sent += 1
    assert 18 <= sent <= 21
    assert not c.due() or c.dirty
    with pytest.raises(ConfigError, match="max_fps"):
        Coalescer(max_fps=0)


def test_coalescer_sends_nothing_when_idle() -> None:
    clock = FakeClock()
    c = Coalescer(max_fps=20, clock=clock)
    clock.t = 10.0
    assert not c.due()


def test_journal_base_plus_delta_is_always_complete() -> None:
    clock = FakeClock()
    j: Journal[int] = Journal(max_items=50, snapshot_interval=1.0, max_delta=30, clock=clock)
    base: list[int] = []
    snapshots = 0
    for step in range(200):
        clock.t = step * 0.1
        j.extend(range(j.count, j.count + 3))
        snap, delta = j.frame()
        if snap is not None:
            base = snap
            snapshots += 1
            assert delta == []
        merged = base + [d for d in delta if not base or d > base[-1]]
        assert merged[-50:] == list(range(j.count - 50, j.count))[-len(merged[-50:]) :]
        assert merged[-1] == j.count - 1
    # a snapshot every ~1 s (or when the delta grew past max_delta), not every frame
    assert 15 <= snapshots <= 60


def test_journal_forced_snapshot() -> None:
    j: Journal[int] = Journal(max_items=5, clock=FakeClock())
    j.extend(range(8))
    snap, delta = j.frame(force_snapshot=True)
    assert snap == [3, 4, 5, 6, 7] and delta == []


def test_follower_step_emits_only_when_changed(run_dir: Path, log: LogWriter) -> None:
    seen: list[list[dict]] = []
    frames: list[int] = []
    f = Follower(
        make_source(run_dir),
        ["timeline"],
        lambda ds, rows: seen.append(rows) or True,
        lambda: frames.append(1),
        max_fps=1000,
    )
    assert f.step() is False  # nothing yet
    log.write("timeline", [{"tick": 0}, {"tick": 1}])
    assert f.step() is True
    assert f.step() is False  # no new rows, no frame
    assert f.rows_seen == 2 and len(frames) == 1


def test_run_path_accepts_objects(run_dir: Path) -> None:
    class Soc:
        pass

    soc = Soc()
    soc.run_dir = str(run_dir)  # type: ignore[attr-defined]
    assert run_path(soc) == run_dir
    with pytest.raises(ConfigError, match="run directory"):
        run_path(object())


@pytest.mark.parametrize("how", ["replaced", "continued", "cut", "gone"])
def test_a_follower_stops_when_the_log_is_rewritten_under_it(
    run_dir: Path, log: LogWriter, how: str
) -> None:
    """A view that counted rows is out of date once they may be gone: the run replaced
    (another run.json ``created``), an experiment continued (another start: the runs in
    flight cut and run again), a shard cut back (a resume) or gone. Still following, it
    read the new run's rows into the old run's counts."""
    import json
    import shutil

    created = "2026-12-07T10:00:00.000+00:00"
    (run_dir / "run.json").write_text(json.dumps({"created": created, "starts": [created]}))
    log.write("timeline", [{"tick": 0}, {"tick": 1}])
    seen: list[int] = []
    told: list[bool] = []
    f = Follower(make_source(run_dir), ["timeline"], lambda ds, rows: bool(seen.extend(
        r["tick"] for r in rows)) or True, lambda: None, max_fps=1000,
        on_rewritten=lambda: told.append(True))  # fmt: skip
    f.step()
    assert seen == [0, 1] and not f.rewritten
    f.step()  # (nothing new: still following)
    shard = run_dir / "replay" / "timeline" / "test-1.jsonl"
    if how == "replaced":
        shutil.rmtree(run_dir / "replay")
        (run_dir / "run.json").write_text(json.dumps({"created": "2026-12-07T10:05:00.000+00:00"}))
        LogWriter(run_dir).write("timeline", [{"tick": 0}, {"tick": 1}, {"tick": 2}])
    elif how == "continued":  # its cut regrown to the cursor: only run.json tells
        shard.write_text(shard.read_text().splitlines(keepends=True)[0])
        (run_dir / "run.json").write_text(json.dumps({"created": created,
                                                      "starts": [created, "later"]}))  # fmt: skip
        log.write("timeline", [{"tick": 5}])  # the continuation's row, not read
    elif how == "cut":
        shard.write_text(shard.read_text().splitlines(keepends=True)[0])
    else:
        shard.unlink()
    f.step()
    assert f.rewritten and told == [True]
    log.write("timeline", [{"tick": 9}])
    f.step()
    assert told == [True] and not {2, 5, 9} & set(seen)  # it reads no more
    assert seen[:2] == [0, 1]
