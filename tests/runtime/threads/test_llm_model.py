"""``LLMClientModel`` end to end over ``LLMClient`` streaming with the simulator."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

import orjson

from agentlab.llm import LLMClient
from agentlab.llm.encoded_history import EncodedHistory
from agentlab.runtime.threads import AgentSystem, LLMClientModel, validate_openai_messages
from tests.runtime.threads.thread_helpers import CountingTool, roles

PARAMS = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


def _policy(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"sim_tool_call_p": 1.0 if messages[-1]["role"] == "user" else 0.0}


class CountingStream:
    """Wraps an LLMClient to count stream() calls and deltas (what the model consumed)."""

    def __init__(self, client: LLMClient) -> None:
        self.client, self.model = client, client.model
        self.streams: list[Any] = []
        self.given: list[Any] = []  # the messages of each call

    def stream(self, messages: list[dict[str, Any]], **kw: Any) -> Any:
        s = self.client.stream(messages, **kw)
        self.streams.append(s)
        self.given.append(messages)
        return s


async def test_sim_instant_streams_turns_with_tool_calls() -> None:
    client = LLMClient("sim/instant", seed=3)
    calls0 = client.usage.calls  # usage is per process and config: compare deltas
    spy = CountingStream(client)
    model = LLMClientModel(spy, per_call=_policy, sim_completion_tokens=60)
    tool = CountingTool()
    tool.tool.parameters = PARAMS
    system = AgentSystem(model, tools=[tool.tool], agent_tools=False)
    tids = ["a", "b", "c"]
    async with system:
        for turn in range(3):
            for t in tids:
                system.send_user(t, f"turn {turn} for {t}", f"u{turn}")
            await system.drain()
    # every completion was one client.stream() call, recorded as a streamed call
    assert system.completions == len(tids) * 3 * 2 == len(spy.streams)
    assert client.usage.calls - calls0 == system.completions
    assert all(s.response.record.stream for s in spy.streams)
    text_streams = [s for s in spy.streams if not s.response.tool_calls]
    # an instant reply is ready whole: the system takes its text as one delta
    assert text_streams and all(s.whole_when_ready and s.chunks == 1 for s in text_streams)
    for t in tids:
        h = system.history(t)
        validate_openai_messages(h)
        assert roles(h) == ["user", "assistant", "tool", "assistant"] * 3
        calls = [m for m in h if m.get("tool_calls")]
        assert [m["tool_calls"][0]["function"]["name"] for m in calls] == ["work"] * 3
        # the streamed deltas add up to exactly what a non-streamed call returns
        last = h[-1]
        again = await client.complete(
            h[:-1],
            tools=[tool.tool.schema()],
            agent_id=t,
            sim_tool_call_p=0.0,
            sim_completion_tokens=60,
        )
        assert last["content"] == again.text and len(last["content"]) > 100
    assert sum(tool.starts.values()) == len(tids) * 3


class FirstDelta(LLMClientModel):
    """Signals when the first text delta of a completion has arrived."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.got = asyncio.Event()

    async def stream(self, messages, tools, *, thread_id, turn):  # type: ignore[override]
        async with aclosing(super().stream(messages, tools, thread_id=thread_id, turn=turn)) as s:
            async for x in s:
                if isinstance(x, str):
                    self.got.set()
                yield x


async def test_interrupt_closes_the_client_stream_and_keeps_partial_text() -> None:
    # sim/vllm-3b decodes ~100 tokens/s: a 120-token answer streams for ~1.2 s of real time
    client = LLMClient("sim/vllm-3b", seed=1)
    model = FirstDelta(client, sim_tool_call_p=0.0, sim_completion_tokens=120)
    await _interrupt_a_long_story(AgentSystem(model, agent_tools=False), client, model.got)


async def _interrupt_a_long_story(
    system: AgentSystem, client: LLMClient, got: asyncio.Event
) -> None:
    """Interrupt agent "a"'s 120-token reply once its first delta arrived (``got``); the
    kept text must be a strict prefix of the uninterrupted reply."""
    async with system:
        system.send_user("a", "tell me a long story", "u0")
        await asyncio.wait_for(got.wait(), 20)
        assert client.in_flight() == 1
        system.send_user("a", "stop, new question", "u1")
        await system.drain(timeout=30)
    h = system.history("a")
    validate_openai_messages(h)
    assert roles(h) == ["user", "assistant", "user", "assistant"]
    # same seed, profile and request give the same text (the profile sets the text's
    # characters per token, so the reference is the same profile, not sim/instant)
    full = await LLMClient("sim/vllm-3b", seed=1).complete(
        h[:1], sim_tool_call_p=0.0, sim_completion_tokens=120
    )
    partial = h[1]["content"]
    assert partial and full.text.startswith(partial) and len(partial) < len(full.text)
    assert client.in_flight() == 0  # the interrupted stream released its concurrency slot


class Generic(LLMClientModel):
    """An ``LLMClientModel`` the system drives through ``stream()`` (its exact type is what
    takes the direct path), so both paths run the same client and overrides."""


async def _run_turns(model: LLMClientModel, tool: CountingTool) -> AgentSystem:
    system = AgentSystem(model, tools=[tool.tool], agent_tools=False)
    async with system:
        for turn in range(4):
            for t in ("a", "b", "c"):
                system.send_user(t, f"turn {turn} for {t}", f"u{turn}")
            await system.drain()
    return system


async def test_direct_client_stream_equals_model_stream() -> None:
    # AgentSystem iterates an LLMClientModel's client stream itself (LLMClientModel.open):
    # the same histories, states, counts and records as through LLMClientModel.stream
    got = []
    pieces: list[list[tuple[bool, int]]] = []
    for cls in (LLMClientModel, Generic):
        client = LLMClient("sim/instant", seed=5)
        spy = CountingStream(client)
        tool = CountingTool()
        tool.tool.parameters = PARAMS
        model = cls(spy, per_call=_policy, sim_completion_tokens=40)
        system = await _run_turns(model, tool)
        got.append(
            (
                {t: (system.history(t), system.state(t)) for t in system.threads()},
                model.responses,
                system.completions,
                [
                    (s.response.text, s.response.tool_calls, s.response.record.agent_id)
                    for s in spy.streams
                ],
                dict(tool.starts),
            )
        )
        pieces.append([(s.whole_when_ready, s.chunks) for s in spy.streams])
    assert got[0] == got[1]
    assert got[0][1] == got[0][2] == 3 * 4 * 2
    # the direct path takes each ready reply whole, as one delta; stream() keeps the pieces
    # (a text reply of 40 tokens in stream_chunks = 12, a tool call's empty text in one)
    assert {c for whole, c in pieces[0]} == {1} and all(whole for whole, _ in pieces[0])
    assert {c for whole, c in pieces[1]} == {1, 12} and not any(w for w, _ in pieces[1])


class FirstDeltaClient(CountingStream):
    """Signals when a stream's first text delta reaches the consumer (the system iterates
    the client's stream itself for a plain ``LLMClientModel``)."""

    def __init__(self, client: LLMClient) -> None:
        super().__init__(client)
        self.got = asyncio.Event()
        self.on_close: Any = None

    def stream(self, messages: list[dict[str, Any]], **kw: Any) -> Any:
        return _Signalling(super().stream(messages, **kw), self)


class _Signalling:
    def __init__(self, inner: Any, spy: FirstDeltaClient) -> None:
        self.inner, self.spy = inner, spy

    @property
    def response(self) -> Any:
        return self.inner.response

    async def _run(self) -> Any:
        async with aclosing(self.inner.__aiter__()) as deltas:
            try:
                async for d in deltas:
                    self.spy.got.set()
                    yield d
            except BaseException:  # cancelled mid-stream, or closed holding a delta
                self.spy.on_close()
                raise

    def __aiter__(self) -> Any:
        return self._run()


async def test_interrupt_on_the_direct_path_closes_the_client_stream() -> None:
    client = LLMClient("sim/vllm-3b", seed=1)
    spy = FirstDeltaClient(client)
    model = LLMClientModel(spy, sim_tool_call_p=0.0, sim_completion_tokens=120)
    system = AgentSystem(model, agent_tools=False)
    # the client stream ends inside the slice, before it commits (not when collected)
    closed: list[int] = []
    spy.on_close = lambda: closed.append(len(system.history("a")))
    await _interrupt_a_long_story(system, client, spy.got)
    assert model.responses == 1  # the interrupted completion had no response
    assert closed == [0]


async def test_instant_turn_runs_to_its_commit_without_yielding_to_the_loop() -> None:
    # LLMClientModel's streams start their attempt at once (no loop turn first): over an
    # instant simulator a thread's whole turn (two completions, the tool between) runs in
    # its driver's first step, so a thread never suspends holding its decoded history
    # while the other threads decode theirs.
    client = LLMClient("sim/instant", seed=3)
    spy = CountingStream(client)
    model = LLMClientModel(spy, per_call=_policy, sim_completion_tokens=40)
    tool = CountingTool()
    tool.tool.parameters = PARAMS
    system = AgentSystem(model, tools=[tool.tool], agent_tools=False)
    order: list[str] = []
    real_slice = system._slice

    async def spy_slice(seq: int, d: Any, hot: Any) -> Any:
        order.append(f"{d.thread_id}:{d.kind}")
        return await real_slice(seq, d, hot)

    system._run_slice = spy_slice
    async with system:
        for t in ("a", "b"):
            system.send_user(t, f"hello {t}", "u0")
        await system.drain()
    assert order == ["a:user", "a:tool_result", "b:user", "b:tool_result"]
    assert all(s.start_at_once for s in spy.streams) and len(spy.streams) == 4
    assert not client.stream([{"role": "user", "content": "x"}]).start_at_once  # opt-in


class _ProviderClient:
    """Stands in for a remote provider's client: notes what ``stream`` was given."""

    model = "openai/gpt-4o-mini"

    def __init__(self) -> None:
        self.given: list[Any] = []

    def stream(self, messages: Any, **kw: Any) -> object:
        self.given.append(messages)
        return object()


def test_a_client_that_is_not_the_simulator_gets_a_list() -> None:
    """An ``EncodedHistory`` goes only to a ``sim/`` client (served in process); another
    client's transport serializes what it is given, so it gets the decoded list."""
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    lines = b"".join(orjson.dumps(m, option=orjson.OPT_APPEND_NEWLINE) for m in history)
    new = [{"role": "user", "content": "again"}]
    remote = _ProviderClient()
    LLMClientModel(remote).open(EncodedHistory(lines, 2, new, 7), [], thread_id="t", turn=0)
    assert type(remote.given[0]) is list and remote.given[0] == [*history, *new]
    sim = CountingStream(LLMClient("sim/instant"))
    LLMClientModel(sim).open(EncodedHistory(lines, 2, new, 7), [], thread_id="t", turn=0)
    assert type(sim.given[0]) is EncodedHistory
