"""``BatchLog``: a batch's hot rows are encoded as the sink encodes them."""

from __future__ import annotations

from pathlib import Path

from agentlab.runtime.batch_log import BatchLog
from agentlab.store import catalog
from agentlab.store.catalog import STATE_ROW_KEYS
from agentlab.store.replay import ReplaySink


def _state(i: int) -> dict[str, object]:
    return {"agent_id": f"a{i}", "type": "counter", "tick": 1, "ok": True, "attempts": 1,
            "summary": {"total": i}}  # fmt: skip


def test_rows_after_the_first_skip_the_column_check_and_keep_their_bytes(tmp_path: Path) -> None:
    sink = ReplaySink(tmp_path)
    catalog.register(sink, ("agent_states",), module=__name__)  # as a society does at create
    log = BatchLog(sink)
    rows = [_state(i) for i in range(3)]
    for row in rows:
        log.state(row, STATE_ROW_KEYS)
    # the sink checked the first row and found the key set covered, so the batch trusts
    # it for the rest of its rows
    assert sink.covered("agent_states", STATE_ROW_KEYS)
    assert log._state_keys is STATE_ROW_KEYS
    assert log.states == [sink.encode("agent_states", row, STATE_ROW_KEYS) for row in rows]
    # a row without a key set is checked as before (a new key becomes a column)
    log.state({**_state(9), "extra": 1})
    assert "extra" in sink.encode("agent_states", {"extra": 2}).decode()  # type: ignore[union-attr]
    log.write(_Services(sink))
    sink.close()
    lines = (tmp_path / "replay" / "agent_states").glob("*.jsonl")
    assert sum(len(p.read_bytes().splitlines()) for p in lines) == 4


class _Services:
    def __init__(self, sink: ReplaySink) -> None:
        self.replay = sink
        self.trace = None
