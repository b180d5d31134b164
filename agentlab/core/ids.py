"""Identifiers: validated agent ids and short random/seeded ids."""

from __future__ import annotations

import os
import re

from agentlab.errors import InvalidAgentIdError

__all__ = ["new_id", "validate_agent_id"]

# fullmatch, not match with "$": "$" also matches before a trailing newline ("a\n").
_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def validate_agent_id(agent_id: str) -> str:
    """Return ``agent_id`` if it is safe as a single path component, else raise.

    Allowed: 1–128 chars of letters, digits, ``_ . -``, not starting with ``.`` or ``-``,
    and not ``.``/``..`` — so an id can never escape the run directory.
    """
    if (
        not isinstance(agent_id, str)
        or not _AGENT_ID.fullmatch(agent_id)
        or agent_id in {".", ".."}
    ):
        raise InvalidAgentIdError(
            f"invalid agent id {agent_id!r}: use 1-128 characters from [A-Za-z0-9_.-], "
            "starting with a letter or digit"
        )
    return agent_id


def new_id(prefix: str = "", nbytes: int = 8) -> str:
    """A random hex id (not seeded; use for request/span ids, never for results)."""
    return prefix + os.urandom(nbytes).hex()
