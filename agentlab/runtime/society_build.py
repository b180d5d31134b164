"""Writing a new society run directory and reopening one (``Society.create`` / ``open``).

The steps that build a :class:`~agentlab.runtime.society.Society`: validate the config,
take the writer lock, write the population, the env's tick-0 checkpoint, the manifest and
``SOCIETY.json``, and commit tick 0 (``create_society``); or read and check the two
documents, cut the log back to the committed rows and drop stale checkpoints
(``open_society``). Both end by calling the constructor they are handed (``build``), so
this module does not import ``society.py``.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import orjson

from agentlab.core.clock import VirtualClock
from agentlab.errors import ConfigError, CorruptRecordError, StoreError
from agentlab.runtime.batch import RetryPolicy
from agentlab.runtime.config import llm_spans_name, validate_society_config
from agentlab.runtime.datasets import register_society_datasets
from agentlab.runtime.envhost import ENV_CKPT_DIR, build_env_modules, env_spec_of
from agentlab.runtime.executors import Executor
from agentlab.runtime.population import Population, write_population
from agentlab.runtime.services import RunServices
from agentlab.runtime.society_files import (
    SOCIETY_FILE,
    SOCIETY_SCHEMA_VERSION,
    STEP_FILE,
    check_not_a_file,
    clear_interrupted_create,
    drop_stale_checkpoints,
    read_doc,
    unlock_on_error,
    write_tick_checkpoint,
)
from agentlab.store.atomic import atomic_write_bytes, atomic_write_json
from agentlab.store.lifecycle import clear_run_dir
from agentlab.store.manifest import write_manifest
from agentlab.store.offsets import log_marks, truncate_log
from agentlab.store.packed_store import open_agent_store, store_kind
from agentlab.store.replay import get_replay_sink
from agentlab.store.store_check import check_agent_store
from agentlab.store.writer_lock import WriterLock

__all__ = ["create_society", "mark_store", "open_society"]

S = TypeVar("S")

_REQUIRED = {
    SOCIETY_FILE: ("seed", "llm", "agents"),
    STEP_FILE: ("tick", "ts", "offsets"),
}


def create_society(
    build: Callable[..., S],
    reopen: Callable[..., S],
    path: str | os.PathLike[str],
    agents: Any,
    env: list[Any] | tuple[Any, ...],
    llm: Any,
    seed: int,
    executor: str | Executor,
    batch_size: int | None,
    clock: str,
    retry: RetryPolicy | None,
    tick_seconds: float,
    progress: bool,
    executor_options: dict[str, Any] | None,
    keep_checkpoints: bool,
    store: str,
    llm_spans: str | None,
    exist_ok: bool | Literal["replace"],
    max_error_share: float | None,
) -> S:
    """:meth:`Society.create <agentlab.runtime.society.Society.create>` (arguments there):
    ``build`` is the society's constructor, ``reopen`` its ``open`` (``exist_ok=True``)."""
    from agentlab.llm import LLMClient

    cfg = validate_society_config(
        {
            "agents": agents,
            "env": env,
            "llm": llm,
            "seed": seed,
            "executor": executor,
            "batch_size": batch_size,
            "clock": clock,
            "retry": retry,
            "tick_seconds": tick_seconds,
            "progress": progress,
            "keep_checkpoints": keep_checkpoints,
            "executor_options": executor_options,
            "llm_spans": llm_spans,
            "store": store,
            "max_error_share": max_error_share,
        }
    )
    # resolved once, here: the env var read at create, never again at a resume
    spans = llm_spans if llm_spans is not None else llm_spans_name(RunServices.span_rate())
    if cfg.retry is not None:
        retry = RetryPolicy(**cfg.retry.model_dump())
    store_kind(store, 0)  # an unknown store fails before anything is written
    run_dir = Path(path)
    check_not_a_file(run_dir)
    if exist_ok not in (True, False, "replace"):
        raise ConfigError(f"exist_ok must be False, True or 'replace', got {exist_ok!r}")
    if exist_ok is True and (run_dir / STEP_FILE).exists():
        return reopen(
            run_dir, executor=executor, batch_size=batch_size, progress=progress,
            executor_options=executor_options,
        )  # fmt: skip
    model = llm if isinstance(llm, str) else (llm.get("model") if isinstance(llm, dict)
                                              else getattr(llm, "model", ""))  # fmt: skip
    if clock == "virtual" and not str(model).startswith(("sim/", "cache:")):
        # a real endpoint answers in real time, which the virtual clock does not see: every
        # call would be recorded as taking no time (Experiment refuses it alike)
        raise ConfigError(
            f"clock='virtual' needs a simulated model ('sim/...') or a recorded one "
            f"('cache:RUN'), got {model!r}; use clock='real' for real endpoints"
        )
    lock = WriterLock(run_dir).acquire()  # before anything is removed or written
    with unlock_on_error(lock):
        if exist_ok == "replace":
            clear_run_dir(run_dir)  # under the lock: no live writer loses its run
        elif (run_dir / STEP_FILE).exists():
            raise ConfigError(
                f"{run_dir} already holds a society; use Society.open({str(path)!r}) "
                "to continue it, or Society.create(..., exist_ok='replace') to start over"
            )
        clear_interrupted_create(run_dir)
        client = (
            llm
            if isinstance(llm, LLMClient)
            else (LLMClient(llm, seed=seed) if isinstance(llm, str) else LLMClient.from_dict(llm))
        )
        if client.seed is None and client.model.startswith("sim/"):
            client = LLMClient.from_dict({**client.to_dict(), "seed": seed})
        population = Population(agents, seed)
        env_modules = build_env_modules(list(env), seed)
        meta: dict[str, Any] = {
            "schema_version": SOCIETY_SCHEMA_VERSION,
            "run_id": run_dir.name,
            "seed": int(seed),
            "llm": client.to_dict(),
            "env": [env_spec_of(m) for m in env_modules],
            "executor": executor if isinstance(executor, str) else executor.name,
            "batch_size": batch_size,
            "clock": clock,
            "retry": {
                "max_attempts": (retry or RetryPolicy()).max_attempts,
                "backoff_s": (retry or RetryPolicy()).backoff_s,
                "timeout_s": (retry or RetryPolicy()).timeout_s,
            },
            "tick_seconds": tick_seconds,
            "keep_checkpoints": bool(keep_checkpoints),
            "llm_spans": spans,
            "store": store_kind(store, len(population)),
            "max_error_share": max_error_share,
            "agents": population.pairs,
        }
        write_manifest(
            run_dir,
            kind="society",
            config={k: v for k, v in meta.items() if k != "agents"} | {"n_agents": len(population)},
            seed=seed,
        )
        sink = get_replay_sink(run_dir)
        register_society_datasets(sink)
        agent_store = open_agent_store(run_dir, store_kind(store, len(population)))
        write_population(agent_store, population, sink, schema_version=SOCIETY_SCHEMA_VERSION)
        mark_store(agent_store, 0, close=True)
        ckpt: list[str] = []
        for i, m in enumerate(env_modules):
            rel = f"{ENV_CKPT_DIR}/0/{i}.json"
            m.to_workspace(run_dir, path=rel, fsync=False)
            m.to_workspace(run_dir, fsync=False)
            ckpt.append(rel)
        # orjson, not json: json's indented encoder is pure Python, 12 s and ~300 MB
        # for the agent list of 1M agents (measured); the document parses the same.
        doc = orjson.dumps(
            meta,
            default=str,
            option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS,
        )
        atomic_write_bytes(run_dir / SOCIETY_FILE, doc)
        sink.flush()
        start = VirtualClock().now() if clock == "virtual" else time.time()
        marks = log_marks(run_dir)
        step = {
            "schema_version": SOCIETY_SCHEMA_VERSION,
            "tick": 0,
            "ts": start,
            "offsets": {k: m["bytes"] for k, m in marks.items()},
            "marks": marks,
            "env": ckpt,
            "totals": {},
        }
        if keep_checkpoints:
            write_tick_checkpoint(run_dir, step, [a for a, _ in population.pairs])
        atomic_write_json(run_dir / STEP_FILE, step)
        return build(
            run_dir,
            meta,
            step,
            executor=executor,
            batch_size=batch_size,
            progress=progress,
            executor_options=executor_options,
            lock=lock,
        )


def open_society(
    build: Callable[..., S],
    path: str | os.PathLike[str],
    *,
    executor: str | Executor | None,
    batch_size: int | None,
    progress: bool,
    executor_options: dict[str, Any] | None,
    read_only: bool,
) -> S:
    """:meth:`Society.open <agentlab.runtime.society.Society.open>` (arguments there):
    ``build`` is the society's constructor."""
    run_dir = Path(path)
    check_not_a_file(run_dir)
    meta = read_doc(run_dir, SOCIETY_FILE)
    step = read_doc(run_dir, STEP_FILE)
    if meta is None:
        what = "is not a directory" if not run_dir.is_dir() else f"has no {SOCIETY_FILE}"
        raise StoreError(f"no society in {run_dir}: it {what}; build one with Society.create(...)")
    if step is None:
        raise StoreError(f"society in {run_dir} never committed tick 0; create it again")
    for key, doc in ((SOCIETY_FILE, meta), (STEP_FILE, step)):
        if doc.get("schema_version") != SOCIETY_SCHEMA_VERSION:
            raise StoreError(
                f"{run_dir / key} has schema_version "
                f"{doc.get('schema_version')!r}; expected {SOCIETY_SCHEMA_VERSION}"
            )
        missing = sorted(set(_REQUIRED[key]) - set(doc))
        if missing:
            raise CorruptRecordError(
                f"{run_dir / key} lacks {missing}: it was edited or cut outside agentlab; "
                "restore it from a copy of the run, or create the society again"
            )
    # a deleted or damaged agent store is named here, not by every agent's next step
    check_agent_store(run_dir, [a for a, _ in meta["agents"]], int(step["tick"]),
                      meta.get("store"))  # fmt: skip
    if read_only:
        return build(run_dir, meta, step, executor=executor, progress=progress, read_only=True)
    lock = WriterLock(run_dir).acquire()  # truncating the log needs the only writer
    with unlock_on_error(lock):
        # Re-read under the lock: a writer that just finished may have committed more.
        step = read_doc(run_dir, STEP_FILE) or step
        problems: list[str] = []
        truncate_log(run_dir, step["offsets"], marks=step.get("marks"), problems=problems)
        if problems:
            for msg in problems:
                warnings.warn(msg, stacklevel=2)
            # The committed bytes moved: marks of the next commit start from here.
            marks = log_marks(run_dir)
            step = {
                **step,
                "marks": marks,
                "offsets": {k: m["bytes"] for k, m in marks.items()},
            }
        drop_stale_checkpoints(run_dir, int(step["tick"]), keep=bool(meta.get("keep_checkpoints")))
        return build(
            run_dir,
            meta,
            step,
            executor=executor,
            batch_size=batch_size,
            progress=progress,
            executor_options=executor_options,
            lock=lock,
        )


def mark_store(store: Any, tick: int | None, *, close: bool = False) -> None:
    """A packed store records ``tick`` as written (``store/store_check.py``) and, with
    ``close``, checkpoints its WAL and closes its connections; a directory store has
    nothing to do."""
    if tick is not None and hasattr(store, "mark_committed"):
        store.mark_committed(tick)
    if close and hasattr(store, "close"):
        store.close()
