"""Visibility policies: what another agent is allowed to see of a message.

A hub asks its policy for the *view* of a message for each receiver. Rather than raising when
an agent would see something it should not (a teammate's private reasoning, a tool result),
the policy returns a reduced message or ``None`` (not delivered). Views are computed once per
message and shared, so a broadcast to N agents allocates at most one stripped copy.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, runtime_checkable

from agentlab.messaging.msg import Msg

__all__ = ["ShowAll", "StripPrivate", "VisibilityPolicy", "deliverable"]


@runtime_checkable
class VisibilityPolicy(Protocol):
    """Decides what ``receiver`` sees of ``msg``."""

    def view(self, msg: Msg, receiver: str) -> Msg | None:
        """The message as ``receiver`` sees it, or ``None`` if it is not delivered."""
        ...


def deliverable(msg: Msg, receiver: str) -> bool:
    """Private addressing: ``metadata["to"]`` limits who receives a message at all."""
    to = msg.receivers
    return to is None or receiver in to


class ShowAll:
    """Everyone sees every block; only private addressing (``metadata["to"]``) applies."""

    def view(self, msg: Msg, receiver: str) -> Msg | None:
        return msg if deliverable(msg, receiver) else None

    def __repr__(self) -> str:
        return "ShowAll()"


class StripPrivate:
    """Hide selected block types from everyone but the sender (the default policy).

    Args:
        hidden: block types removed from other agents' view (default thinking, tool calls
            and tool results).
        cache_size: stripped views are memoised by message id, so a message broadcast to
            many agents is stripped once; the cache is bounded to keep memory flat.
    """

    def __init__(
        self,
        hidden: Collection[str] = ("thinking", "tool_call", "tool_result"),
        cache_size: int = 256,
    ) -> None:
        self.hidden = frozenset(hidden)
        self._cache: dict[str, Msg] = {}
        self._cache_size = cache_size

    def view(self, msg: Msg, receiver: str) -> Msg | None:
        if not deliverable(msg, receiver):
            return None
        if receiver == msg.sender or not any(b.type in self.hidden for b in msg.blocks):
            return msg
        cached = self._cache.get(msg.id)
        if cached is None:
            cached = msg.replace(content=[b for b in msg.blocks if b.type not in self.hidden])
            if len(self._cache) >= self._cache_size:
                self._cache.pop(next(iter(self._cache)))  # oldest first (dict order)
            self._cache[msg.id] = cached
        return cached

    def __repr__(self) -> str:
        return f"StripPrivate(hidden={sorted(self.hidden)})"
