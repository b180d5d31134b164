"""``Society.fork``: a new run that starts from a committed tick of another one.

Counterfactual experiments from one shared history: run a society to tick ``t``, then
fork it into several runs that differ in one parameter (another model, another seed for
the agents' randomness, a retry policy) and compare what happens next.

The fork is a complete, independent run directory:

- ``SOCIETY.json``: the parent's configuration with the changes applied, plus
  ``"parent": {"run", "tick"}``;
- every agent's workspace with its state version as of tick ``t``;
- the env checkpoint of tick ``t`` with its routers' state (``routers.json``: counters, the
  codegen code cache; the modules' state also published as ``env/ENV_STATE.json``);
- the parent's log up to the commit of tick ``t`` (byte-identical prefixes of its
  shards, so the fork's history reads like the parent's and analysis spans both);
- a commit record of tick ``t``: the clock time, totals, and — when the LLM
  configuration is unchanged — the learned limiter and simulated-server state, so a fork
  with nothing changed continues exactly like the parent (timing fields included under
  the virtual clock).

What can be forked: the parent's last committed tick always (its agents' state slots
hold that version); any earlier tick only if the parent was created with
``keep_checkpoints=True`` (see ``society_files.py``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from agentlab.agents.workspace import SLOT_KEYS, Workspace, encode_slot
from agentlab.errors import ConfigError, StoreError
from agentlab.runtime.envhost import ROUTERS_FILE, checkpoint_files
from agentlab.runtime.society_files import (
    CHECKPOINTS_DIR,
    SOCIETY_FILE,
    STEP_FILE,
    agent_versions,
    check_not_a_file,
    read_doc,
    write_tick_checkpoint,
)
from agentlab.store.agent_store import DirectoryStore
from agentlab.store.atomic import atomic_write_bytes, atomic_write_json
from agentlab.store.layout import REPLAY_DIR, SCHEMA_NAME
from agentlab.store.packed_store import open_agent_store
from agentlab.store.writer_lock import LOCK_NAME, WriterLock

S = TypeVar("S")

__all__ = ["FORKABLE", "fork_society"]

#: parameters a fork may change (agents and env come from the parent's state)
FORKABLE = (
    "llm",
    "seed",
    "retry",
    "tick_seconds",
    "batch_size",
    "executor",
    "executor_options",
    "keep_checkpoints",
)


def fork_society(
    parent: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    build: Callable[..., S],
    at_tick: int | None = None,
    progress: bool = True,
    **changes: Any,
) -> S:
    """Write a fork of the society in ``parent`` at ``at_tick`` into ``out``; return it.

    Args:
        parent: the parent run directory (read only; it may be open elsewhere).
        out: the new run directory (must not hold a society).
        build: the society's constructor (``Society``; this module does not import it).
        at_tick: the committed tick to start from (default: the parent's last commit).
        progress: show a per-tick progress bar in the fork.
        **changes: new values for any of :data:`FORKABLE`.

    Raises:
        ConfigError: an unknown or invalid change, a tick that was not committed, or an
            earlier tick of a parent that does not keep checkpoints.
    """
    from agentlab.runtime.config import validate_society_config

    src_dir, dst = Path(parent), Path(out)
    unknown = sorted(set(changes) - set(FORKABLE))
    if unknown:
        raise ConfigError(
            f"a fork cannot change {unknown}: agents and env come from the parent's state; "
            f"valid: {', '.join(FORKABLE)}"
        )
    meta, step, tick = _snapshot(src_dir, at_tick)
    validate_society_config({"agents": 1, "clock": meta.get("clock", "real"), **changes})
    check_not_a_file(dst)
    if dst.resolve() == src_dir.resolve():
        raise ConfigError("a fork needs its own directory: out is the parent run")
    before = set(os.listdir(dst)) if dst.is_dir() else None
    lock = WriterLock(dst).acquire()
    try:
        if (dst / STEP_FILE).exists() or (dst / SOCIETY_FILE).exists():
            raise ConfigError(f"{dst} already holds a society; fork into a new directory")
        for attempt in range(_ATTEMPTS):
            try:
                return _write_fork(build, src_dir, dst, meta, step, tick, changes, lock, progress)
            except (OSError, StoreError) as exc:
                # The parent committed another tick while we read it: the checkpoint we
                # were copying was replaced, or an agent's version of ``tick`` was
                # overwritten by the tick after. Read the new commit and start over.
                now = _last_tick(src_dir)
                if now == int(step["tick"]) or attempt == _ATTEMPTS - 1:
                    raise
                _remove_new(dst, before or set())
                try:
                    meta, step, tick = _snapshot(src_dir, at_tick)
                except ConfigError as again:
                    raise ConfigError(
                        f"{src_dir} committed tick {now} while this fork read tick {tick} "
                        f"({type(exc).__name__}: {exc}); {again}"
                    ) from None
        raise AssertionError("unreachable")  # the loop returns or raises
    except BaseException:
        # nothing of a failed fork stays behind: its files, its folder if it made it, the lock
        _remove_new(dst, before or set())
        lock.release()
        if before is None:
            shutil.rmtree(dst, ignore_errors=True)
        elif LOCK_NAME not in before:
            (dst / LOCK_NAME).unlink(missing_ok=True)
        raise


#: reads of a parent that keeps committing ticks before a fork gives up
_ATTEMPTS = 20


def _last_tick(src: Path) -> int | None:
    step = read_doc(src, STEP_FILE)
    return None if step is None else int(step["tick"])


def _snapshot(src: Path, at_tick: int | None) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The parent's config, the commit record of the tick to fork, and that tick."""
    meta, step = read_doc(src, SOCIETY_FILE), read_doc(src, STEP_FILE)
    if meta is None or step is None:
        raise StoreError(f"no committed society in {src} to fork")
    last = int(step["tick"])
    tick = last if at_tick is None else at_tick
    if isinstance(tick, bool) or not isinstance(tick, int) or not 0 <= tick <= last:
        raise ConfigError(f"at_tick must be a committed tick of {src} (0..{last}), got {tick!r}")
    if tick != last:
        kept = read_doc(src / CHECKPOINTS_DIR / str(tick), STEP_FILE)
        if kept is None:
            raise ConfigError(
                f"{src} keeps only its last commit (tick {last}), so it can be forked at "
                f"tick {last} only; create it with keep_checkpoints=True to fork from any tick"
            )
        step = kept
    return meta, step, tick


def _remove_new(dst: Path, before: set[str]) -> None:
    """Remove what a fork attempt wrote into ``dst`` (not its lock, nor what was there)."""
    if not dst.is_dir():
        return
    for name in os.listdir(dst):
        if name in before or name == LOCK_NAME:
            continue
        p = dst / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def _write_fork(
    build: Callable[..., S],
    src_dir: Path,
    dst: Path,
    meta: dict[str, Any],
    step: dict[str, Any],
    tick: int,
    changes: dict[str, Any],
    lock: WriterLock,
    progress: bool,
) -> S:
    from agentlab.store.manifest import write_manifest

    new_meta = _forked_meta(meta, src_dir, dst, tick, changes)
    agents, env = _read_parent(src_dir, meta, step, tick)
    _write_agents(dst, agents)
    for rel, data in env.items():
        atomic_write_bytes(dst / rel, data, fsync=False)
        if Path(rel).name != ROUTERS_FILE:  # the human-readable current env state
            atomic_write_bytes(dst / "env" / "ENV_STATE.json", data, fsync=False)
    marks = _copy_log(src_dir, dst, step)
    write_manifest(
        dst,
        kind="society",
        config={k: v for k, v in new_meta.items() if k != "agents"}
        | {"n_agents": len(new_meta["agents"])},
        seed=new_meta["seed"],
    )
    new_step = {
        "schema_version": step["schema_version"],
        "tick": tick,
        "ts": step["ts"],
        "offsets": {k: m["bytes"] for k, m in marks.items()},
        "marks": marks,
        "env": list(step.get("env") or []),
        "totals": dict(step.get("totals") or {}),
    }
    if new_meta["llm"] == meta["llm"] and step.get("llm") is not None:
        new_step["llm"] = step["llm"]  # same client: continue with what it learned
    atomic_write_json(dst / SOCIETY_FILE, new_meta)
    if new_meta.get("keep_checkpoints"):
        write_tick_checkpoint(dst, new_step, [a for a, _ in new_meta["agents"]])
    atomic_write_json(dst / STEP_FILE, new_step)  # the fork's commit of tick t
    return build(
        dst,
        new_meta,
        new_step,
        progress=progress,
        executor_options=changes.get("executor_options"),
        lock=lock,
    )


def _forked_meta(
    meta: dict[str, Any], src: Path, dst: Path, tick: int, changes: dict[str, Any]
) -> dict[str, Any]:
    from agentlab.llm import LLMClient

    new = dict(meta)
    new["run_id"] = dst.name
    new["store"] = "directory"  # a fork writes a folder per agent (see _copy_agents)
    new["parent"] = {"run": str(src.resolve()), "tick": tick}
    seeded = meta["llm"].get("seed") if isinstance(meta["llm"], dict) else None
    if "seed" in changes and "llm" not in changes and seeded is not None:
        # the run's randomness includes the LLM's: a simulated model's replies, faults
        # and timings (a real provider's ``seed`` parameter) follow the new seed too
        new["llm"] = {**meta["llm"], "seed": int(changes["seed"])}
    for key, value in changes.items():
        if key == "llm":
            client = (
                value
                if isinstance(value, LLMClient)
                else (LLMClient(value) if isinstance(value, str) else LLMClient.from_dict(value))
            )
            if client.seed is None and client.model.startswith("sim/"):
                seed = changes.get("seed", meta["seed"])
                client = LLMClient.from_dict({**client.to_dict(), "seed": seed})
            new["llm"] = client.to_dict()
        elif key == "retry":
            r = value
            new["retry"] = (
                dict(r)
                if isinstance(r, dict)
                else {
                    "max_attempts": r.max_attempts,
                    "backoff_s": r.backoff_s,
                    "timeout_s": r.timeout_s,
                }
            )
        elif key == "executor":
            new["executor"] = value if isinstance(value, str) else value.name
        elif key != "executor_options":
            new[key] = value
    return new


def _read_parent(
    src: Path, meta: dict[str, Any], step: dict[str, Any], tick: int
) -> tuple[list[tuple[str, int, Any, bytes, bytes]], dict[str, bytes]]:
    """What tick ``tick`` of a parent that may be running consists of, read into memory
    first and fast: the env checkpoint with its routers' state (deleted once the parent commits the next tick) and
    each agent's version (overwritten in the tick after that). Each read is whole or
    raises, so a fork copies one committed tick or retries (``fork_society``)."""
    env = {rel: (src / rel).read_bytes() for rel in checkpoint_files(src, step.get("env") or [])}
    ids = [a for a, _ in meta["agents"]]
    store = open_agent_store(src)
    agents = []
    try:
        for agent_id, version, value in agent_versions(src, ids, tick):
            ws = Workspace(store, agent_id)
            config, ident = ws.read_bytes("config.json"), ws.read_bytes("AGENT.json")
            if config is None or ident is None:
                raise StoreError(f"agent {agent_id!r} of {src} has no complete workspace to fork")
            agents.append((agent_id, version, value, config, ident))
    finally:
        close = getattr(store, "close", None)
        if close is not None:  # the parent's SQLite file: no connection left open on it
            close()
    return agents, env


def _write_agents(dst: Path, agents: list[tuple[str, int, Any, bytes, bytes]]) -> None:
    # a packed parent forks into a directory run (the protocol is the same)
    store = DirectoryStore(dst / "agents")
    for agent_id, version, value, config, ident in agents:
        b = Workspace(store, agent_id)
        assert b.path is not None
        (b.path / "state").mkdir(parents=True, exist_ok=True)
        b.overwrite_bytes("config.json", config)
        # version v sits in slot v % 2, as in a run that was never forked
        b.overwrite_bytes(SLOT_KEYS[version % 2], encode_slot(version, value))
        b.write_bytes("AGENT.json", ident)  # last: its presence marks a complete workspace


def _copy_log(src: Path, dst: Path, step: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Copy each shard's committed prefix (as of ``step``) and the dataset catalogue."""
    from agentlab.store.offsets import log_marks

    sizes = {k: int(m["bytes"]) for k, m in (step.get("marks") or {}).items()} or {
        k: int(v) for k, v in (step.get("offsets") or {}).items()
    }
    for rel, size in sorted(sizes.items()):
        if size <= 0:
            continue
        with open(src / rel, "rb") as f:
            data = f.read(size)
        if len(data) != size:
            raise StoreError(f"{src / rel} is shorter than its committed {size} bytes")
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        with open(dst / rel, "wb") as f:
            f.write(data)
    schema = src / REPLAY_DIR / SCHEMA_NAME
    if schema.exists():
        atomic_write_bytes(dst / REPLAY_DIR / SCHEMA_NAME, schema.read_bytes(), fsync=False)
    marks = log_marks(dst)
    # the copied prefixes must be exactly what was committed
    for rel, mark in (step.get("marks") or {}).items():
        if rel in marks and marks[rel] != mark:
            raise StoreError(f"{src / rel}: its committed part changed; cannot fork it exactly")
    return marks
