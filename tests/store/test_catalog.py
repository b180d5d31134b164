"""The dataset catalogue: one declaration per dataset, rows built to it, readers honour it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlab.core.clock import VirtualClock
from agentlab.core.records import CallRecord
from agentlab.errors import UnknownNameError
from agentlab.llm import LLMClient
from agentlab.runtime import RunServices
from agentlab.store import catalog, get_replay_sink, open_run
from agentlab.store.schema import normalize_type


def test_every_declared_type_is_valid_and_rows_match_their_declaration() -> None:
    for spec in catalog.CATALOG.values():
        assert spec.columns["schema_version"] == "BIGINT"
        assert all(normalize_type(t) == t for t in spec.columns.values()), spec.name
        assert not set(spec.columns) & set(catalog.ROW_COLUMNS)
    rec = CallRecord("r1", "sim/x", 1.0, end=3.0, first_token=1.5, labels={"stage": "s",
                     "iteration": 2}, prompt_tokens=5, completion_tokens=7,
                     tries=[(1, "rate_limited", 1.0, 1.2, "429"), (2, "ok", 1.7, 3.0, None)])  # fmt: skip
    row = catalog.llm_call_row(rec, run_id="run", tick=None)
    cols = set(catalog.CATALOG["llm_calls"].columns)
    unused = set(catalog.LABEL_COLUMNS) - {"stage", "iteration"}
    assert set(row) == cols - unused  # labels the call lacks read back as NULL
    assert (row["latency"], row["ttft"], row["total_tokens"], row["tick"]) == (2.0, 0.5, 12, 2)
    att = catalog.llm_attempt_rows(rec, run_id="run", tick=4)
    assert [set(r) for r in att] == [set(catalog.CATALOG["llm_attempts"].columns)] * 2
    assert [r["kind"] for r in att] == ["rate_limit", "ok"]
    msg = catalog.message_row(msg_id="m", sender="a", receivers=("b",), hub="h", role="r",
                              content="hé", tick=1, ts=0.5)  # fmt: skip
    assert set(msg) == set(catalog.CATALOG["messages"].columns) and msg["bytes"] == 3
    assert CallRecord.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec
    with pytest.raises(UnknownNameError, match="llm_calls"):
        catalog.dataset_spec("llm_call")


def test_df_hides_internal_columns_unless_asked(run_dir: Path) -> None:
    sink = get_replay_sink(run_dir)
    catalog.register(sink, ["timeline"])
    sink.append("timeline", {"tick": 1, "ts": 0.0, "schema_version": 1})
    sink.flush()
    run = open_run(run_dir)
    assert "_seq" not in run.df("timeline") and "_shard" not in run.df("timeline")
    assert {"_seq", "_shard"} <= set(run.df("timeline", internal=True))


def test_missing_schema_file_is_rebuilt_from_the_shards(run_dir: Path) -> None:
    sink = get_replay_sink(run_dir)
    catalog.register(sink, ["messages"])
    sink.append("messages", catalog.message_row(msg_id="m1", sender="a", receivers=["b", "c"],
                                                hub="h", role="r", content="x", tick=1, ts=0.1))  # fmt: skip
    sink.append("custom", {"k": 3, "name": "z"})
    sink.flush()
    (run_dir / "replay/_schema.json").unlink()
    with pytest.warns(UserWarning, match="_schema.json is missing"):
        run = open_run(run_dir)  # reported at open, before any query
    assert any("catalogued custom, messages" in p for p in run.problems)
    names = run.dataset_names()
    assert {"messages", "custom"} <= set(names)
    msgs = run.sql("select receivers, hub from messages")
    assert list(msgs.receivers[0]) == ["b", "c"]
    assert run.sql("select sum(k) s from custom").s[0] == 3
    assert any("catalogued custom, messages" in p for p in run.problems)


async def test_llm_spans_carry_genai_attributes_and_export_as_genai(tmp_path: Path) -> None:
    clock = VirtualClock()
    client = LLMClient("sim/vllm-3b", seed=1).with_clock(clock)
    services = RunServices(tmp_path, client, clock="virtual")
    services.bind_clock(clock)
    resp = await services.llm.complete([{"role": "user", "content": "hi"}], agent_id="a1",
                                       temperature=0.3, max_tokens=50)  # fmt: skip
    services.flush()
    run = open_run(tmp_path)
    span = run.spans_df().iloc[0]
    attrs = json.loads(span.attributes) if isinstance(span.attributes, str) else span.attributes
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "sim/vllm-3b"
    assert attrs["gen_ai.request.temperature"] == 0.3 and attrs["gen_ai.request.max_tokens"] == 50
    assert attrs["gen_ai.usage.input_tokens"] == resp.record.prompt_tokens
    assert attrs["gen_ai.usage.output_tokens"] == resp.record.completion_tokens
    assert attrs["gen_ai.response.finish_reasons"] == [resp.finish_reason]
    assert attrs["gen_ai.agent.id"] == "a1"
    out = tmp_path / "trace.otlp.json"
    assert run.export_otlp(out) == 1
    otlp = json.loads(out.read_text())["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert otlp["name"] == "chat sim/vllm-3b" and otlp["kind"] == 3  # SPAN_KIND_CLIENT
    keys = {a["key"] for a in otlp["attributes"]}
    assert {"gen_ai.usage.input_tokens", "agentlab.span.name", "gen_ai.provider.name"} <= keys


def test_call_rows_encoded_within_their_keys_equal_checked_ones(tmp_path: Path) -> None:
    labels = {k: 1 if k in ("iteration", "round", "turn") else "x" for k in catalog.LABEL_COLUMNS}
    rec = CallRecord("r1", "sim/x", 1.0, end=2.0, labels={**labels, "custom": "y"})
    row = catalog.llm_call_row(rec, run_id="run", tick=3)
    assert set(row) == catalog.CALL_ROW_KEYS  # every label column flattened, "custom" not
    sink = get_replay_sink(tmp_path)
    catalog.register(sink, ["llm_calls"])
    checked = sink.encode("llm_calls", row)
    first = sink.encode("llm_calls", row, catalog.CALL_ROW_KEYS)  # checks, then trusts
    assert sink._ds["llm_calls"].covers == {catalog.CALL_ROW_KEYS}
    assert checked == first == sink.encode("llm_calls", row, catalog.CALL_ROW_KEYS)

    # columns that do not hold every key of ``within``: each row is still checked
    within = frozenset({"a", "b"})
    sink.encode("other", {"a": 1}, within)
    sink.encode("other", {"b": "two"}, within)  # a new key: registered, not trusted blindly
    assert {"a", "b"} <= sink._ds["other"].ok
    sink.close()


def test_a_batch_state_row_has_the_agent_states_keys() -> None:
    from agentlab.runtime.batch import _state_row

    row = _state_row("a1", "counter", 2, True, 1, {"total": 3})
    assert set(row) | {"schema_version"} == catalog.STATE_ROW_KEYS
