"""Continuing an interrupted :class:`~agentlab.topology.experiment.Experiment`.

With ``parallel_runs=1`` (the default, the paper's setup) one workflow run is in flight at
a time, so when a run ends the log holds exactly the finished runs. The experiment then
commits ``EXPERIMENT_STEP.json`` (atomic rename, as a society's tick): the ids of the
finished runs, the log's byte marks, the clock, and on the virtual clock the client's
learned state (AIMD limiter, simulated server: what the next run's timings depend on).

``Experiment.open(dir)`` rebuilds the experiment from ``run.json`` (the same experiment
built again with ``exist_ok=True`` does as it does: :func:`continues`); its ``run()`` cuts the
log back to the commit (the rows of the run that was in flight go, as a society's
unfinished tick does), restores the clock and the client and runs the plan's remaining
runs. On the virtual clock the calls are the uninterrupted run's (start, end, tokens:
``tests/topology/test_continue.py``, after a SIGKILL); on a real clock the finished runs
are kept and the rest run now. With ``parallel_runs > 1`` runs interleave in the log and
no commit is written: such an experiment cannot be continued (``open`` says so).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import orjson

from agentlab.errors import ConfigError
from agentlab.store.atomic import atomic_write_bytes, read_json
from agentlab.store.layout import REPLAY_DIR
from agentlab.store.manifest import read_manifest
from agentlab.store.offsets import log_marks, truncate_log

__all__ = [
    "COMMIT_FILE",
    "continues",
    "cut_to_commit",
    "experiment_args",
    "interleaved",
    "read_commit",
    "restore_commit",
    "write_commit",
]

COMMIT_FILE = "EXPERIMENT_STEP.json"
KIND = "topology_experiment"


def write_commit(
    run_dir: Path, previous: dict[str, Any] | None, done: list[str], now: float,
    llm_state: dict[str, Any] | None, *, next_sample: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Commit the finished runs ``done`` (call after flushing every writer); returns the
    record (its marks continue ``previous``'s: only the bytes since are read).
    ``next_sample``: when the metrics sampler wakes next (its samples advance the
    simulated server's schedule: a continuation samples where the run would have)."""
    marks = log_marks(run_dir, (previous or {}).get("marks"))
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
    _write(run_dir, doc)
    return doc


def restore_commit(run_dir: Path, commit: dict[str, Any] | None, start: float) -> None:
    """Make an earlier ``commit`` the experiment's commit again (``None``: before its first
    run, the clock at ``start``): continuing it cuts the log back there and runs the runs
    after it again (``run_failures.py``: the failed runs a stop does not keep)."""
    _write(run_dir, commit if commit is not None else {
        "schema_version": 1, "runs_done": 0, "done": [], "ts": start, "offsets": {},
        "marks": {}, "llm": None, "next_sample": None,
    })  # fmt: skip


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
    else:
        truncate_log(run_dir, commit["offsets"], marks=commit.get("marks"), problems=problems)
    for msg in problems:
        warnings.warn(msg, stacklevel=3)


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
            that differ are named), or one with ``parallel_runs > 1`` (not continuable).
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
    _refuse_interleaved(p, stored)
    return True


def interleaved(config: dict[str, Any]) -> int | None:
    """``parallel_runs`` of an experiment config (``run.json``) whose runs interleave in its
    log, so that it cannot be continued; ``None`` for one run at a time."""
    n = int(config.get("parallel_runs") or 1)
    return n if n != 1 else None


def _refuse_interleaved(path: Path, config: dict[str, Any]) -> None:
    """Refuse an experiment whose runs interleave in its log (``parallel_runs > 1``)."""
    if interleaved(config) is not None:
        raise ConfigError(
            f"{str(path)!r} ran with parallel_runs={config['parallel_runs']}: its runs' rows "
            "interleave in the log, so no run boundary was committed and it cannot be "
            "continued; run it again (exist_ok='replace'), or with parallel_runs=1"
        )


def experiment_args(
    run_dir: str | os.PathLike[str], *, clock: Any = None, tasks: Any = None
) -> dict[str, Any]:
    """``Experiment(**args)`` of the experiment in ``run_dir``, from its ``run.json``
    (``clock`` / ``tasks``: what it ran on, where ``run.json`` could not keep it).

    Raises:
        ConfigError: not an experiment's directory, or one that cannot be continued
            (``parallel_runs > 1``, a clock object, custom tasks it did not keep).
    """
    p = Path(run_dir)
    doc = read_manifest(p)
    if doc.get("kind") != KIND:
        raise ConfigError(f"{str(p)!r} holds no topology experiment "
                          f"(run.json kind {doc.get('kind')!r})")  # fmt: skip
    cfg = dict(doc.get("config") or {})
    _refuse_interleaved(p, cfg)
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
        "clock": clock if clock is not None else cfg["clock"], "out": p, "parallel_runs": 1,
        "metrics_interval": float(cfg.get("metrics_interval", 1.0)),
        "max_error_share": cfg.get("max_error_share", 1.0), **workflow,
    }  # fmt: skip
