"""Command-line options of ``agentlab sim-serve`` (argparse only: cheap to import).

Fault rates are flags (``--rate-limit-rate``, ``--timeout-rate``, ``--malformed-rate``);
any other profile field is ``--set FIELD=VALUE`` (validated by the profile).
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_arguments", "add_fault_arguments", "profile_params", "server_options"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``sim-serve`` options (shared by ``agentlab sim-serve`` and ``python -m``)."""
    p.add_argument("--profile", default="vllm-3b", help="simulator profile (default vllm-3b)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8600)
    p.add_argument("--seed", type=int, default=0)
    add_fault_arguments(p)


def add_fault_arguments(p: argparse.ArgumentParser) -> None:
    """The fault-rate and ``--set`` options of ``sim-serve``."""
    p.add_argument("--rate-limit-rate", type=float, default=None, metavar="P",
                   help="fraction of requests answered with HTTP 429")  # fmt: skip
    p.add_argument("--timeout-rate", type=float, default=None, metavar="P",
                   help="fraction of requests that hang until the client gives up")  # fmt: skip
    p.add_argument("--malformed-rate", type=float, default=None, metavar="P",
                   help="fraction of replies cut short (truncated JSON / empty text)")  # fmt: skip
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="any profile field, e.g. --set slots=4 --set decode_tps=120")  # fmt: skip
    p.add_argument("--fault-control", action="store_true",
                   help="serve POST /sim/faults (change fault rates at run time; off by default)")  # fmt: skip
    p.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME",
                   help="model name(s) to serve, as vLLM's (e.g. a tokenizer's repo id or "
                        "directory, so clients resolve a tokenizer); default sim/PROFILE, PROFILE")  # fmt: skip
    p.add_argument("--max-model-len", type=int, default=131072, metavar="N",
                   help="the model's context: HTTP 400 for a completion asked above it, or "
                        "a prompt that leaves its completion no room (as vLLM)")  # fmt: skip
    p.add_argument("--tokens-per-chunk", type=int, default=1, metavar="K",
                   help="tokens per streamed SSE chunk (1: one per token, as vLLM)")  # fmt: skip
    p.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                   help="drop a connection that has not sent a request's headers within S "
                        "seconds (of connecting or of its previous reply)")  # fmt: skip
    p.add_argument("--backlog", type=int, default=1024, metavar="N",
                   help="listen backlog (connections queued before accept)")  # fmt: skip


def server_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :func:`~agentlab.llm.sim_serve.build_app` options from the parsed arguments."""
    return {
        "served_model_name": getattr(args, "served_model_name", None),
        "fault_control": bool(getattr(args, "fault_control", False)),
        "max_model_len": int(getattr(args, "max_model_len", 131072)),
        "tokens_per_chunk": int(getattr(args, "tokens_per_chunk", 1)),
    }


def profile_params(args: argparse.Namespace) -> dict[str, Any]:
    """Profile overrides from the parsed ``sim-serve`` options.

    Raises:
        ConfigError: a ``--set`` item without ``=`` or a rate outside [0, 1].
    """
    from agentlab.errors import ConfigError

    params: dict[str, Any] = {}
    for flag, field in (
        ("rate_limit_rate", "p_rate_limit"),
        ("timeout_rate", "p_timeout"),
        ("malformed_rate", "p_malformed"),
    ):
        v = getattr(args, flag, None)
        if v is not None:
            if not 0.0 <= v <= 1.0:
                raise ConfigError(f"--{flag.replace('_', '-')} must be in [0, 1], got {v}")
            params[field] = v
    for item in getattr(args, "set", []) or []:
        key, eq, value = item.partition("=")
        if not eq:
            raise ConfigError(f"--set takes FIELD=VALUE, got {item!r}")
        params[key.strip()] = value.strip()
    return params
