"""Msg immutability and round trips; MsgHub visibility, membership, sinks."""

from __future__ import annotations

import dataclasses
import time

import pytest

from agentlab.errors import ConfigError
from agentlab.messaging import (
    HubAgent,
    ListSink,
    Msg,
    MsgHub,
    ShowAll,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from agentlab.messaging.msg import DataBlock


class Echo(HubAgent):
    """Replies with a text block and a thinking block."""

    async def reply(self, msg: Msg | None = None, **kw: object) -> Msg:
        self.observe(msg)
        out = Msg(
            self.name, [ThinkingBlock(f"{self.name} thinks"), TextBlock(f"hi from {self.name}")]
        )
        self.observe(out)
        return out


def _blocks_msg() -> Msg:
    return Msg(
        "alice",
        [
            TextBlock("hello"),
            ThinkingBlock("secret plan"),
            ToolCallBlock("c1", "search", {"q": "x"}),
            ToolResultBlock("c1", "found"),
            DataBlock({"k": [1, 2]}),
        ],
        metadata={"a": 1},
        ts=3.5,
    )


def test_msg_is_immutable_and_round_trips() -> None:
    m = _blocks_msg()
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.sender = "bob"  # type: ignore[misc]
    back = Msg.from_dict(m.to_dict())
    assert back == m
    assert m.content == "hello" and m.thinking == "secret plan"
    assert m.has("tool_call") and not Msg("a", "x").has("thinking")
    assert m.to_dict()["schema_version"] == 1
    assert Msg("a", "x").id != Msg("a", "x").id
    assert m.name == m.sender == "alice"  # (AgentScope's name for the sender)


def test_msg_rejects_bad_role() -> None:
    with pytest.raises(ConfigError, match=r"'robot'.*user, assistant, system"):
        Msg("a", "x", role="robot")  # type: ignore[arg-type]


async def test_hub_strips_private_blocks_for_others_and_shares_views() -> None:
    a, b, c = Echo("a"), Echo("b"), Echo("c")
    async with MsgHub([a, b, c], name="room") as hub:
        reply = await a()
    seen_b, seen_c = b.memory[-1], c.memory[-1]
    assert seen_b.content == "hi from a" and not seen_b.has("thinking")
    assert seen_b is seen_c  # one stripped view shared by every receiver
    assert a.memory[-1] is reply and reply.has("thinking")  # sender keeps its own thoughts
    assert len(a.memory) == 1  # the sender does not observe its own broadcast
    assert hub.history == [reply]


async def test_show_all_policy_and_private_channel() -> None:
    a, b, c = Echo("a"), Echo("b"), Echo("c")
    sink = ListSink()
    async with MsgHub([a, b, c], visibility=ShowAll(), sink=sink, name="h", tick=7) as hub:
        await a()
        got = await hub.send(Msg("a", "psst"), to=["c"])
    assert b.memory[-1].has("thinking")  # ShowAll keeps thinking
    assert got == ["c"] and c.memory[-1].content == "psst"
    assert all(m.content != "psst" for m in b.memory)
    assert [r["receivers"] for r in sink.rows] == [["b", "c"], ["c"]]
    assert {r["hub"] for r in sink.rows} == {"h"} and {r["tick"] for r in sink.rows} == {7}
    assert sink.rows[0]["bytes"] == len("hi from a")


async def test_membership_changes_and_auto_broadcast_toggle() -> None:
    a, b, c = Echo("a"), Echo("b"), Echo("c")
    async with MsgHub([a, b], announcement="welcome") as hub:
        assert [m.content for m in a.memory] == ["welcome"]
        hub.add(c)
        await a()
        assert c.memory[-1].content == "hi from a"
        hub.remove("b")
        await a()
        assert len(b.memory) == 2  # welcome + first reply only
        hub.set_auto_broadcast(False)
        await a()
        assert len(c.memory) == 2
        assert await hub.broadcast(Msg("a", "manual")) == ["c"]
    await a()  # hub closed: no more auto-broadcast
    assert len(c.memory) == 3 and a._hubs == []
    with pytest.raises(ConfigError, match="observe"):
        MsgHub([object()])


async def test_nested_hubs_keep_the_inner_channel_private() -> None:
    w1, w2, v = Echo("w1"), Echo("w2"), Echo("v")
    async with MsgHub([w1, w2, v], name="day"):
        async with MsgHub([w1, w2], name="wolves", auto_broadcast=True) as wolves:
            await wolves.broadcast(Msg("w1", "kill v"))
        assert all("kill" not in m.content for m in v.memory)
        assert w2.memory[-1].content == "kill v"


async def test_observe_cost_is_flat_in_history_length() -> None:
    a, b = Echo("a"), Echo("b")
    msg = Msg("a", "x")

    async def cost(n: int) -> float:
        hub = MsgHub([a, b])
        hub.history = [msg] * n  # a long conversation already happened
        b.memory._items = [msg] * n
        t = time.perf_counter()
        for _ in range(2000):
            await hub.broadcast(msg)
        return time.perf_counter() - t

    small, large = await cost(10), await cost(200_000)
    assert large < small * 5 + 0.05
