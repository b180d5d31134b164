"""The floors of ``society.py``: the cheapest known way to do a society step's work, in CPU.

A society agent-step (``counter`` agent, ``sim/instant``, one call) does two kinds of
durable work, and each has a floor term here, measured in the benchmark's own run:

- **state**: read, parse, modify and write one agent's state (:func:`floor`; the packed
  store's layout is ``sqlite_batched_segment``: per 256 agents one ``SELECT ... IN`` and one
  ``executemany`` upsert in one transaction);
- **log rows** (:func:`rows_floor`): the rows the step writes, *the same rows* — one
  ``llm_calls`` row, one ``agent_states`` row, an ``agent.step`` and an ``llm.call`` span,
  ~1.8 KB, taken from a real 4-agent run of the same society (:func:`sample_step_rows`,
  ``_shard`` and ``_seq`` included) and prebuilt as dicts before the clock starts — encoded
  to JSONL per 256 agents (one ``orjson.dumps`` per dataset and batch, cut at ``},{``: the
  cheapest way measured, ~6x cheaper than a ``dumps`` per row), appended with one
  ``os.write`` per file and batch, and CRC'd (``zlib.crc32``: the commit's marks);

plus the **call** term, a bare ``await`` of a coroutine returning a ready reply
(:func:`bare_await_us`); agentlab's own ``sim/instant`` client (:func:`bare_call_us`) is
printed beside it for reference, not part of any floor. Building the rows' values
(timestamps, ids, the simulated reply) is not in the floor: that is the subject's own
computation, for which there is no cheaper reference.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Any

from _measure import Measure, Timer

__all__ = ["bare_await_us", "bare_call_us", "floor", "rows_floor", "sample_step_rows"]


def floor(n: int, root: str, seg: int = 256) -> dict[str, Measure]:
    """CPU per agent of the bare state round trip read + parse + modify + write.

    Every layout is timed in CPU (``_measure.Timer("cpu")``), the same kind of clock as the
    society's rows, so the ratio does not move with other processes' load. Layouts: a file
    per agent rewritten in place (the directory store's slot write); one orjson file per
    ``seg`` agents replaced by rename; SQLite rows with one transaction and one statement
    pair per agent; and SQLite batched as ``PackedStore`` does it: per ``seg`` agents one
    ``SELECT ... WHERE agent IN (...)`` and one ``executemany`` upsert in one transaction.
    """
    import sqlite3

    import orjson

    base = Path(tempfile.mkdtemp(dir=root, prefix="floor-"))
    state = {"count": 0, "memory": "m" * 300}
    ids = [f"a{i:07d}" for i in range(n)]
    out: dict[str, Measure] = {}
    for a in ids:  # (a) a file per agent
        (base / "dir" / a).mkdir(parents=True)
        (base / "dir" / a / "s.json").write_bytes(orjson.dumps(state))
    with Timer("cpu") as t:
        for a in ids:
            path = f"{base}/dir/{a}/s.json"
            with open(path, "rb") as f:
                v = orjson.loads(f.read())
            v["count"] += 1
            data = orjson.dumps(v)
            fd = os.open(path, os.O_WRONLY)
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            os.close(fd)
    out["file_per_agent"] = t.measure(n)
    segs = [ids[i : i + seg] for i in range(0, n, seg)]  # (b) one orjson file per segment
    (base / "seg").mkdir()
    for k, group in enumerate(segs):
        (base / "seg" / f"{k}.json").write_bytes(orjson.dumps({a: state for a in group}))
    with Timer("cpu") as t:
        for k in range(len(segs)):
            path = base / "seg" / f"{k}.json"
            d = orjson.loads(path.read_bytes())
            for v in d.values():
                v["count"] += 1
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(orjson.dumps(d))
            os.replace(tmp, path)
    out["orjson_segment"] = t.measure(n)
    db = sqlite3.connect(base / "kv.sqlite", isolation_level=None)  # (c), (d) SQLite rows
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(
        "CREATE TABLE kv (agent TEXT, key TEXT, value BLOB, PRIMARY KEY (agent, key)) WITHOUT ROWID"
    )
    blob = orjson.dumps(state)
    db.executemany("INSERT INTO kv VALUES (?, 's', ?)", [(a, blob) for a in ids])
    q, w = (
        "SELECT value FROM kv WHERE agent=? AND key='s'",
        "INSERT OR REPLACE INTO kv VALUES (?, 's', ?)",
    )
    with Timer("cpu") as t:  # (c) autocommit: a transaction, a SELECT and an INSERT per agent
        for a in ids:
            v = orjson.loads(db.execute(q, (a,)).fetchone()[0])
            v["count"] += 1
            db.execute(w, (a, orjson.dumps(v)))
    out["sqlite_txn_per_agent"] = t.measure(n)
    with Timer("cpu") as t:  # (d) the packed store's batch: one SELECT, one executemany
        for group in segs:
            marks = ",".join("?" * len(group))
            rows = db.execute(f"SELECT agent, value FROM kv WHERE key='s' AND agent IN ({marks})",
                              group).fetchall()  # fmt: skip
            new = []
            for a, raw in rows:
                v = orjson.loads(raw)
                v["count"] += 1
                new.append((a, orjson.dumps(v)))
            db.execute("BEGIN")
            db.executemany(w, new)
            db.execute("COMMIT")
    out["sqlite_batched_segment"] = t.measure(n)
    db.close()
    shutil.rmtree(base, ignore_errors=True)
    return out


def bare_call_us(n: int = 20_000) -> Measure:
    """CPU per one ``LLMClient("sim/instant").complete`` (the counter agent's call): what
    agentlab's client costs, printed for reference, not part of the floor."""
    import asyncio

    from agentlab.llm import LLMClient

    client = LLMClient("sim/instant", seed=0)

    async def loop(k: int) -> None:
        for i in range(k):
            aid = f"a{i:07d}"
            await client.complete(
                [{"role": "user", "content": f"{aid} tick 1 draw {i % 1000}"}],
                agent_id=aid,
                labels={"stage": "count", "iteration": 0, "tick": 1},
            )

    asyncio.run(loop(min(n, 2000)))  # warm-up
    with Timer("cpu") as t:
        asyncio.run(loop(n))
    return t.measure(n)


def bare_await_us(n: int = 200_000) -> Measure:
    """CPU per bare ``await`` of a coroutine returning a ready reply: the floor's call term
    (the cheapest way to "make a call" in an asyncio step, with no client at all)."""
    import asyncio

    reply = {"content": "ok", "usage": {"prompt_tokens": 8, "completion_tokens": 1}}

    async def call(messages: list[dict[str, str]]) -> dict[str, Any]:
        return reply

    async def loop(k: int) -> None:
        msgs = [{"role": "user", "content": "a0 tick 1"}]
        for _ in range(k):
            await call(msgs)

    with Timer("cpu") as t:
        asyncio.run(loop(n))
    return t.measure(n)


def sample_step_rows(root: str) -> dict[str, dict[str, Any]]:
    """One agent-step's rows as a society writes them: ``{"llm_calls", "agent_states",
    "agent.step", "llm.call"}``, read back from a 4-agent, one-tick run of the benchmark's
    society (``counter``, one call, ``sim/instant``, packed), ``_shard``/``_seq`` included."""
    import orjson

    from agentlab.runtime import Society

    run = Path(tempfile.mkdtemp(dir=root, prefix="rows-"))
    s = Society.create(run / "r", agents=[{"type": "counter", "n": 4, "config": {"llm_calls": 1}}],
                       llm="sim/instant", seed=0, progress=False, store="packed")  # fmt: skip
    s.run_sync(ticks=1)
    s.close()

    def first(pattern: str, name: str | None = None) -> dict[str, Any]:
        for path in sorted(glob.glob(str(run / "r" / pattern))):
            for line in Path(path).read_bytes().splitlines():
                row: dict[str, Any] = orjson.loads(line)
                if name is None or row.get("name") == name:
                    return row
        raise RuntimeError(f"no {name or pattern} row in the sample run {run}")

    out = {
        "llm_calls": first("replay/llm_calls/*.jsonl"),
        "agent_states": first("replay/agent_states/*.jsonl"),
        "agent.step": first("trace/*.jsonl", "agent.step"),
        "llm.call": first("trace/*.jsonl", "llm.call"),
    }
    shutil.rmtree(run, ignore_errors=True)
    return out


def rows_floor(
    n: int, root: str, samples: dict[str, dict[str, Any]], seg: int = 256
) -> tuple[Measure, int]:
    """CPU per agent of writing one step's log rows the cheapest known way (module
    docstring), and the bytes per agent it wrote. ``samples``: :func:`sample_step_rows`.

    Each agent's rows are copies of the samples with its own ``agent_id``, request and
    span ids and ``_seq`` (so ``orjson`` encodes as many distinct strings as the
    society's writer does), built before the clock starts.
    """
    import orjson

    base = Path(tempfile.mkdtemp(dir=root, prefix="rows-floor-"))
    call, state = samples["llm_calls"], samples["agent_states"]
    step, llm = samples["agent.step"], samples["llm.call"]
    calls, states, spans = [], [], []
    for i in range(n):
        agent, rid, sid = f"a{i:07d}", f"r{i:08d}", f"{i:016x}"
        calls.append({**call, "agent_id": agent, "request_id": rid, "_seq": i})
        states.append({**state, "agent_id": agent, "_seq": i})
        attrs = {**llm["attributes"], "gen_ai.agent.id": agent, "gen_ai.response.id": rid}
        spans.append({**llm, "span_id": f"{i:015x}1", "parent": sid, "attributes": attrs,
                      "_seq": 2 * i})  # fmt: skip
        attrs = {**step["attributes"], "gen_ai.agent.id": agent}
        spans.append({**step, "span_id": sid, "attributes": attrs, "_seq": 2 * i + 1})
    files = [(calls, 1), (states, 1), (spans, 2)]  # (rows, rows per agent)
    fds = [os.open(base / f"{k}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND) for k in range(3)]
    crcs = [0, 0, 0]
    written = 0
    dumps = orjson.dumps
    with Timer("cpu") as t:
        for lo in range(0, n, seg):
            for k, (rows, per) in enumerate(files):
                chunk = rows[lo * per : (lo + seg) * per]
                parts = dumps(chunk)[2:-2].split(b"},{")
                if len(parts) != len(chunk):  # "},{" inside a value: the sample rows never
                    raise RuntimeError("rows_floor: a sample row holds '},{'")
                data = b"{%b}\n" % b"}\n{".join(parts)
                os.write(fds[k], data)
                crcs[k] = zlib.crc32(data, crcs[k])
                written += len(data)
    for fd in fds:
        os.close(fd)
    shutil.rmtree(base, ignore_errors=True)
    return t.measure(n), written // n
