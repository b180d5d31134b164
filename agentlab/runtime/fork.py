"""``Society.fork``: a new run that starts from a committed tick of another one.

Counterfactual experiments from one shared history: run a society to tick ``t``, then
fork it into several runs that differ in one parameter (another model, another seed for
the agents' randomness, a retry policy) and compare what happens next.

The fork is a complete, independent run directory:

- ``SOCIETY.json``: the parent's configuration with the changes applied, plus
  ``"parent": {"run", "tick"}``;
- every agent's workspace with its state version as of tick ``t``;
- the env checkpoint of tick ``t`` (also published as ``env/ENV_STATE.json``);
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.agents.workspace import SLOT_KEYS, Workspace, encode_slot
from agentlab.errors import ConfigError, StoreError
from agentlab.runtime.society_files import (
    CHECKPOINTS_DIR,
    SOCIETY_FILE,
    STEP_FILE,
    agent_versions,
    check_not_a_file,
    read_doc,
    unlock_on_error,
    write_tick_checkpoint,
)
from agentlab.store.agent_store import DirectoryStore
from agentlab.store.atomic import atomic_write_bytes, atomic_write_json
from agentlab.store.layout import REPLAY_DIR, SCHEMA_NAME
from agentlab.store.packed_store import open_agent_store
from agentlab.store.writer_lock import WriterLock

if TYPE_CHECKING:
    from agentlab.runtime.society import Society

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
    at_tick: int | None = None,
    progress: bool = True,
    **changes: Any,
) -> Society:
    """Write a fork of the society in ``parent`` at ``at_tick`` into ``out``; return it.

    Args:
        parent: the parent run directory (read only; it may be open elsewhere).
        out: the new run directory (must not hold a society).
        at_tick: the committed tick to start from (default: the parent's last commit).
        progress: show a per-tick progress bar in the fork.
        **changes: new values for any of :data:`FORKABLE`.

    Raises:
        ConfigError: an unknown or invalid change, a tick that was not committed, or an
            earlier tick of a parent that does not keep checkpoints.
    """
    from agentlab.runtime.config import validate_society_config
    from agentlab.runtime.society import Society

    src_dir, dst = Path(parent), Path(out)
    unknown = sorted(set(changes) - set(FORKABLE))
    if unknown:
        raise ConfigError(
            f"a fork cannot change {unknown}: agents and env come from the parent's state; "
            f"valid: {', '.join(FORKABLE)}"
        )
    meta, step = read_doc(src_dir, SOCIETY_FILE), read_doc(src_dir, STEP_FILE)
    if meta is None or step is None:
        raise StoreError(f"no committed society in {src_dir} to fork")
    validate_society_config({"agents": 1, "clock": meta.get("clock", "real"), **changes})
    last = int(step["tick"])
    tick = last if at_tick is None else at_tick
    if isinstance(tick, bool) or not isinstance(tick, int) or not 0 <= tick <= last:
        raise ConfigError(
            f"at_tick must be a committed tick of {src_dir} (0..{last}), got {tick!r}"
        )
    if tick != last:
        step = read_doc(src_dir / CHECKPOINTS_DIR / str(tick), STEP_FILE)
        if step is None:
            raise ConfigError(
                f"{src_dir} keeps only its last commit (tick {last}), so it can be forked at "
                f"tick {last} only; create it with keep_checkpoints=True to fork from any tick"
            )
    check_not_a_file(dst)
    if dst.resolve() == src_dir.resolve():
        raise ConfigError("a fork needs its own directory: out is the parent run")
    lock = WriterLock(dst).acquire()
    with unlock_on_error(lock):
        if (dst / STEP_FILE).exists() or (dst / SOCIETY_FILE).exists():
            raise ConfigError(f"{dst} already holds a society; fork into a new directory")
        new_meta = _forked_meta(meta, src_dir, dst, tick, changes)
        _copy_agents(src_dir, dst, meta, tick)
        _copy_files(src_dir, dst, step.get("env") or [])
        for rel in step.get("env") or []:  # the human-readable current env state
            (dst / "env").mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(dst / "env" / "ENV_STATE.json", (dst / rel).read_bytes())
        marks = _copy_log(src_dir, dst, step)
        from agentlab.store.manifest import write_manifest

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
        return Society(
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
    new["parent"] = {"run": str(src.resolve()), "tick": tick}
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


def _copy_agents(src: Path, dst: Path, meta: dict[str, Any], tick: int) -> None:
    ids = [a for a, _ in meta["agents"]]
    # a packed parent forks into a directory run (the protocol is the same)
    src_store, dst_store = open_agent_store(src), DirectoryStore(dst / "agents")
    for agent_id, version, value in agent_versions(src, ids, tick):
        a, b = Workspace(src_store, agent_id), Workspace(dst_store, agent_id)
        config, ident = a.read_bytes("config.json"), a.read_bytes("AGENT.json")
        if config is None or ident is None:
            raise StoreError(f"agent {agent_id!r} of {src} has no complete workspace to fork")
        assert b.path is not None
        (b.path / "state").mkdir(parents=True, exist_ok=True)
        b.overwrite_bytes("config.json", config)
        # version v sits in slot v % 2, as in a run that was never forked
        b.overwrite_bytes(SLOT_KEYS[version % 2], encode_slot(version, value))
        b.write_bytes("AGENT.json", ident)  # last: its presence marks a complete workspace


def _copy_files(src: Path, dst: Path, rels: list[str]) -> None:
    for rel in rels:
        atomic_write_bytes(dst / rel, (src / rel).read_bytes(), fsync=False)


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
