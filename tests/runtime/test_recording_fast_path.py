"""The recorded ``sim/instant`` fast path (``RecordingLLM`` answering at once through
``LLMClient.complete_now``) writes exactly the rows, spans and states of the general path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentlab.llm.sim_backend import SimServer
from agentlab.runtime import Society
from tests.runtime.resume_helpers import strict_rows, strict_spans


def _rows(path: Path) -> dict[str, Any]:
    """strict_rows, but env_requests' latency_s: wall-clock seconds (under any clock)."""
    rows = strict_rows(path)
    if "env_requests" in rows:
        rows["env_requests"] = sorted(
            json.dumps({k: v for k, v in json.loads(r).items() if k != "latency_s"})
            for r in rows["env_requests"].elements()
        )
    return rows


def _run(path: Path, agents: Any, env: list[str]) -> dict[str, Any]:
    soc = Society.create(path, agents=agents, env=env, llm="sim/instant", seed=4,
                         clock="virtual", batch_size=16, progress=False)  # fmt: skip
    soc.run_sync(ticks=3)
    states = soc.agent_states()
    soc.close()
    return {"rows": _rows(path), "spans": strict_spans(path), "states": states}


@pytest.mark.parametrize(
    ("agents", "env"),
    [
        ([{"type": "counter", "n": 40, "config": {"llm_calls": 2}}], []),
        # persona agents: react calls with tools (the loop) and intent calls (at once)
        (
            [{"type": "llm", "n": 12, "config": {"env_mode": "ask"}}, {"type": "llm", "n": 12}],
            ["social_feed"],
        ),
    ],
    ids=["counter", "personas"],
)
def test_fast_path_writes_what_the_general_path_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agents: Any, env: list[str]
) -> None:
    real = SimServer.plan_instant
    answered: list[bool] = []

    def counted(self: SimServer, *args: Any) -> Any:
        out = real(self, *args)
        answered.append(out is not None)
        return out

    monkeypatch.setattr(SimServer, "plan_instant", counted)
    fast = _run(tmp_path / "fast" / "run", agents, env)  # same name: the run_id column
    assert any(answered), "no call took the fast path"
    monkeypatch.setattr(SimServer, "plan_instant", lambda self, *args: None)
    slow = _run(tmp_path / "slow" / "run", agents, env)
    assert fast["states"] == slow["states"]
    assert fast["spans"] == slow["spans"]
    assert fast["rows"] == slow["rows"]
    assert sum(fast["rows"]["llm_calls"].values()) > 0
    if env:  # the routers ran, and the personas posted
        assert fast["rows"]["env_requests"] and fast["rows"]["messages"]


def test_the_recording_wrapper_does_not_hand_out_an_unrecorded_call(tmp_path: Path) -> None:
    from agentlab.runtime.services import RunServices

    llm = RunServices(tmp_path, "sim/instant").llm
    assert llm.limit >= 1  # other client attributes still show through
    with pytest.raises(AttributeError, match="bypass the run log"):
        llm.complete_now  # noqa: B018


@pytest.mark.parametrize("agent_id", ["a1", None])
def test_a_plain_call_span_has_genai_llm_attrs_in_their_order(
    tmp_path: Path, agent_id: str | None
) -> None:
    """An agent's plain call's ``llm.call`` span carries ``genai_llm_attrs``' keys, values
    and order, after the tick and before the conversation id and agent name."""
    import asyncio

    from agentlab.runtime.services import RunServices
    from agentlab.store.trace import genai_llm_attrs

    services = RunServices(tmp_path, "sim/instant")
    llm = services.llm

    async def call() -> Any:
        return await llm.complete([{"role": "user", "content": "hi"}], agent_id=agent_id, tick=3)

    resp = asyncio.run(call())
    services.flush()
    spans = [
        json.loads(line)
        for f in sorted((tmp_path / "trace").glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    (span,) = [s for s in spans if s["name"] == "llm.call"]
    want: dict[str, Any] = {"agentlab.tick": 3}
    genai_llm_attrs(resp.record, {}, resp.finish_reason, want)
    want["gen_ai.conversation.id"] = f"{services.run_id}/{agent_id or ''}"
    if agent_id is not None:
        want["gen_ai.agent.name"] = agent_id
    assert list(span["attributes"].items()) == list(json.loads(json.dumps(want)).items())


async def test_an_instant_call_keeps_its_own_copy_of_the_callers_labels(tmp_path: Path) -> None:
    # The fast path hands the labels dict to the record uncopied (RecordingLLM copied the
    # caller's once): the caller's dict is neither kept nor changed.
    from agentlab.runtime.services import RunServices

    llm = RunServices(tmp_path, "sim/instant").llm
    labels = {"stage": "count"}
    resp = await llm.complete([{"role": "user", "content": "hi"}], labels=labels, tick=3)
    assert resp.record.labels == {"stage": "count"} and resp.record.labels is not labels
    labels["stage"] = "changed"
    assert resp.record.labels == {"stage": "count"}
    again = await llm.complete([{"role": "user", "content": "hi"}])
    assert again.record.labels == {}


def test_a_wrapped_client_is_asked_through_its_own_complete_now(tmp_path: Path) -> None:
    # The labels-taking entry point is looked up on the client's class: a wrapper that
    # forwards attributes to an inner LLMClient (the virtual-time worker's) keeps its own
    # complete_now, which declines every call.
    from agentlab.llm import LLMClient
    from agentlab.runtime.recording import RecordingLLM
    from agentlab.runtime.services import RunServices

    class Wrapper:
        def __init__(self, inner: LLMClient) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

        def complete_now(self, messages: Any, **kwargs: Any) -> None:
            return None

    services = RunServices(tmp_path, "sim/instant")
    assert RecordingLLM(Wrapper(LLMClient("sim/instant")), services)._now_owned is None
    assert RecordingLLM(LLMClient("sim/instant"), services)._now_owned is not None
