"""The pipe protocol between :class:`~agentlab.env.sandbox_pool.SandboxPool` and its workers.

One JSON document per line. Plain data keeps its types across the pipe: tuples travel as
``{"__t": [...]}`` and dicts whose keys are not all strings as ``{"__d": [[k, v], ...]}``.

Parent -> worker: ``{"op": "run", "code", "tools": [names], "limits": {...}}``, then one
``{"op": "result", "ok", "value" | "error", "error_type"}`` per tool call the worker asks for.
Worker -> parent: ``{"op": "ready"}`` once at start, ``{"op": "tool", "name", "args",
"kwargs"}`` per tool call, and ``{"op": "done", "ok", "value", "printed", "steps",
"tool_calls" | "error", "error_type", "from_tool"}`` per program, with ``"retire": true``
when the worker exits after it (CPU time used up, or a MemoryError left it unreliable).
Every worker message carries ``"busy"``: seconds since the worker read the parent's last
message (the parent bills the program no more than that). A tool result the parent refuses
for the request as a whole (too many tool calls) has ``"error_type": "UnsafeCodeError"``.
A worker that cannot confine itself sends ``{"op": "error", "error"}`` instead of
``ready`` and exits.
"""

from __future__ import annotations

import json
from typing import Any

from agentlab.env.codecheck import hash_key_ok

__all__ = ["decode", "dumps", "encode", "loads"]


def encode(value: Any) -> Any:
    """Plain data -> JSON-able data with tuples and non-string keys tagged."""
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {"__t": [encode(v) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and not (
            len(value) == 1 and next(iter(value)) in ("__t", "__d")
        ):
            return {k: encode(v) for k, v in value.items()}
        return {"__d": [[encode(k), encode(v)] for k, v in value.items()]}
    return value


def decode(value: Any) -> Any:
    """Inverse of :func:`encode`.

    Raises:
        ValueError: a dict key whose hash an attacker could choose (see
            :func:`~agentlab.env.codecheck.check_hash_key`): a worker is not trusted.
    """
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            if "__t" in value:
                return tuple(decode(v) for v in value["__t"])
            if "__d" in value:
                pairs = [(decode(k), decode(v)) for k, v in value["__d"]]
                for k, _ in pairs:
                    if not hash_key_ok(k):
                        raise ValueError("a dict key outside the hash-safe range")
                return dict(pairs)
        return {k: decode(v) for k, v in value.items()}
    return value


def dumps(message: dict[str, Any]) -> bytes:
    """One message as a line of bytes.

    ASCII with ``\\uXXXX`` escapes: a lone surrogate (``'\\ud800'``, legal in a Python
    ``str``, in a post or a ``print``) has no UTF-8 encoding, and failing to send it killed
    the worker; escaped, it crosses the pipe and ``json.loads`` reads it back unchanged.
    """
    return json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


def loads(line: bytes) -> dict[str, Any]:
    """One line of bytes back to a message."""
    msg = json.loads(line)
    if not isinstance(msg, dict):
        raise ValueError(f"sandbox message is not an object: {line[:80]!r}")
    return msg
