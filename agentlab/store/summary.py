"""``summarize_run(path) -> RunSummary``: status and counts of any run, cheaply.

The one place that says what a run is, how far it got and how many errors it had.
``agentlab runs``, ``agentlab report``, ``agentlab view`` and the widgets all read a run
through it, so they show the same status and the same error counts.

```python
s = summarize_run("runs/demo-1")
s.kind, s.status, s.ticks, s.steps, s.llm_calls    # "society", "done", 5, 1000, 2310
s.errors.step_errors, s.errors.tool_errors         # 0, 34
s.errors.llm_failures                              # {"timeout": 2}
s.errors.total                                     # 36
s.to_dict()                                        # JSON-able
```

The error vocabulary (the same names everywhere):

- **step errors**: failed agent-step attempts (society), failed workflow runs (topology
  experiment), failed slices (thread system).
- **tool errors**: tool calls that failed or were refused (``env.tool`` / ``env.ask``
  spans with status ``error``).
- **LLM failures**: LLM calls that failed after their retries, by kind (``rate_limit``,
  ``timeout``, ``malformed``, ``error``; see ``catalog.attempt_kind``).

The **total** counts each failure once: an LLM failure that made an agent step attempt
(or a workflow run) fail is that step error, not a second error beside it
(``ErrorCounts.llm_in_steps``; the run browser's errors page lists it once, as the step
error, linked to the call). A society whose 6 calls all failed, failing its 6 step
attempts, has 6 errors, not 12.

A sweep or a paper sums the counts of the runs it holds (``children``).

Cost: ``run.json`` and ``SOCIETY_STEP.json`` are read whole; the log is read only for the
lines that can hold an error (a byte filter before any JSON parse), and only the bytes
appended since the last call in this process (a per-shard cache), up to the last
committed offset for a society. A folder of 300 small runs summarises in well under a
second on a warm cache.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from agentlab.errors import NotARunError
from agentlab.store.atomic import read_json
from agentlab.store.catalog import attempt_kind
from agentlab.store.layout import REPLAY_DIR, TRACE_DIR, shard_files
from agentlab.store.lifecycle import STEP_FILE, RunStatus, is_run, normalize_status, read_status
from agentlab.store.manifest import MANIFEST_NAME

__all__ = [
    "REPLY_KINDS",
    "ErrorCounts",
    "RunSummary",
    "caused_by_llm",
    "children_of",
    "find_runs",
    "is_run",
    "summarize_run",
]

SWEEP_FILE = "sweep.json"
#: manifest kinds → the summary's kind
_KINDS = {"topology_experiment": "experiment", "agent_system": "threads"}
#: span names whose errors are tool errors
TOOL_SPANS = ("env.tool", "env.ask")
#: what each ``llm_calls.finish_reason`` means to a reader (the report, the run browser)
REPLY_KINDS = {"stop": "text", "tool_calls": "tool calls", "length": "cut at the output cap"}


@dataclasses.dataclass
class ErrorCounts:
    """The one error vocabulary (see the module docstring)."""

    step_errors: int = 0
    tool_errors: int = 0
    llm_failures: dict[str, int] = dataclasses.field(default_factory=dict)
    #: LLM failures that are the cause of one of the step errors (a failed agent-step
    #: attempt or workflow run): counted in ``llm_failures`` and, once, in ``total``
    llm_in_steps: int = 0

    @property
    def total(self) -> int:
        """Step errors + tool errors + the LLM failures that did not fail a step.

        An LLM failure that made a step attempt fail is one error, the step error: adding
        both counted a run whose 6 calls all failed its 6 steps as 12 errors, twice the
        rows its errors page lists.
        """
        llm = sum(self.llm_failures.values()) - self.llm_in_steps
        return self.step_errors + self.tool_errors + max(0, llm)

    def __iadd__(self, other: ErrorCounts) -> ErrorCounts:
        self.step_errors += other.step_errors
        self.tool_errors += other.tool_errors
        self.llm_in_steps += other.llm_in_steps
        merged = Counter(self.llm_failures)
        merged.update(other.llm_failures)
        self.llm_failures = dict(sorted(merged.items()))
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_errors": self.step_errors,
            "tool_errors": self.tool_errors,
            "llm_failures": dict(self.llm_failures),
            "llm_in_steps": self.llm_in_steps,
            "total": self.total,
        }

    def describe(self) -> str:
        """``"0 step errors, 34 tool errors, 2 LLM failures (timeout 2)"``."""
        llm = sum(self.llm_failures.values())
        kinds = ", ".join(f"{k} {v}" for k, v in self.llm_failures.items())
        return (
            f"{self.step_errors} step errors, {self.tool_errors} tool errors, "
            f"{llm} LLM failures" + (f" ({kinds})" if kinds else "")
        )


@dataclasses.dataclass
class RunSummary:
    """What a run is, how far it got, its errors. Built by :func:`summarize_run`.

    Attributes:
        path: the run directory.
        kind: ``society``, ``experiment``, ``threads``, ``sweep``, ``paper`` or the
            manifest's own kind (``traffic_replay``...).
        status: :func:`~agentlab.store.lifecycle.read_status` (``interrupted`` when its
            writer died).
        status_recorded: whether ``run.json`` holds a status at all; ``False`` for a bare
            log (no ``run.json`` or none with a status), whose ``status`` is
            ``interrupted`` by rule, not by record (a follower keeps following it).
        created, ended: ISO times from ``run.json`` (``ended`` is ``None`` until it ends).
        params: the run's parameters (notebook / sweep parameters).
        ticks: committed ticks (society), else ``None``.
        steps: agent steps (society), workflow runs (experiment), slices (threads);
            ``None`` for a run with no steps of its own (a ``recorded_run`` workflow, a
            game: its turns are its LLM calls and messages).
        llm_calls: LLM calls recorded.
        errors: :class:`ErrorCounts`.
        error: the message a failed run left in ``run.json``.
        children: runs a sweep or paper holds (their counts are summed into this one).
    """

    path: Path
    kind: str
    status: RunStatus
    status_recorded: bool = True
    created: str | None = None
    ended: str | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    ticks: int | None = None
    steps: int | None = 0
    llm_calls: int = 0
    errors: ErrorCounts = dataclasses.field(default_factory=ErrorCounts)
    error: str | None = None
    children: list[RunSummary] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able (``path`` as text, children as their paths)."""
        return {
            "path": str(self.path),
            "kind": self.kind,
            "status": self.status,
            "status_recorded": self.status_recorded,
            "created": self.created,
            "ended": self.ended,
            "params": dict(self.params),
            "ticks": self.ticks,
            "steps": self.steps,
            "llm_calls": self.llm_calls,
            "errors": self.errors.to_dict(),
            "error": self.error,
            "children": [str(c.path) for c in self.children],
        }


def find_runs(folder: str | os.PathLike[str], *, depth: int = 3) -> list[Path]:
    """Run directories (with a ``run.json``) under ``folder``, not descending into them."""
    found: list[Path] = []

    def walk(d: Path, level: int) -> None:
        if (d / MANIFEST_NAME).is_file():
            found.append(d)
            return
        if level >= depth:
            return
        try:
            subs = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            return
        for sub in subs:
            walk(sub, level + 1)

    walk(Path(folder), 0)
    return found


def children_of(path: str | os.PathLike[str], *, depth: int = 3) -> list[Path]:
    """The runs a sweep or paper folder holds (below it, not itself)."""
    p = Path(path)
    try:
        subs = sorted(d for d in p.iterdir() if d.is_dir() and not d.name.startswith("."))
    except OSError:
        return []
    return [r for d in subs for r in find_runs(d, depth=depth)]


def summarize_run(path: str | os.PathLike[str]) -> RunSummary:
    """Status and counts of the run in ``path`` (any kind; see the module docstring).

    Raises:
        NotARunError: ``path`` is not a run directory.
    """
    p = Path(path)
    if not p.is_dir() or not (is_run(p) or (p / SWEEP_FILE).is_file()):
        raise NotARunError.for_path(p)
    doc = _read(p / MANIFEST_NAME)
    m: dict[str, Any] = doc if isinstance(doc, dict) else {}
    raw_kind = str(m.get("kind") or ("society" if (p / STEP_FILE).is_file() else "run"))
    if (p / SWEEP_FILE).is_file():
        raw_kind = "sweep"
    kind = _KINDS.get(raw_kind, raw_kind)
    params = m.get("params")
    out = RunSummary(
        path=p,
        kind=kind,
        status=read_status(p, m),
        status_recorded=normalize_status(m.get("status")) is not None,
        created=m.get("created"),
        ended=m.get("ended"),
        params=dict(params) if isinstance(params, dict) else {},
        error=m.get("error") if isinstance(m.get("error"), str) else None,
    )
    found = m.get("counters")
    counters: dict[str, Any] = found if isinstance(found, dict) else {}
    if kind in ("sweep", "paper"):
        out.steps = None  # (until a run inside has steps)
        for child in children_of(p):
            try:
                c = summarize_run(child)
            except NotARunError:  # pragma: no cover - find_runs only lists runs
                continue
            out.children.append(c)
            out.steps = _add(out.steps, c.steps)
            out.llm_calls += c.llm_calls
            out.errors += c.errors
        return out
    step = _read(p / STEP_FILE) if kind == "society" else None
    limits: dict[str, int] | None = None
    if isinstance(step, dict):
        totals = step.get("totals") or {}
        out.ticks = int(step.get("tick", 0))
        out.steps = int(totals.get("steps", 0))
        out.llm_calls = int(totals.get("llm_calls", 0))
        out.errors.step_errors = int(totals.get("errors", 0))
        limits = step.get("offsets") or {}
    llm = _scan_dataset(p, f"{REPLAY_DIR}/llm_calls", "llm_calls", limits)
    out.errors.tool_errors = _scan_dataset(p, TRACE_DIR, "spans", limits)["tool_errors"]
    out.errors.llm_failures = dict(
        sorted((k[5:], v) for k, v in llm.items() if k.startswith("fail:") and v)
    )
    steps = _scan_dataset(p, f"{REPLAY_DIR}/agent_errors", "agent_errors", limits)
    if step is None:
        out.llm_calls = llm["rows"]
        timeline = _scan_dataset(p, f"{REPLAY_DIR}/timeline", "timeline", None)
        if timeline["rows"]:  # a society-like log without a commit record
            out.ticks, out.steps = timeline["ticks"], timeline["steps"]
            out.errors.step_errors = timeline["errors"]
        if kind == "experiment":
            runs = _scan_dataset(p, f"{REPLAY_DIR}/experiment_runs", "experiment_runs", None)
            out.steps, out.errors.step_errors = runs["rows"], runs["not_ok"]
            steps.update(runs)
        elif not timeline["rows"] and kind not in ("society", "threads"):
            out.steps = None  # a workflow or game: no steps of its own
        for key in ("ticks", "steps", "step_errors"):
            if isinstance(counters.get(key), int):
                if key == "step_errors":
                    out.errors.step_errors = counters[key]
                else:
                    setattr(out, key, counters[key])
    out.errors.llm_in_steps = _llm_in_steps(llm, steps)
    return out


def caused_by_llm(error_class: object) -> bool:
    """Whether a step error's class (``agent_errors.error_class``, or the name before the
    first ``:`` of a failed workflow run's ``error``) is an LLM failure's
    (:class:`~agentlab.errors.LLMError` or a subclass)."""
    from agentlab.errors import LLMError

    if not isinstance(error_class, str) or not error_class:
        return False
    todo, names = [LLMError], set()
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo += cls.__subclasses__()
    return error_class in names


def _llm_in_steps(llm: Counter[str], steps: Counter[str]) -> int:
    """LLM failures that failed a step: per agent and tick (per workflow run), as many as
    the step errors there an LLM failure caused, at most the failed calls there (the
    run browser's ``errors_df`` pairs them the same way)."""
    return sum(min(n, llm[k]) for k, n in steps.items() if k.startswith(("at:", "in:")))


def _add(total: int | None, more: int | None) -> int | None:
    """A sum of step counts where ``None`` (no steps) adds nothing."""
    return total if more is None else (total or 0) + more


def _read(path: Path) -> dict[str, Any] | None:
    """A JSON document, ``None`` if missing or damaged (a summary never fails on it)."""
    try:
        doc = read_json(path, default=None)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


# --- the incremental log scan ---------------------------------------------------------

_CACHE: dict[tuple[str, str], tuple[int, int, Counter[str]]] = {}
_CACHE_LOCK = threading.Lock()


def _scan_dataset(run: Path, rel_dir: str, what: str, limits: dict[str, int] | None
                  ) -> Counter[str]:  # fmt: skip
    total: Counter[str] = Counter()
    for f in shard_files(run / rel_dir):
        limit = None if limits is None else limits.get(f"{rel_dir}/{f.name}", 0)
        total.update(_scan_file(f, what, limit))
    return total


def _scan_file(f: Path, what: str, limit: int | None) -> Counter[str]:
    """Counts of one shard up to ``limit`` bytes (complete lines only), incrementally."""
    try:
        st = f.stat()
    except FileNotFoundError:
        return Counter()
    end = st.st_size if limit is None else min(limit, st.st_size)
    key = (os.path.realpath(f), what)
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
    if cached is not None and cached[0] == st.st_ino and cached[1] <= end:
        done, counts = cached[1], Counter(cached[2])
    else:  # new, replaced or cut back (a resume truncates uncommitted rows)
        done, counts = 0, Counter()
    if end > done:
        with f.open("rb") as fh:
            fh.seek(done)
            data = fh.read(end - done)
        cut = data.rfind(b"\n") + 1  # a torn last line is counted once it is complete
        _count_lines(data[:cut], what, counts)
        done += cut
    with _CACHE_LOCK:
        _CACHE[key] = (st.st_ino, done, counts)
    return Counter(counts)


def _count_lines(data: bytes, what: str, counts: Counter[str]) -> None:
    if not data:
        return
    if what == "llm_calls":
        counts["rows"] += data.count(b"\n")
        if b'"outcome"' not in data:
            return
        for line in data.splitlines():
            if b'"outcome":"ok"' in line or b'"outcome"' not in line:
                continue
            row = _loads(line)
            outcome = row.get("outcome") if row else None
            if row and isinstance(outcome, str) and outcome != "ok":
                counts["fail:" + attempt_kind(outcome)] += 1
                # where it failed, to pair it with the step error it caused
                counts[_at(row.get("agent_id"), row.get("tick"))] += 1
                if row.get("run_id"):
                    counts[f"in:{row['run_id']}"] += 1
    elif what == "spans":
        counts["tool_errors"] += 0
        if b'"status":"error"' not in data:
            return
        for line in data.splitlines():
            if b'"status":"error"' not in line:
                continue
            row = _loads(line)
            if row and row.get("status") == "error" and row.get("name") in TOOL_SPANS:
                counts["tool_errors"] += 1
    elif what == "timeline":
        ticks: set[int] = set()
        for line in data.splitlines():
            row = _loads(line)
            if row is None:
                continue
            counts["rows"] += 1
            if isinstance(row.get("tick"), int):
                ticks.add(row["tick"])
            for k in ("steps", "errors"):
                counts[k] += int(row.get(k) or 0)
        counts["ticks"] += len(ticks)
    elif what == "experiment_runs":
        for line in data.splitlines():
            row = _loads(line)
            if row is None:
                continue
            counts["rows"] += 1
            counts["not_ok"] += int(row.get("status") != "ok")
            # a failed run's error is "<class>: <message>" (topology/workflow.py)
            error = row.get("error")
            failed = row.get("status") != "ok" and isinstance(error, str) and row.get("run_id")
            if failed and caused_by_llm(str(error).partition(":")[0].strip()):
                counts[f"in:{row['run_id']}"] += 1
    elif what == "agent_errors":
        for line in data.splitlines():
            row = _loads(line)
            if row is not None and caused_by_llm(row.get("error_class")):
                counts[_at(row.get("agent_id"), row.get("tick"))] += 1


def _at(agent: object, tick: object) -> str:
    """The counter key of an agent's tick (failed calls and the step errors they caused)."""
    return f"at:{agent}\x1f{tick}"


def _loads(line: bytes) -> dict[str, Any] | None:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return row if isinstance(row, dict) else None
