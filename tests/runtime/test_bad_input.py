"""Bad input gives a clear error naming the problem, and nothing committed is lost."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from agentlab import open_run
from agentlab.errors import ConfigError, CorruptRecordError, InvalidAgentIdError, StoreError
from agentlab.runtime import Society
from agentlab.runtime.cli_run import load_config

ROOT = Path(__file__).resolve().parents[2]


def _society(run: Path, ticks: int = 2) -> None:
    s = Society.create(
        run, agents={"counter": 4}, env=["social_feed"], clock="virtual", progress=False
    )
    asyncio.run(s.run(ticks=ticks))
    s.close()


def _shard(run: Path, dataset: str) -> Path:
    (f,) = sorted((run / "replay" / dataset).glob("*.jsonl"))
    return f


def _per_tick(run: Path) -> list[list[int]]:
    q = "select tick, count(*) n from agent_states group by 1 order by 1"
    return open_run(run).sql(q).values.tolist()


# --- the log ---------------------------------------------------------------------------


def test_garbage_line_in_a_committed_shard_is_reported_and_no_committed_row_is_dropped(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    _society(run)
    f = _shard(run, "agent_states")
    lines = f.read_bytes().splitlines(True)
    assert len(lines) == 8
    # garbage in the middle of the committed rows, plus an uncommitted row at the end
    f.write_bytes(b"".join([*lines[:3], b"GARBAGE not a row\n", *lines[3:], lines[-1]]))

    r = open_run(run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r.sql("select count(*) from agent_states")
    assert any("agent_states" in p and "not rows" in p for p in r.problems), r.problems

    with pytest.warns(UserWarning, match="1 extra line.*no committed row dropped"):
        s = Society.open(run, progress=False)
    data = f.read_bytes()
    assert data == b"".join([*lines[:3], b"GARBAGE not a row\n", *lines[3:]])  # only the tail
    asyncio.run(s.run(ticks=1))
    s.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _per_tick(run) == [[1, 4], [2, 4], [3, 4]]
    # the next open verifies against marks taken after the garbage: no new complaint
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Society.open(run, progress=False).close()


def test_a_shard_that_lost_its_last_committed_row_is_not_truncated(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _society(run)
    f = _shard(run, "agent_states")
    lines = f.read_bytes().splitlines(True)
    damaged = b"".join(lines[:-1]) + b'{"x": 1}\n' * 3
    f.write_bytes(damaged)
    with pytest.raises(
        CorruptRecordError, match=r"committed rows of this shard are gone.*Nothing was"
    ):
        Society.open(run, progress=False)
    assert f.read_bytes() == damaged
    with pytest.raises(CorruptRecordError):  # again, not RunLockedError: lock released
        Society.open(run, progress=False)


# --- committed state -----------------------------------------------------------------


def test_corrupt_committed_state_slot_names_the_agent_and_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _society(run)
    agent = run / "agents" / "counter-00001" / "state"
    slot = next(p for p in agent.glob("state.*.json") if b'"tick":2,' in p.read_bytes())
    raw = slot.read_bytes()
    slot.write_bytes(raw[:-10] + b"0000000000")  # a flipped value: fails its CRC
    s = Society.open(run, progress=False)
    with pytest.raises(CorruptRecordError) as err:
        s.agent("counter-00001")
    msg = str(err.value)
    assert "counter-00001" in msg and slot.name in msg and "tick 2" in msg
    assert "Not falling back" in msg and "tick 1" in msg
    # stepping that agent fails loudly too (recorded as its error), never uses tick 1
    asyncio.run(s.run(ticks=1))
    s.close()
    errs = open_run(run).sql("select agent_id, error from agent_errors")
    assert set(errs["agent_id"]) == {"counter-00001"}
    assert all("Not falling back" in e for e in errs["error"])


def test_garbage_slot_is_not_mistaken_for_a_torn_write(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _society(run)
    agent = run / "agents" / "counter-00002" / "state"
    slot = next(p for p in agent.glob("state.*.json") if b'"tick":2,' in p.read_bytes())
    slot.write_bytes(b"\x00" * 40)
    with pytest.raises(CorruptRecordError, match="not an agentlab state slot"):
        Society.open(run, progress=False).agent("counter-00002")


@pytest.mark.parametrize("name", ["SOCIETY_STEP.json", "SOCIETY.json"])
def test_truncated_society_file_names_the_file_and_the_way_out(tmp_path: Path, name: str) -> None:
    run = tmp_path / "run"
    _society(run, ticks=1)
    f = run / name
    f.write_bytes(f.read_bytes()[:40])
    with pytest.raises(CorruptRecordError) as err:
        Society.open(run, progress=False)
    msg = str(err.value)
    assert str(f) in msg and "not valid JSON" in msg
    assert "restore it from a copy" in msg and "open_run" in msg


def test_open_on_a_regular_file_is_a_store_error(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    with pytest.raises(StoreError, match="is a file, not a run directory"):
        Society.open(f)
    with pytest.raises(StoreError, match="is a file"):
        Society.create(f, agents=1)
    with pytest.raises(StoreError, match="no society"):
        Society.open(tmp_path / "missing")


# --- ids and configs -----------------------------------------------------------------


@pytest.mark.parametrize("bad", ["a\n", "a\nb", "\na", "a\r", "a b", "", ".", "-a"])
def test_agent_ids_with_newlines_or_odd_characters_are_rejected(tmp_path: Path, bad: str) -> None:
    with pytest.raises((InvalidAgentIdError, ConfigError), match="agent"):
        Society.create(tmp_path / "run", agents=[("counter", bad)], progress=False)
    assert not (tmp_path / "run" / "SOCIETY_STEP.json").exists()


def _toml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cfg.toml"
    p.write_text(text)
    return p


def test_config_with_wrong_types_lists_every_problem_at_once(tmp_path: Path) -> None:
    p = _toml(
        tmp_path,
        'seed = "7"\nenv = "social_feed"\nllm = 5\ntick_seconds = "fast"\n'
        'agents = "five"\nagentz = 1\n[retry]\nmax_attempts = "x"\n',
    )
    with pytest.raises(ConfigError) as err:
        load_config(p)
    msg = str(err.value)
    assert msg.startswith(f"7 problems with the society config in {p}")
    for key in ("seed", "env", "llm", "tick_seconds", "agents", "agentz", "retry.max_attempts"):
        assert f"\n  {key}: " in msg, key
    assert "'five'" in msg and "agent entry 'f'" not in msg


def test_invalid_toml_names_the_file_and_the_place(tmp_path: Path) -> None:
    p = _toml(tmp_path, "seed = = 3\n")
    with pytest.raises(ConfigError, match=r"cfg\.toml' is not valid TOML: .*line 1"):
        load_config(p)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"agents": "five"}, "agents"),
        ({"agents": -5}, "agents"),
        ({"agents": {"counter": "2"}}, "agents"),
        ({"agents": [{"type": "counter", "n": 2, "id": "x"}]}, "agents"),
        ({"seed": "7"}, "seed"),
        ({"env": "social_feed"}, "env"),
        ({"llm": None}, "llm"),
        ({"tick_seconds": -1}, "tick_seconds"),
        ({"clock": "wall"}, "clock"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_society_create_validates_with_the_same_model(
    tmp_path: Path, kwargs: dict[str, object], key: str
) -> None:
    args: dict[str, object] = {"agents": {"counter": 1}, **kwargs}
    with pytest.raises(ConfigError, match=rf"\n  {key}: "):
        Society.create(tmp_path / "run", progress=False, **args)  # type: ignore[arg-type]
    assert not (tmp_path / "run" / "SOCIETY.json").exists()


@pytest.mark.parametrize("llm", ["openai/gpt-4o", {"model": "hosted_vllm/x"}])
def test_a_real_endpoint_on_the_virtual_clock_is_refused_before_anything_is_written(
    tmp_path: Path, llm: object
) -> None:
    """Its calls answer in real time, which the virtual clock does not see: every latency
    would be recorded as 0 (``Experiment`` refuses it alike)."""
    with pytest.raises(ConfigError, match="clock='virtual' needs a simulated model"):
        Society.create(tmp_path / "run", agents=2, env=["social_feed"], llm=llm,  # type: ignore[arg-type]
                       clock="virtual", progress=False)  # fmt: skip
    assert not (tmp_path / "run").exists()


def test_a_valid_config_file_still_runs(tmp_path: Path) -> None:
    p = _toml(
        tmp_path,
        f'out = "{tmp_path / "run"}"\nticks = 2\nseed = 3\nclock = "virtual"\n'
        'env = ["social_feed"]\n[agents]\ncounter = 3\n[retry]\nmax_attempts = 3\n',
    )
    r = subprocess.run(
        [sys.executable, "-m", "agentlab.cli", "run", str(p)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    step = json.loads((tmp_path / "run" / "SOCIETY_STEP.json").read_text())
    assert step["tick"] == 2


def test_demo_with_negative_agents_exits_with_an_error(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    r = subprocess.run(
        [sys.executable, "-m", "agentlab.cli", "demo", "--agents", "-5", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode != 0
    assert "--agents must be at least 1, got -5" in r.stderr
    assert not out.exists()


@pytest.mark.parametrize(("name", "doc"), [("SOCIETY_STEP.json", {"schema_version": 1}),
                                          ("SOCIETY.json", {"schema_version": 1, "seed": 0})])  # fmt: skip
def test_society_file_missing_keys_is_named(tmp_path: Path, name: str, doc: dict) -> None:
    run = tmp_path / "run"
    _society(run, ticks=1)
    (run / name).write_text(json.dumps(doc))
    with pytest.raises(CorruptRecordError, match=rf"{name} lacks \["):
        Society.open(run, progress=False)
