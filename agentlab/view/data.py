"""What the browser's pages show, read from run directories (queries, no HTML).

- :func:`runs_rows`: one row per run, sweep and paper under a folder — the rows of the
  index page and of ``agentlab runs``.
- :func:`run_summary`: the header numbers of one run, in the one error vocabulary
  (``step_errors``, ``tool_errors``, ``llm_failures`` by kind, ``total``): those of
  :func:`agentlab.store.summary.summarize_run`, as ``runs``, ``report`` and the widgets.
- paged queries over one run: :func:`errors_df`, :func:`calls_df`, :func:`messages_df`,
  :func:`agent_timeline_df`; :func:`call_page` finds the page that shows a call.

Each query reads through :func:`agentlab.store.open_run` (DuckDB over the run's JSONL).
Summaries are cached per run and change marker, so an index over hundreds of runs is
computed once and then only for the runs that moved.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.store.catalog import attempt_kind
from agentlab.store.run import Run
from agentlab.store.summary import TOOL_SPANS, caused_by_llm, summarize_run
from agentlab.view.files import Entry, change_marker, find_entries, read_doc

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd

__all__ = [
    "CALLS_PER_PAGE",
    "ROWS_PER_PAGE",
    "agent_timeline_df",
    "agents_df",
    "call_page",
    "calls_df",
    "errors_df",
    "message_calls",
    "messages_df",
    "redact",
    "run_summary",
    "runs_rows",
    "span_calls",
    "spans_df",
]

ROWS_PER_PAGE = 100
CALLS_PER_PAGE = 40

#: parameter names whose values a page never shows (``--bundle`` travels)
SECRET = re.compile(r"(api[_-]?key|token|secret|password|passwd|credential|auth|private)", re.I)

_CACHE: dict[tuple[str, Any], dict[str, Any]] = {}
_LOCK = threading.Lock()


def redact(params: Any) -> Any:
    """``params`` with the value of every secret-looking key (``api_key``, ``token``,
    ``secret``, ``password``...) replaced by ``"[redacted]"``, recursively."""
    if isinstance(params, dict):
        return {k: "[redacted]" if SECRET.search(str(k)) else redact(v) for k, v in params.items()}
    if isinstance(params, list):
        return [redact(v) for v in params]
    return params


def _names(run: Run) -> set[str]:
    return set(run.dataset_names())


def _one(run: Run, sql: str) -> Any:
    df = run.sql(sql)
    return df.iloc[0, 0] if len(df) else None


def run_summary(e: Entry) -> dict[str, Any]:
    """The header numbers of ``e`` (cached until its change marker moves)."""
    key = (str(e.path), change_marker(e.path))
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    s = summarize_run(e.path).to_dict()
    s["params"] = redact(s.get("params") or {})
    with _LOCK:
        _CACHE[key] = s
    return s


def runs_rows(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """One row per run, sweep and paper under ``root`` (the index page and
    ``agentlab runs`` print these): ``run`` (path from the root), ``kind``, ``status``,
    ``created``, ``ended``, ``params``, ``ticks``, ``steps``, ``llm_calls``, the error
    counts (``step_errors``, ``tool_errors``, ``llm_failures``, ``errors`` = total) and
    ``parent`` (the sweep or paper holding the run). A run that cannot be read gets
    ``status`` ``unreadable: <error>`` and zeros, and does not hide the others."""
    rows = []
    entries = find_entries(Path(root))
    points = _sweep_points(entries)
    for e in entries:
        if e.rel == "" and e.kind not in ("sweep", "paper"):
            name = e.path.name
        else:
            name = e.rel or e.path.name
        try:
            s = run_summary(e)
            err = s["errors"]
            failures = err.get("llm_failures") or {}
            row = {
                "run": name,
                "kind": e.kind,
                "status": s.get("status"),
                "created": s.get("created"),
                "ended": s.get("ended"),
                "params": s.get("params") or _point_params(e, points),
                "ticks": s.get("ticks", 0),
                "steps": s.get("steps", 0),
                "llm_calls": s.get("llm_calls", 0),
                "step_errors": err.get("step_errors", 0),
                "tool_errors": err.get("tool_errors", 0),
                "llm_failures": sum(failures.values()),
                "errors": err.get("total", 0),
            }
        except Exception as exc:  # one damaged run must not hide the others
            row = {"run": name, "kind": e.kind, "status": f"unreadable: {type(exc).__name__}",
                   "created": e.manifest.get("created"), "ended": None,
                   "params": redact(e.manifest.get("params") or {}), "ticks": 0, "steps": 0,
                   "llm_calls": 0, "step_errors": 0, "tool_errors": 0, "llm_failures": 0,
                   "errors": 0}  # fmt: skip
        row["rel"] = e.rel
        row["parent"] = e.parent
        rows.append(row)
    return rows


def _sweep_points(entries: list[Entry]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{sweep rel: {point_id: params}}`` for every sweep among ``entries``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for e in entries:
        if e.kind == "sweep":
            pts = read_doc(e.path / "sweep.json").get("points")
            out[e.rel] = {
                str(p.get("point_id")): p.get("params") or {}
                for p in (pts if isinstance(pts, list) else [])
                if isinstance(p, dict)
            }
    return out


def _point_params(e: Entry, points: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """The grid parameters of the sweep point whose notebook wrote run ``e`` (such a run
    has none of its own in its manifest), so the runs list shows and filters them."""
    if e.parent is None or e.parent not in points:
        return {}
    rest = e.rel[len(e.parent) + 1 :] if e.parent else e.rel
    return dict(redact(points[e.parent].get(rest.split("/", 1)[0], {})))


# --- one run, paged ------------------------------------------------------------------------


def _page(df: Any, page: int, per: int) -> tuple[Any, int]:
    pages = max(1, -(-len(df) // per))
    return df.iloc[(page - 1) * per : page * per], pages


def errors_df(run: Run) -> pd.DataFrame:
    """Every error the run's header counts, in the same vocabulary: ``kind`` (step error,
    tool error, LLM failure: <kind>), ``agent``, ``tick``, ``message``, ``traceback``,
    ``request_id`` (the LLM call behind it, where one can be named), ordered by tick.

    Step errors are failed agent-step attempts (a society) or failed runs (an
    experiment); tool errors are ``env.tool`` / ``env.ask`` spans that failed; LLM
    failures are calls that failed after their retries (``llm_calls.outcome``). An LLM
    failure that made a step attempt (a run) fail is listed once, as that step error with
    the call as its ``request_id``, as the header's total counts it
    (``ErrorCounts.llm_in_steps``)."""
    import pandas as pd

    have = _names(run)
    parts = []
    calls = calls_index(run)
    failed = _failed_calls(calls)
    claimed: set[Any] = set()
    if "agent_errors" in have:
        ae = run.df("agent_errors")
        tb = ae["traceback"] if "traceback" in ae else pd.Series([None] * len(ae))
        parts.append(pd.DataFrame({
            "kind": ["step error" if f else "step error (retried)" for f in ae["final"]],
            "agent": ae["agent_id"],
            "tick": ae["tick"],
            "message": ae["error_class"].fillna("") + ": " + ae["error"].fillna(""),
            "traceback": tb.values,
            # an attempt an LLM failure ended: its agent's n-th failed call at that tick
            "request_id": _claim(failed, claimed, [
                (a, t) if caused_by_llm(c) else None
                for a, t, c in zip(ae["agent_id"], ae["tick"], ae["error_class"], strict=True)
            ]),
        }))  # fmt: skip
    if "experiment_runs" in have:
        xr = run.sql("select run_id, error from experiment_runs where status <> 'ok'")
        parts.append(pd.DataFrame({
            "kind": "step error (run failed)", "agent": None, "tick": None,
            "message": xr["run_id"] + ": " + xr["error"].fillna(""), "traceback": None,
            "run_id": xr["run_id"],
            "request_id": _claim(failed, claimed, [
                r if caused_by_llm(str(err or "").partition(":")[0].strip()) else None
                for r, err in zip(xr["run_id"], xr["error"], strict=True)
            ]),
        }))  # fmt: skip
    if "spans" in have:
        names = ", ".join(f"'{n}'" for n in TOOL_SPANS)
        sp = run.sql(
            "select coalesce(attributes->>'gen_ai.agent.id', attributes->>'agent_id') agent, "
            "try_cast(coalesce(attributes->>'agentlab.tick', attributes->>'tick') as bigint) "
            "tick, coalesce(status_message, attributes->>'gen_ai.tool.name', "
            "attributes->>'tool', name) message from spans "
            f"where status = 'error' and name in ({names})"
        )
        parts.append(sp.assign(kind="tool error", traceback=None))
    if "llm_calls" in have:
        lc = run.sql(
            "select request_id, agent_id, tick, outcome, error from llm_calls "
            "where outcome is not null and outcome <> 'ok'"
        )
        lc = lc[~lc["request_id"].isin(claimed)]  # (listed as the step error it caused)
        parts.append(pd.DataFrame({
            "kind": ["LLM failure: " + attempt_kind(o) for o in lc["outcome"]],
            "agent": lc["agent_id"],
            "tick": lc["tick"],
            "message": lc["outcome"] + ": " + lc["error"].fillna(""),
            "traceback": None,
            "request_id": lc["request_id"],
        }))  # fmt: skip
    cols = ["kind", "agent", "tick", "message", "traceback", "request_id", "run_id"]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True).reindex(columns=cols)
    # a column no part had is all-NaN float64, which pandas 3 will not fill with ids (a run
    # whose only errors were tool errors broke its errors page and the bundle)
    out["request_id"] = out["request_id"].astype(object)
    # a step error no LLM failure caused (or with none left to pair): the agent's last
    # call at that tick, the one it was working on
    need = out["request_id"].isna() & out["agent"].notna()
    if need.any() and len(calls):
        c = calls.dropna(subset=["agent_id"])
        last = c.groupby(["agent_id", "tick"])["request_id"].last()
        out.loc[need, "request_id"] = [
            last.get((a, t)) for a, t in zip(out.loc[need, "agent"], out.loc[need, "tick"],
                                             strict=True)
        ]  # fmt: skip
    return out.sort_values(["tick", "agent"], na_position="last", kind="stable")


def _failed_calls(calls: pd.DataFrame) -> dict[Any, list[Any]]:
    """The failed calls in :func:`calls_index` order, by ``(agent, tick)`` and by
    ``run_id`` (the keys ``summarize_run`` pairs step errors with them by)."""
    out: dict[Any, list[Any]] = {}
    if not len(calls):
        return out
    bad = calls[calls["outcome"].fillna("ok") != "ok"]
    for rid, agent, tick, sub in zip(bad["request_id"], bad["agent_id"], bad["tick"],
                                     bad["run_id"], strict=True):  # fmt: skip
        out.setdefault((agent, tick), []).append(rid)
        if isinstance(sub, str) and sub:
            out.setdefault(sub, []).append(rid)
    return out


def _claim(failed: dict[Any, list[Any]], claimed: set[Any], keys: list[Any]) -> list[Any]:
    """For each step error's key (None: no LLM failure caused it), the next unclaimed
    failed call there, or None; the calls taken go into ``claimed``."""
    out = []
    for key in keys:
        rid = None
        for cand in failed.get(key, []) if key is not None else []:
            if cand not in claimed:
                rid = cand
                break
        if rid is not None:
            claimed.add(rid)
        out.append(rid)
    return out


def calls_index(run: Run) -> pd.DataFrame:
    """``request_id, agent_id, tick, run_id, start, end, outcome, stage, topology, round``
    of every call, in the order of the calls pages (``round``: an experiment's discussion
    round, what its messages tables show for the message a call wrote)."""
    import pandas as pd

    if "llm_calls" not in _names(run):
        return pd.DataFrame(columns=["request_id", "agent_id", "tick", "run_id", "start", "end",
                                     "outcome", "round"])  # fmt: skip
    return run.sql(
        'select request_id, agent_id, tick, run_id, start, "end", outcome, stage, '
        'topology, "round" from llm_calls order by start, request_id'
    )


def call_page(run: Run, request_id: str, *, run_id: str | None = None) -> int | None:
    """The calls page (1-based) showing ``request_id`` (within sub-run ``run_id``)."""
    idx = calls_index(run)
    if run_id is not None:
        idx = idx[idx["run_id"] == run_id]
    hit = [i for i, r in enumerate(idx["request_id"]) if r == request_id]
    return hit[0] // CALLS_PER_PAGE + 1 if hit else None


def calls_df(run: Run, page: int, *, run_id: str | None = None) -> tuple[Any, int]:
    """One page of calls (with ``messages``/``reply``/``tool_calls``/``io_error`` from
    ``llm_io`` where the run recorded them) and the number of pages."""
    idx = calls_index(run)
    if run_id is not None:
        idx = idx[idx["run_id"] == run_id]
    part, pages = _page(idx, page, CALLS_PER_PAGE)
    full = run.sql(
        "select * from llm_calls where request_id in (select unnest(?))",
        [list(part["request_id"])],
    ) if len(part) else part  # fmt: skip
    full = part[["request_id"]].merge(full, on="request_id", how="left") if len(part) else full
    if len(part) and "llm_io" in _names(run):
        io = run.sql(
            "select request_id, messages, reply, tool_calls, error io_error from llm_io "
            "where request_id in (select unnest(?))",
            [list(part["request_id"])],
        ).drop_duplicates("request_id")
        full = full.merge(io, on="request_id", how="left")
    return full, pages


def messages_df(run: Run, page: int, *, run_id: str | None = None) -> tuple[Any, int]:
    """One page of delivered messages (in order) and the number of pages."""
    import pandas as pd

    if "messages" not in _names(run):
        return pd.DataFrame(), 1
    where = "where run_id = ?" if run_id is not None else ""
    n = int(_one_p(run, f"select count(*) from messages {where}", run_id) or 0)
    pages = max(1, -(-n // ROWS_PER_PAGE))
    df = run.sql(
        f"select tick, ts, hub, sender, receivers, content, run_id from internal.messages {where} "
        f"order by _seq, ts limit {ROWS_PER_PAGE} offset {(page - 1) * ROWS_PER_PAGE}",
        [run_id] if run_id is not None else None,
    )
    return df, pages


def _one_p(run: Run, sql: str, param: Any) -> Any:
    df = run.sql(sql, [param] if param is not None else None)
    return df.iloc[0, 0] if len(df) else None


class _LastCall:
    """The request id of an agent's call that was the last, in :func:`calls_index` order,
    with ``time_col`` at or before ``t + slack`` among its calls where ``col == value``
    (else its last call there): the call behind a message or a span.

    Each agent's calls, and each of its groups, are picked out once, when first asked: a
    page of 100 messages or spans filtered the whole calls table per row (a 180-run
    study's ``--bundle``: 17 s of 75 s in those filters).
    """

    def __init__(self, calls: pd.DataFrame, time_col: str, slack: float) -> None:
        import numpy as np

        self._calls, self._time, self._slack = calls, time_col, slack
        self._agents = calls["agent_id"].to_numpy() if len(calls) else np.array([])
        self._by_agent: dict[Any, pd.DataFrame] = {}
        self._picked: dict[tuple[Any, Any, Any], tuple[Any, Any]] = {}

    def of_agent(self, agent: Any) -> pd.DataFrame:
        if agent not in self._by_agent:
            self._by_agent[agent] = self._calls[self._agents == agent]
        return self._by_agent[agent]

    def __call__(self, agent: Any, col: str | None, value: Any, t: Any) -> str | None:
        import numpy as np

        key = (agent, col, value)
        if key not in self._picked:
            g = self.of_agent(agent)
            c = g if col is None else g[g[col] == value]
            self._picked[key] = (c[self._time].to_numpy(dtype=float), c["request_id"].to_numpy())
        times, rids = self._picked[key]
        if not len(rids):
            return None
        if t is not None:
            hit = np.flatnonzero(times <= float(t) + self._slack)
            if len(hit):
                return str(rids[hit[-1]])
        return str(rids[-1])


def message_calls(calls: pd.DataFrame) -> Callable[[Any, Any, Any, Any], str | None]:
    """``find(sender, run_id, ts, tick)``: the request id of the call that wrote a message,
    the sender's call in that run (or tick) that ended last at or before the message's
    time, from ``calls`` in :func:`calls_index` order."""
    last = _LastCall(calls, "end", 1e-6)

    def find(sender: Any, run_id: Any, ts: Any, tick: Any) -> str | None:
        g = last.of_agent(sender)
        if run_id is not None and "run_id" in g and g["run_id"].notna().any():
            return last(sender, "run_id", run_id, ts)
        if tick is not None and "tick" in g and g["tick"].notna().any():
            return last(sender, "tick", tick, ts)
        return last(sender, None, None, ts)

    return find


def span_calls(calls: pd.DataFrame) -> Callable[[Any, Any, Any], str | None]:
    """``find(agent, tick, start)``: the request id behind a span, the agent's call at that
    tick that started last at or before the span (the call that asked for a tool; an
    ``llm.call`` span names its own)."""
    last = _LastCall(calls, "start", 1e-3)

    def find(agent: Any, tick: Any, start: Any) -> str | None:
        if agent is None:
            return None
        return last(agent, "tick" if tick is not None else None, tick, start)

    return find


#: what an agent did, the columns of its timeline (per tick) and of the agents page (totals)
ACTIVITY = ("steps", "llm_calls", "llm_failures", "tokens", "tool_calls", "tool_errors",
            "messages", "step_errors")  # fmt: skip


def _activity(run: Run, agent: str | None) -> pd.DataFrame:
    """:data:`ACTIVITY` counts, ``latency_p50`` and ``first_call`` (a request id to open)
    per tick of ``agent``, or per agent (``agent`` None); one set of queries for both."""
    import pandas as pd

    have = _names(run)
    frames = []
    one = agent is not None
    key = "tick" if one else "agent"

    def add(cols: str, table: str, who: str, tick: str = "tick", cond: str = "true") -> None:
        # who: the SQL of a row's agent: one agent's rows by tick, or all rows by agent
        where = f"{who} = ?" if one else f"{who} is not null"
        frames.append(run.sql(f"select {tick if one else who} {key}, {cols} from {table} "
                              f"where {cond} and {where} group by 1",
                              [agent] if one else None).set_index(key))  # fmt: skip

    if "agent_states" in have:
        state = ", cast(last(summary order by _seq) as varchar) state" if one else ""
        add(f"count(*) filter (where ok) steps{state}", "internal.agent_states", "agent_id")
    if "llm_calls" in have:
        add("count(*) llm_calls, count(*) filter (where outcome <> 'ok') llm_failures, "
            "sum(coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0)) tokens, "
            'median("end" - start) latency_p50, min(request_id) first_call',
            "llm_calls", "agent_id")  # fmt: skip
    if "spans" in have:
        add("count(*) tool_calls, count(*) filter (where status = 'error') tool_errors", "spans",
            "coalesce(attributes->>'gen_ai.agent.id', attributes->>'agent_id')",
            "try_cast(coalesce(attributes->>'agentlab.tick', attributes->>'tick') as bigint)",
            "name = 'env.tool'")  # fmt: skip
    if "messages" in have:
        add("count(*) messages", "messages", "sender")
    if "agent_errors" in have:
        add("count(*) step_errors", "agent_errors", "agent_id")
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, axis=1).sort_index()
    out.index.name = key
    for c in ACTIVITY:
        if c in out:
            out[c] = out[c].fillna(0).astype(int)
    return out.reset_index()


def agent_timeline_df(run: Run, agent: str) -> pd.DataFrame:
    """Per tick, what ``agent`` did: ``steps`` (ok), ``llm_calls``, ``llm_failures``,
    ``tokens``, ``tool_calls``, ``tool_errors``, ``messages`` sent, ``step_errors``,
    ``latency_p50``, ``first_call`` (a request id to open), ``state``."""
    return _activity(run, agent)


def agents_df(e: Entry, run: Run) -> pd.DataFrame:
    """One row per agent of the run (:func:`agents_of`, by name): the totals of what it
    did (the columns of :func:`agent_timeline_df` summed over ticks) and its calls'
    latency median; cached until the run's change marker moves (every page of the
    agents list reads it)."""
    import pandas as pd

    k = (f"agents of {e.path}", change_marker(e.path))
    with _LOCK:
        hit = _CACHE.get(k)
    if hit is not None:
        return hit["df"]
    names = pd.DataFrame({"agent": agents_of(run)})
    act = _activity(run, None)
    df = names.merge(act, on="agent", how="left") if len(act) else names
    for c in ACTIVITY:
        if c in df:
            df[c] = df[c].fillna(0).astype(int)
    with _LOCK:  # (one table per run: a live run's earlier ones go)
        for old in [c for c in _CACHE if c[0] == k[0]]:
            del _CACHE[old]
        _CACHE[k] = {"df": df}
    return df


def spans_df(run: Run, page: int) -> tuple[Any, int]:
    """One page of spans, slowest first: ``name``, ``agent``, ``tick``, ``start``,
    ``duration``, ``status``, ``message``, ``run_id`` and ``stage`` (an experiment's run and
    stage with its iteration), ``request_id`` (an ``llm.call`` span's own call); and the number
    of pages."""
    import pandas as pd

    if "spans" not in _names(run):
        return pd.DataFrame(), 1
    n = int(_one(run, "select count(*) from spans") or 0)
    # a span's run: its own ``agentlab.run_id`` or its trace's (an experiment's run is one
    # trace: its stages name the run, the LLM calls under them do not); its stage: its
    # own or its parent's (a call under a stage span)
    # (``agentlab.iteration`` is the workflow iteration: "discussion round 1" read as
    # the discussion's first round)
    stage = "nullif(concat_ws(', iteration ', {0}.attributes->>'agentlab.stage', " \
        "{0}.attributes->>'agentlab.iteration'), '')"  # fmt: skip
    df = run.sql(
        "with traces as (select trace_id, min(attributes->>'agentlab.run_id') run_id from spans "
        "where attributes->>'agentlab.run_id' is not null group by trace_id), "
        # one row per span id: a parent written twice must not double its children's rows
        "parents as (select distinct on (trace_id, span_id) trace_id, span_id, attributes "
        "from spans) "
        "select s.name, coalesce(s.attributes->>'agent_id', s.attributes->>'gen_ai.agent.id') agent, "
        "try_cast(coalesce(s.attributes->>'agentlab.tick', s.attributes->>'tick') as bigint) tick, "
        's.start, s."end" - s.start duration, s.status, coalesce(s.status_message, '
        "s.attributes->>'error', s.attributes->>'gen_ai.tool.name', s.attributes->>'tool') message, "
        "coalesce(s.attributes->>'agentlab.run_id', t.run_id) run_id, "
        "s.attributes->>'gen_ai.response.id' request_id, "
        f"coalesce({stage.format('s')}, {stage.format('p')}) stage from spans s "
        "left join traces t on t.trace_id = s.trace_id "
        "left join parents p on p.trace_id = s.trace_id and p.span_id = s.parent "
        f"order by duration desc nulls last, s.start, s.span_id limit {ROWS_PER_PAGE} "
        f"offset {(page - 1) * ROWS_PER_PAGE}"
    )
    return df, max(1, -(-n // ROWS_PER_PAGE))


def agents_of(run: Run) -> list[str]:
    """The agents of a run (those that stepped, called an LLM or sent a message)."""
    have = _names(run)
    parts = []
    if "agent_states" in have:
        parts.append("select distinct agent_id a from agent_states")
    if "llm_calls" in have:
        parts.append("select distinct agent_id a from llm_calls where agent_id is not null")
    if not parts:
        return []
    df = run.sql(" union ".join(parts) + " order by a")
    return [str(a) for a in df["a"]]
