"""The file-based human request/answer protocol and the HumanInput widget model."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from agentlab.errors import ConfigError
from agentlab.store.human import (
    answer_request,
    ask_user,
    pending_requests,
    post_request,
    validate_answer,
)
from agentlab.viz.human_input import HumanInput

SCHEMA = {"type": "object", "properties": {"vote": {"enum": ["yes", "no"]}}, "required": ["vote"]}


async def test_ask_user_returns_the_answer_written_by_another_thread(run_dir: Path) -> None:
    def answer_when_asked() -> None:
        for _ in range(200):
            pending = pending_requests(run_dir)
            if pending:
                answer_request(run_dir, pending[0]["request_id"], {"vote": "yes"}, schema=SCHEMA)
                return
            time.sleep(0.02)

    t = threading.Thread(target=answer_when_asked)
    t.start()
    got = await ask_user(
        run_dir, "Vote?", SCHEMA, agent_id="a1", tick=4, poll_interval=0.02, timeout=10
    )
    t.join()
    assert got == {"vote": "yes"}
    assert pending_requests(run_dir) == []


async def test_pending_request_survives_and_stable_id_is_idempotent(run_dir: Path) -> None:
    with pytest.raises(TimeoutError, match="hq-fixed"):
        await ask_user(run_dir, "Q?", request_id="hq-fixed", timeout=0.05, poll_interval=0.01)
    # a new reader (a reloaded widget) still sees it pending
    assert [r["request_id"] for r in pending_requests(run_dir)] == ["hq-fixed"]
    answer_request(run_dir, "hq-fixed", "later")
    # asking again with the same id (a resumed run) neither re-posts nor waits
    got = await asyncio.wait_for(ask_user(run_dir, "Q?", request_id="hq-fixed"), 5)
    assert got == "later"
    assert pending_requests(run_dir) == []


def test_validate_answer_names_bad_value() -> None:
    assert validate_answer(3, {"type": "integer", "minimum": 1}) == 3
    with pytest.raises(ConfigError, match="True"):
        validate_answer(True, {"type": "integer"})
    with pytest.raises(ConfigError, match="'maybe'"):
        validate_answer({"vote": "maybe"}, SCHEMA)
    with pytest.raises(ConfigError, match="required field 'vote'"):
        validate_answer({}, SCHEMA)
    with pytest.raises(ConfigError, match="unsupported answer schema"):
        post_request("/nonexistent-never-written", "q", schema=42)


def test_widget_lists_pending_and_answers_from_the_page(run_dir: Path) -> None:
    rid = post_request(run_dir, "<b>Pick</b>", SCHEMA, agent_id="a2")
    w = HumanInput(run_dir, follow=False)
    assert [p["request_id"] for p in w.pending] == [rid]
    assert w.pending[0]["schema"] == SCHEMA
    w._dispatch_msg(w, {"type": "answer", "request_id": rid, "answer": {"vote": "maybe"}}, [])
    assert "maybe" in w.error and w.pending  # rejected, still pending
    w._dispatch_msg(w, {"type": "answer", "request_id": rid, "answer": {"vote": "no"}}, [])
    assert w.error == "" and w.pending == []
    assert w.answered[0]["answer"] == '{"vote": "no"}'
    w._dispatch_msg(w, {"type": "answer", "request_id": "nope", "answer": 1}, [])
    assert "nope" in w.error
    w.close()
