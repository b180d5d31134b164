"""Adversarial: the ``sim/instant`` fast path (``SimServer.plan_instant``,
``LLMClient.complete_now``, ``_call`` trying it first, ``RecordingLLM``'s one ``_log``)
gives what the general loop gives, for every call it accepts, and declines cleanly.

Each comparison runs the same thing twice, once with ``plan_instant`` switched off (so
every call takes the general plan / retry loop), and compares responses, records, usage,
limiter and server state — or, for societies, every row, span and agent state.
"""

from __future__ import annotations

import asyncio
import itertools
import pickle
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentlab.agents.base import AgentBase
from agentlab.agents.registry import register_agent
from agentlab.core.clock import VirtualClock
from agentlab.errors import ConfigError
from agentlab.llm import LLMClient
from agentlab.llm._live import reset_live
from agentlab.llm.sim_backend import SimServer
from agentlab.runtime import Society
from tests.runtime.resume_helpers import strict_rows, strict_spans

MESSAGES: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "hi"}],
    [{"role": "user", "content": ""}],
    [{"role": "user", "content": None}],
    [{"role": "user"}],
    [
        {"role": "system", "content": "You are @ana."},
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
    ],
    [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:,A"}},
            ],
        }
    ],
    [{"role": "user", "content": "ünïcødé ✓ \ud800 lone surrogate"}],
    [{"role": "user", "content": "x" * 50_000}],
    [],
]
PARAMS: list[dict[str, Any]] = [
    {}, {"temperature": 0.0}, {"temperature": None}, {"max_tokens": None}, {"max_tokens": 1},
    {"max_tokens": 0}, {"max_tokens": 2.7}, {"max_tokens": True}, {"max_tokens": "3"},
    {"max_tokens": -2}, {"stop": ["\n"]}, {"seed": 3}, {"n": 2}, {"foo": {"bar": [1]}},
    {"sim_completion_tokens": None}, {"sim_completion_tokens": 0},
    {"sim_completion_tokens": -4}, {"sim_completion_tokens": 3.9},
    {"sim_marker": None, "sim_marker_p": 0.3}, {"sim_marker": "", "sim_marker_p": 1},
    {"sim_marker": "[X]", "sim_marker_p": None}, {"sim_marker": "[X]", "sim_marker_p": "0.5"},
    {"sim_marker": "[X]"}, {"sim_p_rate_limit": None}, {"sim_p_rate_limit": 0},
    {"sim_p_timeout": "0"}, {"sim_p_malformed": 0.4}, {"max_completion_tokens": 4, "max_tokens": 0},
    {"sim_bool_p": None}, {"sim_p_invalid_args": None}, {"tool_choice": "required"},
]  # fmt: skip
LABELS: list[dict[str, Any] | None] = [
    None, {}, {"call": None, "stage": "x"}, {"call": 3}, {"stage": None, "label": "react"},
    {"tick": 1, "call": "vote"},
]  # fmt: skip


def _outcome(resp: Any) -> Any:
    if isinstance(resp, BaseException):
        return ("raised", type(resp).__name__, str(resp)[:200])
    return (resp.text, resp.finish_reason, resp.record.to_dict(), resp.tool_calls, resp.parsed)


async def _direct_calls(fast: bool, defaults: dict[str, Any]) -> tuple[list[Any], ...]:
    reset_live()
    c = LLMClient("sim/instant", seed=7, max_retries=2, **defaults).with_clock(VirtualClock())
    if not fast:
        c._get_live().server.instant = False  # type: ignore[union-attr]
    out = []
    for msgs, params, labels in itertools.product(MESSAGES, PARAMS, LABELS):
        try:
            r: Any = await c.complete(msgs, labels=labels, agent_id=None, **params)
        except Exception as exc:  # what the general loop raises, the fast path must too
            r = exc
        out.append(_outcome(r))
    return out, [c.export_state()], [c.server_metrics()], [c.usage]


@pytest.mark.parametrize(
    "defaults",
    [{}, {"lengths": {"x": [3, 0.1], "3": [50, 0.0], "react": [7, 0.2]}},
     {"max_completion": 5, "concurrency": 1}, {"temperature": None, "sim_marker": "[OK]"}],
    ids=["plain", "lengths", "cap-and-one-slot", "none-defaults"],
)  # fmt: skip
async def test_every_params_labels_messages_variant_equals_the_general_loop(
    defaults: dict[str, Any],
) -> None:
    fast = await _direct_calls(True, defaults)
    slow = await _direct_calls(False, defaults)
    for i, (a, b) in enumerate(zip(fast[0], slow[0], strict=True)):
        assert a == b, (i, a, b)
    assert fast[1:] == slow[1:]
    assert sum(isinstance(o[0], str) for o in fast[0]) > len(fast[0]) // 2  # mostly answers
    assert any(o[0] == "raised" for o in fast[0])  # and some requests the loop refuses


async def test_concurrent_callers_with_streams_and_tools_on_the_real_clock() -> None:
    """On the real clock, 3 slots, 60 concurrent callers: plain calls, streams consumed
    slowly and calls with tools; the fast path must never exceed the gate, and the
    answers, their order and the usage must equal the loop's."""
    tools = [{"type": "function", "function": {"name": "post", "parameters": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]  # fmt: skip

    async def run(fast: bool) -> tuple[list[Any], Any, int]:
        reset_live()
        c = LLMClient("sim/instant", seed=2, concurrency=3)
        if not fast:
            c._get_live().server.instant = False  # type: ignore[union-attr]
        peak = [0]

        async def one(i: int) -> Any:
            msgs = [{"role": "user", "content": f"caller {i}"}]
            peak[0] = max(peak[0], c.in_flight())
            if i % 4 == 1:
                s = c.stream(msgs)
                got = []
                async for d in s:
                    got.append(d)
                    peak[0] = max(peak[0], c.in_flight())
                    await asyncio.sleep(0)
                return ("".join(got), s.response.finish_reason if s.response else None)
            if i % 4 == 2:
                r = await c.complete(msgs, tools=tools)
                return [(t.name, t.arguments) for t in r.tool_calls]
            r = await c.complete(msgs, labels={"stage": "s"}, max_tokens=20)
            return (r.text, r.finish_reason, r.record.attempts)

        out = await asyncio.gather(*(one(i) for i in range(60)))
        return out, c.usage, peak[0]

    fast, slow = await run(True), await run(False)
    assert fast[0] == slow[0]
    assert fast[1] == slow[1] and fast[1].calls == 60
    assert fast[2] <= 3 and slow[2] <= 3  # never past the gate


def test_complete_sync_pickle_and_dict_round_trips_mid_run() -> None:
    """``complete_sync`` (its own event loop per call), then a pickled and a
    ``from_dict`` copy of the client continuing the run: the same answers, request
    counter, usage and server totals as the loop with the fast path off."""

    def run(fast: bool) -> tuple[Any, ...]:
        reset_live()
        c = LLMClient("sim/instant", seed=9, max_tokens=12)
        if not fast:
            c._get_live().server.instant = False  # type: ignore[union-attr]
        texts = [c.complete_sync([{"role": "user", "content": f"q{i}"}]).text for i in range(5)]
        c2 = pickle.loads(pickle.dumps(c))
        c3 = LLMClient.from_dict(c.to_dict())
        for i, k in enumerate((c2, c3, c2)):
            texts.append(k.complete_sync([{"role": "user", "content": f"r{i}"}]).text)
        state = c.export_state()
        server = {k: v for k, v in state["server"].items() if k not in ("bucket_t", "rate_t")}
        return texts, state["usage"], server, state["next_request"]  # wall times left out

    assert run(True) == run(False)


def test_complete_now_outside_an_event_loop_is_a_clear_error() -> None:
    """A sync-looking public method called in plain code: a ConfigError that says what
    to use, not asyncio's bare "no running event loop"; nothing was counted."""
    c = LLMClient("sim/instant", seed=1)
    with pytest.raises(ConfigError, match=r"complete_now\(\) needs a running event loop"):
        c.complete_now([{"role": "user", "content": "x"}])
    assert c.usage.calls == 0 and c.server_metrics()["requests_total"] == 0
    assert c.complete_sync([{"role": "user", "content": "x"}]).text


class Vote(BaseModel):
    agree: bool


@register_agent("adversarial_caller")
class Caller(AgentBase):
    """Defined in a test module as a notebook would define one: every kind of call."""

    def initial_state(self) -> dict[str, Any]:
        return {"seen": []}

    async def step(self, tick: int) -> None:
        svc = self.services
        assert svc is not None
        llm = svc.llm
        me = [{"role": "user", "content": f"{self.agent_id} at {tick}"}]
        got: list[Any] = []
        r = await llm.complete(me)  # the recorded fast path: no kwargs
        got.append(r.text)
        r = await llm.complete(me, labels={"call": "vote", "stage": "x"}, max_tokens=3)
        got.append([r.text, r.finish_reason])
        r = await llm.complete(me, temperature=None, stop=None, seed=None, n=1)
        got.append(r.text)
        r = await llm.complete([*me, {"role": "user", "content": None}], sim_marker="[Y]")
        got.append(r.text)
        r = await llm.complete(me, response_format=Vote)
        got.append(repr(r.parsed))
        pair = await asyncio.gather(llm.complete(me), llm.complete(me, max_tokens=2))
        got.append([p.text for p in pair])
        try:
            r = await llm.complete(me, sim_p_malformed=0.5)
            got.append(r.text)
        except Exception as exc:  # retries spent: recorded as a failed call
            got.append(type(exc).__name__)
        self.state["seen"] = [*self.state["seen"], got][-2:]


def _society(path: Path, clock: str, ticks: int, reopen_at: int | None) -> dict[str, Any]:
    soc = Society.create(path, agents=[{"type": "adversarial_caller", "n": 9}], llm="sim/instant",
                         seed=6, clock=clock, batch_size=4, progress=False)  # fmt: skip
    if reopen_at is not None:
        soc.run_sync(until=reopen_at)
        soc.close()
        soc = Society.open(path, progress=False)
    soc.run_sync(until=ticks)
    states = soc.agent_states()
    soc.close()
    return {"states": states, "rows": strict_rows(path), "spans": strict_spans(path)}


@pytest.mark.parametrize(
    ("reopen_at", "spans"), [(None, "1"), (2, "1"), (None, "0.3")],
    ids=["straight", "reopened", "sampled-spans"],
)  # fmt: skip
def test_a_notebook_style_agent_society_writes_what_the_general_loop_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reopen_at: int | None, spans: str
) -> None:
    monkeypatch.setenv("AGENTLAB_LLM_SPANS", spans)
    real = SimServer.plan_instant
    taken: list[bool] = []

    def counted(self: SimServer, *args: Any) -> Any:
        out = real(self, *args)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(SimServer, "plan_instant", counted)
    fast = _society(tmp_path / "fast" / "run", "virtual", 4, reopen_at)
    assert sum(taken) > 100 and not all(taken)  # took it and declined it
    monkeypatch.setattr(SimServer, "plan_instant", lambda self, *args: None)
    slow = _society(tmp_path / "slow" / "run", "virtual", 4, reopen_at)
    assert fast["states"] == slow["states"]
    assert fast["rows"] == slow["rows"]
    assert fast["spans"] == slow["spans"]
    assert sum(fast["rows"]["llm_calls"].values()) == 9 * 4 * 8
    llm_spans = sum(n for k, n in fast["spans"].items() if '"name": "llm.call"' in k)
    assert 0 < llm_spans < 9 * 4 * 8 if spans != "1" else llm_spans == 9 * 4 * 8
