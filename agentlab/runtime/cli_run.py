"""``agentlab run CONFIG [--resume | --fork RUN@TICK] [--executor local|ray] [--ticks N | --until T]``.

The config is TOML (``tomllib``) or YAML with the arguments of ``Society.create``::

    out = "runs/feed"          # run directory (or --out)
    ticks = 5                  # ticks to run (N more), or: until = 5 (up to tick 5)
    seed = 0
    llm = "sim/vllm-3b"
    executor = "local"
    batch_size = 256
    clock = "real"
    env = ["social_feed"]
    [agents]                   # or agents = 200
    llm = 200

``ticks`` / ``--ticks N`` always means N *more* ticks and ``until`` / ``--until T`` *up to*
tick T, as in ``Society.run(ticks=N)`` / ``Society.run(until=T)``.
``--resume`` continues the run in ``out`` from its last committed tick.
``--fork RUN@TICK`` starts a new run in ``out`` from committed tick ``TICK`` of ``RUN``; its
config (optional) holds only the changes (``llm``, ``seed``, ``retry`` ...).
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

from agentlab.errors import ConfigError

__all__ = ["load_config", "main"]


def load_config(path: str | Path) -> dict[str, Any]:
    """Read and validate a TOML (``.toml``) or YAML (``.yaml``/``.yml``) society config.

    Raises:
        ConfigError: the file is missing or unparsable, or — all listed in one error —
            keys are unknown or values of the wrong type (see ``runtime/config.py``).
    """
    from agentlab.runtime.config import validate_society_config

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    if p.suffix == ".toml":
        try:
            with open(p, "rb") as f:
                cfg = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config {str(p)!r} is not valid TOML: {exc}") from None
    elif p.suffix in (".yaml", ".yml"):
        import yaml

        try:
            cfg = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config {str(p)!r} is not valid YAML: {exc}") from None
    else:
        raise ConfigError(f"config {str(p)!r}: use a .toml, .yaml or .yml file")
    if not isinstance(cfg, dict):
        raise ConfigError(f"config {str(p)!r} must be a table/mapping at the top level")
    validate_society_config(cfg, source=str(p))
    return cfg


def main(args: argparse.Namespace) -> int:
    """Create (or ``--resume``) a society from ``args.config`` and run it; prints a summary."""
    from agentlab.runtime.batch import RetryPolicy
    from agentlab.runtime.society import Society

    fork = getattr(args, "fork", None)
    if args.config is None and not fork:
        raise ConfigError("give a CONFIG file (TOML or YAML), or --fork RUN@TICK")
    cfg = load_config(args.config) if args.config else {}
    out = getattr(args, "out", None) or cfg.get("out")
    if not out:
        raise ConfigError("no run directory: set 'out' in the config or pass --out")
    how = _how_far(args, cfg)
    executor = getattr(args, "executor", None) or cfg.get("executor", "local")
    batch_size = getattr(args, "batch_size", None) or cfg.get("batch_size")
    progress = bool(cfg.get("progress", True))
    if fork:
        if getattr(args, "resume", False):
            raise ConfigError("--fork starts a new run; --resume continues one: give one")
        society = _fork(fork, out, cfg, executor, batch_size, progress)
        print(f"forked {fork} into {out} at tick {society.tick}; running {_say(how)}")
    elif getattr(args, "resume", False):
        society = Society.open(out, executor=executor, batch_size=batch_size, progress=progress)
        print(f"resuming {out} at tick {society.tick}; running {_say(how)}")
    else:
        from agentlab.runtime.config import CLI_KEYS, SocietyConfig
        from agentlab.runtime.society_files import STEP_FILE

        if (Path(out) / STEP_FILE).exists() and cfg.get("exist_ok") in (None, False):
            # (Society.create's own message names its Python API, not these flags)
            again = f"agentlab run {args.config}" if args.config else "agentlab run CONFIG"
            raise ConfigError(
                f"{out} already holds a society: `{again} --resume` continues it; "
                'exist_ok = "replace" in the config starts it over'
            )

        # every Society.create argument the config model knows (one list, never a copy)
        kwargs = {k: v for k, v in cfg.items() if k in SocietyConfig.model_fields}
        kwargs = {k: v for k, v in kwargs.items() if k not in CLI_KEYS}
        kwargs.update(executor=executor, batch_size=batch_size)
        if "retry" in cfg:
            kwargs["retry"] = RetryPolicy(**cfg["retry"])
        society = Society.create(out, progress=progress, **kwargs)
    try:
        stats = society.run_sync(**how)
    finally:
        society.close()
    print(
        f"{out}: tick {stats['tick']}, {stats['steps']} agent-steps, "
        f"{stats['llm_calls']} LLM calls, {stats['errors']} step errors in "
        f"{stats['wall_s']:.1f} s ({stats['steps_per_s']:.0f} steps/s)"
    )
    if stats.get("status") != "stopped":
        return 0
    if getattr(args, "config", None):  # (the same run continues from its committed tick)
        print(f"interrupted: continue with `agentlab run {args.config} --resume`")
    return 130


def _how_far(args: argparse.Namespace, cfg: dict[str, Any]) -> dict[str, int]:
    """``{"ticks": N}`` (N more) or ``{"until": T}`` (up to tick T): the flags win over
    the config; one of the two, never both."""
    for source, where in ((vars(args), "flags"), (cfg, "config")):
        ticks, until = source.get("ticks"), source.get("until")
        if ticks is not None and until is not None:
            raise ConfigError(
                f"the {where} give both ticks ({ticks}, that many more) and until ({until}, "
                "up to that tick): give one"
            )
        if ticks is not None:
            return {"ticks": int(ticks)}
        if until is not None:
            return {"until": int(until)}
    return {"ticks": 1}


def _say(how: dict[str, int]) -> str:
    if "until" in how:
        return f"up to tick {how['until']}"
    return f"{how['ticks']} more tick" + ("s" if how["ticks"] != 1 else "")


def _fork(
    spec: str,
    out: str,
    cfg: dict[str, Any],
    executor: Any,
    batch_size: int | None,
    progress: bool,
) -> Any:
    """``--fork RUN@TICK``: the config gives only what changes (see ``runtime/fork.py``)."""
    from agentlab.runtime.fork import FORKABLE
    from agentlab.runtime.society import Society

    run, sep, tick = spec.rpartition("@")
    if not sep or not run or not tick.isdigit():
        raise ConfigError(f"--fork takes RUN@TICK (e.g. runs/feed@3), got {spec!r}")
    fixed = sorted(set(cfg) - set(FORKABLE) - {"out", "ticks", "progress"})
    if fixed:
        raise ConfigError(
            f"with --fork, {fixed} come from the parent run and cannot be set; the config "
            f"may change only: {', '.join(FORKABLE)}"
        )
    changes = {k: v for k, v in cfg.items() if k in FORKABLE}
    if executor != "local" or "executor" in cfg:
        changes["executor"] = executor
    if batch_size is not None:
        changes["batch_size"] = batch_size
    return Society.fork_run(run, out, at_tick=int(tick), progress=progress, **changes)
