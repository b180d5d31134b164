"""Werewolf runs to the end on the simulator — with faults injected — and is reproducible."""

from __future__ import annotations

from collections import Counter

import pytest

from agentlab.errors import ConfigError
from agentlab.games import play_werewolf
from agentlab.messaging import ListSink


def _check_consistent(r) -> None:  # type: ignore[no-untyped-def]
    dead: set[str] = set()
    for e in r.events:
        if e.kind in ("vote", "speech") and e.actor:
            assert e.actor not in dead, f"dead player {e.actor} acted: {e}"
        if e.kind in ("death", "eliminated"):
            dead.add(e.target)
        if e.kind == "kill":
            assert r.roles[e.target] != "wolf"
    assert set(r.survivors) == set(r.roles) - dead
    wolves = sum(r.roles[n] == "wolf" for n in r.survivors)
    expect = (
        "villagers" if wolves == 0 else "wolves" if wolves >= len(r.survivors) - wolves else "draw"
    )
    assert r.winner == expect and r.events[-1].kind == "end"


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
async def test_game_runs_to_the_end_and_is_consistent(seed: int) -> None:
    sink = ListSink()
    r = await play_werewolf(seed=seed, sink=sink)
    _check_consistent(r)
    assert Counter(r.roles.values()) == {"wolf": 2, "villager": 3, "seer": 1, "witch": 1}
    assert r.faults == 0
    hubs = Counter(row["hub"] for row in sink.rows)
    assert hubs["day"] >= 2 and hubs["wolves"] >= 1
    # the wolf channel stays private: only living wolves ever receive its messages
    for row in sink.rows:
        if row["hub"] == "wolves":
            assert all(r.roles[n] == "wolf" for n in row["receivers"])


async def test_same_seed_same_game() -> None:
    a = await play_werewolf(seed=5, players=9, llm="sim/vllm-3b")
    b = await play_werewolf(seed=5, players=9, llm="sim/vllm-3b")
    c = await play_werewolf(seed=6, players=9, llm="sim/vllm-3b")
    assert a.events == b.events and a.winner == b.winner
    assert a.events != c.events


@pytest.mark.parametrize("on_fault", ["abstain", "random"])
async def test_faults_never_crash_the_game(on_fault: str) -> None:
    faults = {"sim_p_malformed": 0.4, "sim_p_rate_limit": 0.2, "sim_p_timeout": 0.05}
    r = await play_werewolf(seed=2, players=10, faults=faults, on_fault=on_fault)  # type: ignore[arg-type]
    _check_consistent(r)
    assert r.faults > 0
    assert sum(e.kind == "fault" for e in r.events) == r.faults
    assert Counter(r.roles.values())["wolf"] == 3


async def test_every_reply_failing_ends_in_a_draw_or_by_poison() -> None:
    r = await play_werewolf(seed=0, faults={"sim_p_malformed": 1.0}, max_days=3)
    _check_consistent(r)
    assert not any(e.kind in ("kill", "eliminated") for e in r.events)  # all votes abstained
    assert r.faults >= 10 and r.days <= 3


async def test_config_errors() -> None:
    with pytest.raises(ConfigError, match=">= 7"):
        await play_werewolf(players=5)
    with pytest.raises(ConfigError, match="on_fault"):
        await play_werewolf(on_fault="crash")  # type: ignore[arg-type]


async def test_the_sync_wrapper_refuses_inside_a_running_loop_and_runs_outside() -> None:
    import asyncio

    from agentlab.games import play_werewolf_sync

    with pytest.raises(ConfigError, match="await play_werewolf"):  # (was a bare RuntimeError)
        play_werewolf_sync("sim/instant", 7, seed=1)
    got = await asyncio.to_thread(play_werewolf_sync, "sim/instant", 7, seed=1)  # no loop there
    assert got.winner == (await play_werewolf("sim/instant", 7, seed=1)).winner


async def test_a_game_in_a_run_directory_records_its_llm_traffic(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``run_dir=``: the game's calls go through the one recording path (its run showed
    ``llm calls 0`` in ``agentlab report``: only messages were written), the same game
    as without it."""
    from agentlab.analysis.run_report import summarize_run
    from agentlab.store import open_run
    from agentlab.store.lifecycle import writing_run

    faults = {"sim_p_malformed": 0.3}
    plain = await play_werewolf(seed=4, llm="sim/vllm-3b", faults=faults)
    with writing_run(tmp_path / "game", kind="werewolf", config={}, seed=4):
        r = await play_werewolf(seed=4, llm="sim/vllm-3b", faults=faults, run_dir=tmp_path / "game")
    assert r.events == plain.events  # recording changes nothing in the game
    run = open_run(tmp_path / "game")
    calls, msgs = run.llm_calls_df(), run.messages_df()
    assert set(calls.agent_id) <= set(r.roles) and len(set(calls.agent_id)) == len(r.roles)
    assert {"speech", "wolf", "day"} <= set(calls.stage) and set(calls.run_id) == {"game"}
    assert (calls.day.notna() if "day" in calls else calls.labels.map(lambda x: "day" in x)).all()
    # each faulty structured reply is a call that failed after its retries, or an attempt
    assert (calls.outcome != "ok").sum() + len(run.llm_attempts_df()) > len(calls)
    assert len(msgs) and set(msgs.run_id) == {"game"} and {"day", "wolves"} <= set(msgs.hub)
    spans = run.spans_df()
    assert (spans.name == "llm.call").sum() == len(calls)
    s = summarize_run(tmp_path / "game")
    assert s["llm_calls"] == len(calls) and s["agents"] == len(r.roles)
    run.close()


async def test_a_game_given_a_new_directory_makes_it_a_run(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """``play_werewolf(run_dir=new)`` without ``writing_run`` around it wrote the log but no
    ``run.json``: the report read ``kind None``, ``status interrupted``, ``ticks 0`` and
    ``agentlab runs`` / the run browser did not list the game. It is now a run of its own."""
    from agentlab.analysis.run_report import print_summary, summarize_run
    from agentlab.store.lifecycle import read_status
    from agentlab.view import runs_rows

    out = tmp_path / "ww"
    r = await play_werewolf(seed=1, run_dir=out)
    assert read_status(out) == "done"
    (row,) = runs_rows(tmp_path)
    assert row["kind"] == "werewolf" and row["status"] == "done" and row["llm_calls"] > 0
    s = summarize_run(out)
    assert s["manifest"]["seed"] == 1 and s["manifest"]["model"] == "sim/instant"
    print_summary(s)
    assert "ticks      –" in capsys.readouterr().out  # a game has days, not ticks
    with pytest.raises(ConfigError, match="already holds a run"):
        await play_werewolf(seed=1, run_dir=out)
    again = await play_werewolf(seed=1, run_dir=out, exist_ok="replace")
    assert again.events == r.events and read_status(out) == "done"
