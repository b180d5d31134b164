"""``MsgHub``: a group of agents that see each other's messages.

Inside ``async with MsgHub([...]) as hub:`` every reply a participant produces (through its
``__call__``) is delivered to the other participants (auto-broadcast), each seeing the view
its :class:`~agentlab.messaging.visibility.VisibilityPolicy` allows. Delivery is an
``observe(msg)`` call per receiver that appends one shared, immutable message to the
receiver's memory — O(1) in the length of the conversation, no copies per receiver.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from agentlab.core.clock import Clock
from agentlab.errors import ConfigError
from agentlab.messaging.msg import Msg
from agentlab.messaging.sink import MessageSink
from agentlab.messaging.visibility import StripPrivate, VisibilityPolicy

__all__ = ["HubParticipant", "MsgHub"]


@runtime_checkable
class HubParticipant(Protocol):
    """Anything with a name that can observe messages (sync or async ``observe``)."""

    name: str

    def observe(self, msg: Msg) -> Any:
        """Take note of a message (append to memory). May return an awaitable."""
        ...


class MsgHub:
    """An async context manager that broadcasts messages among its participants.

    Args:
        participants: agents (anything with ``name`` and ``observe``). Agents that derive
            from :class:`~agentlab.messaging.agent.HubAgent` also auto-broadcast their
            replies while the hub is open.
        announcement: a message (or messages) broadcast to everyone on entering.
        auto_broadcast: deliver each participant's reply to the others automatically.
        name: hub name stored in the ``messages`` dataset (e.g. ``"day"``, ``"wolves"``).
        visibility: per-receiver view policy; default :class:`StripPrivate` (others never
            see thinking or tool blocks).
        sink: optional :class:`~agentlab.messaging.sink.MessageSink` (the run log).
        tick: tick number recorded with each message; may be updated while open.
        clock: stamps announcements created from plain strings.
    """

    def __init__(
        self,
        participants: Iterable[Any],
        announcement: Msg | str | Sequence[Msg] | None = None,
        auto_broadcast: bool = True,
        *,
        name: str = "hub",
        visibility: VisibilityPolicy | None = None,
        sink: MessageSink | None = None,
        tick: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self._open = False
        self.participants: list[Any] = []
        self.add(*participants)
        self.announcement = announcement
        self.auto_broadcast = auto_broadcast
        self.visibility: VisibilityPolicy = visibility or StripPrivate()
        self.sink = sink
        self.tick = tick
        self.clock = clock
        #: every message broadcast in this hub, in order
        self.history: list[Msg] = []

    # --- membership ---------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """Participant names in join order."""
        return [p.name for p in self.participants]

    def add(self, *participants: Any) -> None:
        """Add participants (idempotent by name); they see only later messages."""
        for p in participants:
            if not isinstance(getattr(p, "name", None), str) or not hasattr(p, "observe"):
                raise ConfigError(f"hub participant {p!r} needs a str 'name' and an observe()")
            if p.name in self.names:
                continue
            self.participants.append(p)
            if self._open:
                _join(p, self)

    def remove(self, *participants: Any) -> None:
        """Remove participants (objects or names); unknown ones are ignored."""
        gone = {p if isinstance(p, str) else p.name for p in participants}
        for p in [p for p in self.participants if p.name in gone]:
            self.participants.remove(p)
            if self._open:
                _leave(p, self)

    def set_auto_broadcast(self, enabled: bool) -> None:
        """Turn automatic delivery of replies on or off (explicit broadcast still works)."""
        self.auto_broadcast = bool(enabled)

    # --- context manager ----------------------------------------------------------------
    async def __aenter__(self) -> MsgHub:
        self._open = True
        for p in self.participants:
            _join(p, self)
        ann = self.announcement
        if ann is not None:
            items = [ann] if isinstance(ann, Msg | str) else list(ann)
            for a in items:
                msg = a if isinstance(a, Msg) else self._system(a)
                await self.broadcast(msg)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for p in self.participants:
            _leave(p, self)
        self._open = False

    def _system(self, text: str) -> Msg:
        ts = self.clock.now() if self.clock is not None else 0.0
        return Msg("system", text, role="system", ts=ts)

    # --- delivery -----------------------------------------------------------------------
    async def broadcast(
        self, msg: Msg | str, *, exclude: Iterable[str] = (), to: Iterable[str] | None = None
    ) -> list[str]:
        """Deliver ``msg`` to every participant but its sender (and ``exclude``).

        Args:
            msg: the message; a string becomes a system announcement.
            exclude: names that must not receive it.
            to: make it private to these names (sets ``metadata["to"]``).

        Returns:
            The names that received it (after the visibility policy).
        """
        if isinstance(msg, str):
            msg = self._system(msg)
        if to is not None:
            msg = msg.replace(metadata={**msg.metadata, "to": sorted(set(to))})
        skip = set(exclude)
        skip.add(msg.sender)
        self.history.append(msg)
        receivers: list[str] = []
        for p in list(self.participants):
            if p.name in skip:
                continue
            view = self.visibility.view(msg, p.name)
            if view is None:
                continue
            res = p.observe(view)
            if inspect.isawaitable(res):
                await res
            receivers.append(p.name)
        if self.sink is not None:
            self.sink.record(msg, receivers, self.name, self.tick)
        return receivers

    async def send(self, msg: Msg, to: Iterable[str]) -> list[str]:
        """A private message to some participants (a channel inside the hub)."""
        return await self.broadcast(msg, to=to)

    async def _on_reply(self, agent: Any, msg: Msg) -> None:
        # Called by HubAgent.__call__ after each reply while this hub is open.
        if self.auto_broadcast and self._open:
            await self.broadcast(msg)

    def __repr__(self) -> str:
        return f"MsgHub({self.name!r}, participants={self.names}, messages={len(self.history)})"


def _join(p: Any, hub: MsgHub) -> None:
    hubs = getattr(p, "_hubs", None)
    if isinstance(hubs, list) and hub not in hubs:
        hubs.append(hub)


def _leave(p: Any, hub: MsgHub) -> None:
    hubs = getattr(p, "_hubs", None)
    if isinstance(hubs, list) and hub in hubs:
        hubs.remove(hub)
