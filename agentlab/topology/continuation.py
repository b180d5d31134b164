"""Continuing an interrupted :class:`~agentlab.topology.experiment.Experiment`.

After each finished run the experiment commits ``EXPERIMENT_STEP.json`` (atomic rename, as
a society's tick) once every writer is flushed: the ids of the finished runs, the clock,
the metrics sampler's next time. ``Experiment.open(dir)`` rebuilds the experiment from
``run.json`` (the same experiment built again with ``exist_ok=True`` does as it does:
:func:`continues`); its ``run()`` takes the log back to the commit (the rows of the runs
that were in flight go, as a society's unfinished tick does) and runs the plan's remaining
runs.

With ``parallel_runs=1`` (the default, the paper's setup) one run is in flight at a time,
so when a run ends the log holds exactly the finished runs: the commit keeps the log's byte
marks and, on the virtual clock, the client's learned state (AIMD limiter, simulated
server: what the next run's timings depend on); the continuation cuts each shard back to
its mark and restores the clock and the client. On the virtual clock the calls are the
uninterrupted run's (start, end, tokens: ``tests/topology/test_continue.py``, after a
SIGKILL); on a real clock the finished runs are kept and the rest run now.

With ``parallel_runs > 1`` runs interleave in the log, so no byte mark separates the
finished runs from those in flight: the commit is ``interleaved`` and the continuation
rewrites the log keeping the finished runs' rows (``store/prune.py``: a row's ``run_id``;
a span's trace, named by its ``experiment.stage`` / ``experiment.run`` spans; a metrics
sample before the sampler's next time). The server's state is not kept (requests of the
runs in flight were in it): the continuation starts a fresh client, on the virtual clock
at the commit's time, so its calls are not the uninterrupted run's, which overlapped the
runs cut; each run's calls are in the log once.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from agentlab.errors import ConfigError
from agentlab.store.atomic import atomic_write_bytes, read_json
from agentlab.store.layout import REPLAY_DIR, SPANS
from agentlab.store.manifest import read_manifest
from agentlab.store.offsets import log_marks, truncate_log
from agentlab.store.prune import prune_log, read_rows

__all__ = [
    "COMMIT_FILE",
    "continues",
    "cut_to_commit",
    "experiment_args",
    "read_commit",
    "restore_commit",
    "write_commit",
]

COMMIT_FILE = "EXPERIMENT_STEP.json"
KIND = "topology_experiment"


def write_commit(
    run_dir: Path, previous: dict[str, Any] | None, done: list[str], now: float,
    llm_state: dict[str, Any] | None, *, next_sample: float | None = None,
    interleaved: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Commit the finished runs ``done`` (call after flushing every writer); returns the
    record (its marks continue ``previous``'s: only the bytes since are read).
    ``next_sample``: when the metrics sampler wakes next (its samples advance the
    simulated server's schedule: a continuation samples where the run would have).
    ``interleaved``: runs interleave in the log (``parallel_runs > 1``): no byte marks,
    no client state; the continuation keeps the finished runs' rows (:func:`cut_to_commit`)."""
    marks = {} if interleaved else log_marks(run_dir, (previous or {}).get("marks"))
    doc = {
        "schema_version": 1,
        "runs_done": len(done),
        "done": list(done),
        "ts": now,
        "offsets": {k: m["bytes"] for k, m in marks.items()},
        "marks": marks,
        "llm": llm_state,
        "next_sample": next_sample,
    }
    if interleaved:
        doc["interleaved"] = True
    _write(run_dir, doc)
    return doc


def restore_commit(
    run_dir: Path, commit: dict[str, Any] | None, start: float, *, interleaved: bool = False
) -> None:
    """Make an earlier ``commit`` the experiment's commit again (``None``: before its first
    run, the clock at ``start``; ``interleaved`` as :func:`write_commit`'s): continuing it
    cuts the log back there and runs the runs after it again (``run_failures.py``: the
    failed runs a stop does not keep)."""
    if commit is None:
        commit = {"schema_version": 1, "runs_done": 0, "done": [], "ts": start,
                  "offsets": {}, "marks": {}, "llm": None, "next_sample": None}  # fmt: skip
        if interleaved:
            commit["interleaved"] = True
    _write(run_dir, commit)


def _write(run_dir: Path, doc: dict[str, Any]) -> None:
    try:  # (orjson: the simulated server's state is ~240 kB; json's encoder took 3 ms)
        data = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    except (TypeError, OverflowError):  # a value orjson refuses (an int over 64 bits)
        data = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str).encode()
    atomic_write_bytes(run_dir / COMMIT_FILE, data)


def read_commit(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The last commit, ``None`` when no run finished (or none was committed)."""
    doc = read_json(Path(run_dir) / COMMIT_FILE, default=None)
    return doc if isinstance(doc, dict) and isinstance(doc.get("done"), list) else None


def cut_to_commit(run_dir: Path, commit: dict[str, Any] | None) -> None:
    """The log back to ``commit`` (no commit: to nothing), checked against its marks.

    Raises:
        ConfigError: no commit but finished runs in the log — an experiment written before
            experiments committed their runs: nothing is cut (its runs would be lost).
    """
    problems: list[str] = []
    if commit is None:
        finished = Path(run_dir) / REPLAY_DIR / "experiment_runs"
        if finished.is_dir() and any(f.stat().st_size for f in finished.rglob("*.jsonl")):
            raise ConfigError(
                f"{str(run_dir)!r} has finished runs but no {COMMIT_FILE}: it was written "
                "before experiments committed their runs and cannot be continued (nothing "
                "was changed); exist_ok='replace' starts it over, another out= keeps it"
            )
        truncate_log(run_dir, {})
    elif commit.get("interleaved"):
        prune_log(run_dir, _finished_rows(run_dir, commit))
    else:
        truncate_log(run_dir, commit["offsets"], marks=commit.get("marks"), problems=problems)
    for msg in problems:
        warnings.warn(msg, stacklevel=3)


def _finished_rows(run_dir: Path, commit: dict[str, Any]) -> Callable[[str, dict[str, Any]], bool]:
    """Whether a row of an interleaved log belongs to the finished runs of ``commit``: a row
    with a ``run_id`` is its run's; a span is its trace's (a run's ``experiment.stage`` and
    ``experiment.run`` spans name it; a trace naming none is a run cut in its first stage);
    a metrics sample is kept when taken before the sampler's next time of the commit."""
    done = set(commit["done"])
    traces: dict[Any, Any] = {}  # trace id: the run its spans name
    for span in read_rows(run_dir, SPANS):
        run = (span.get("attributes") or {}).get("agentlab.run_id")
        if run is not None:
            traces[span.get("trace_id")] = run
    until = commit.get("next_sample")

    def keep(dataset: str, row: dict[str, Any]) -> bool:
        if dataset == SPANS:
            return traces.get(row.get("trace_id")) in done
        if "run_id" in row:
            return row["run_id"] in done
        ts = row.get("ts")
        return until is None or not isinstance(ts, (int, float)) or ts < until

    return keep


#: what makes two experiments the same one (``run.json`` config keys): the plan, the model,
#: the clock and the sampler's period (its reads advance the simulated server)
SAME = ("topologies", "runs", "llm", "seed", "clock", "parallel_runs", "workflow", "tasks",
        "task_list", "metrics_interval")  # fmt: skip


def continues(run_dir: str | os.PathLike[str], config: dict[str, Any]) -> bool:
    """Whether an experiment of ``config`` given ``exist_ok=True`` continues the one in
    ``run_dir`` (``False``: nothing there yet). ``exist_ok=True`` appended the same runs
    under the same ids on a clock starting at 0 again — every call twice, and the second
    set's times overlapping the first's — so it continues the experiment already there,
    and refuses another one.

    Raises:
        ConfigError: ``run_dir`` holds another kind of run, another experiment (the keys
            that differ are named).
    """
    p = Path(run_dir)
    doc = read_manifest(p)
    if not doc:
        return False
    if doc.get("kind") != KIND:
        raise ConfigError(f"{str(p)!r} holds a {doc.get('kind')!r} run, not a topology "
                          "experiment: use another out= (or exist_ok='replace')")  # fmt: skip
    stored = doc.get("config") or {}
    mine = json.loads(json.dumps(config, default=str))  # (as run.json keeps it)
    differ = [k for k in SAME if stored.get(k) != mine.get(k)]
    if differ:
        raise ConfigError(
            f"{str(p)!r} holds another experiment (its {', '.join(differ)} differ): "
            "exist_ok=True continues the same experiment; use another out= for this one, "
            "or exist_ok='replace' to write over it"
        )
    return True


def experiment_args(
    run_dir: str | os.PathLike[str], *, clock: Any = None, tasks: Any = None
) -> dict[str, Any]:
    """``Experiment(**args)`` of the experiment in ``run_dir``, from its ``run.json``
    (``clock`` / ``tasks``: what it ran on, where ``run.json`` could not keep it).

    Raises:
        ConfigError: not an experiment's directory, or one that cannot be continued
            (a clock object, custom tasks it did not keep).
    """
    p = Path(run_dir)
    doc = read_manifest(p)
    if doc.get("kind") != KIND:
        raise ConfigError(f"{str(p)!r} holds no topology experiment "
                          f"(run.json kind {doc.get('kind')!r})")  # fmt: skip
    cfg = dict(doc.get("config") or {})
    if clock is None and cfg.get("clock") not in ("real", "virtual"):
        raise ConfigError(f"{str(p)!r} ran on a clock object ({cfg.get('clock')}); "
                          "continue it with Experiment.open(path, clock=...)")  # fmt: skip
    llm = cfg["llm"]
    if isinstance(llm, dict):
        from agentlab.llm import LLMClient

        llm = LLMClient.from_dict(llm)
    workflow = dict(cfg.get("workflow") or {})
    tasks = tasks if tasks is not None else cfg.get("task_list")
    if tasks is None and cfg.get("tasks_given"):
        raise ConfigError(f"{str(p)!r} ran on tasks it did not keep; pass them: "
                          "Experiment.open(path, tasks=...)")  # fmt: skip
    return {
        "topologies": list(cfg["topologies"]), "agents": workflow.pop("agents"),
        "runs": int(cfg["runs"]), "tasks": tasks, "llm": llm, "seed": int(cfg["seed"]),
        "clock": clock if clock is not None else cfg["clock"], "out": p,
        "parallel_runs": int(cfg.get("parallel_runs") or 1),
        "metrics_interval": float(cfg.get("metrics_interval", 1.0)),
        "max_error_share": cfg.get("max_error_share", 1.0), **workflow,
    }  # fmt: skip
