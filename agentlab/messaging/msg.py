"""``Msg``: one immutable message, shared (never copied) between the agents that see it.

A message is a sender, a role and a tuple of typed content blocks (text, thinking, tool call,
tool result, data) plus metadata, an id, a timestamp, token usage and an optional structured
output (a validated pydantic object). Because a ``Msg`` is frozen, a hub hands the *same*
object to every recipient; a visibility policy that must hide blocks derives one new message
per message (see :mod:`agentlab.messaging.visibility`), not one per recipient.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentlab.core.records import Usage
from agentlab.errors import ConfigError

__all__ = [
    "Block",
    "DataBlock",
    "Msg",
    "TextBlock",
    "ThinkingBlock",
    "ToolCallBlock",
    "ToolResultBlock",
]

SCHEMA_VERSION = 1
Role = Literal["user", "assistant", "system"]
_ROLES = ("user", "assistant", "system")
# Process-local sequence: ids are unique and ordered without an RNG, so seeded runs stay
# reproducible (random ids would not change results, but would change message ids).
_SEQ = itertools.count(1)


@dataclass(frozen=True, slots=True)
class TextBlock:
    """Plain text visible to everyone who sees the message."""

    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ThinkingBlock:
    """Private reasoning; the default visibility policy hides it from other agents."""

    thinking: str
    type: Literal["thinking"] = "thinking"


@dataclass(frozen=True, slots=True)
class ToolCallBlock:
    """A tool call the sender made (id, name, JSON-able arguments)."""

    id: str
    name: str
    arguments: Mapping[str, Any]
    type: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class ToolResultBlock:
    """The result of a tool call, matched by ``id``."""

    id: str
    output: str
    type: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, slots=True)
class DataBlock:
    """Any JSON-able payload (a structured vote, a document, a table row)."""

    data: Any
    type: Literal["data"] = "data"


Block = TextBlock | ThinkingBlock | ToolCallBlock | ToolResultBlock | DataBlock
_BLOCK_TYPES: dict[str, type] = {
    "text": TextBlock,
    "thinking": ThinkingBlock,
    "tool_call": ToolCallBlock,
    "tool_result": ToolResultBlock,
    "data": DataBlock,
}


@dataclass(frozen=True, slots=True)
class Msg:
    """An immutable message.

    Args:
        sender: name of the agent (or ``"system"``/``"moderator"``) that wrote it.
        content: a string (becomes one :class:`TextBlock`) or a sequence of blocks.
        role: ``"user"``, ``"assistant"`` or ``"system"``.
        metadata: free-form JSON-able mapping; ``metadata["to"]`` (a list of names) makes the
            message private to those receivers inside a hub.
        ts: creation time from the run's clock (``0.0`` if the creator had no clock).
        usage: tokens spent producing it, when an LLM wrote it.
        structured: the validated structured output (pydantic object), if any.
        id: unique within the process; assigned automatically.
    """

    sender: str
    blocks: tuple[Block, ...]
    role: Role = "assistant"
    metadata: Mapping[str, Any] = field(default_factory=dict)
    ts: float = 0.0
    usage: Usage | None = None
    structured: Any = None
    id: str = ""
    schema_version: int = SCHEMA_VERSION

    def __init__(
        self,
        sender: str,
        content: str | Iterable[Block] = "",
        role: Role = "assistant",
        metadata: Mapping[str, Any] | None = None,
        ts: float = 0.0,
        usage: Usage | None = None,
        structured: Any = None,
        id: str = "",
        schema_version: int = SCHEMA_VERSION,
    ) -> None:
        if role not in _ROLES:
            raise ConfigError(f"invalid message role {role!r}; valid: {', '.join(_ROLES)}")
        blocks = (TextBlock(content),) if isinstance(content, str) else tuple(content)
        s = object.__setattr__  # frozen dataclass with a custom __init__
        s(self, "sender", sender)
        s(self, "blocks", blocks)
        s(self, "role", role)
        s(self, "metadata", dict(metadata or {}))
        s(self, "ts", float(ts))
        s(self, "usage", usage)
        s(self, "structured", structured)
        s(self, "id", id or f"m{next(_SEQ)}")
        s(self, "schema_version", schema_version)

    # --- views --------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The sender, under AgentScope's name for it (``Msg.name``)."""
        return self.sender

    @property
    def content(self) -> str:
        """The text blocks joined by newlines (what a chat transcript shows)."""
        return "\n".join(b.text for b in self.blocks if isinstance(b, TextBlock))

    @property
    def thinking(self) -> str:
        """The thinking blocks joined by newlines."""
        return "\n".join(b.thinking for b in self.blocks if isinstance(b, ThinkingBlock))

    @property
    def receivers(self) -> tuple[str, ...] | None:
        """Names this message is addressed to privately, or ``None`` for everyone."""
        to = self.metadata.get("to")
        return None if to is None else tuple(to)

    def has(self, block_type: str) -> bool:
        """Whether any block has this ``type`` (``"thinking"``, ``"tool_call"``, ...)."""
        return any(b.type == block_type for b in self.blocks)

    def replace(self, **changes: Any) -> Msg:
        """A copy with some fields changed; the id is kept unless given."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["content"] = fields.pop("blocks")
        if "blocks" in changes:
            changes["content"] = changes.pop("blocks")
        fields.update(changes)
        return Msg(**fields)

    # --- serialisation ------------------------------------------------------------------
    def blocks_json(self) -> list[dict[str, Any]]:
        """The blocks as JSON-able dicts."""
        return [_block_to_dict(b) for b in self.blocks]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (structured output as its ``model_dump``)."""
        st = self.structured
        return {
            "id": self.id,
            "sender": self.sender,
            "role": self.role,
            "blocks": self.blocks_json(),
            "metadata": dict(self.metadata),
            "ts": self.ts,
            "usage": None if self.usage is None else self.usage.to_dict(),
            "structured": st.model_dump(mode="json") if hasattr(st, "model_dump") else st,
            "schema_version": self.schema_version,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Msg:
        """Inverse of :meth:`to_dict` (structured output comes back as a plain dict)."""
        usage = d.get("usage")
        return cls(
            sender=d["sender"],
            content=[_block_from_dict(b) for b in d.get("blocks", [])],
            role=d.get("role", "assistant"),
            metadata=d.get("metadata") or {},
            ts=d.get("ts", 0.0),
            usage=None if usage is None else Usage(**usage),
            structured=d.get("structured"),
            id=d.get("id", ""),
            schema_version=d.get("schema_version", SCHEMA_VERSION),
        )

    def __repr__(self) -> str:
        text = self.content
        short = text if len(text) <= 60 else text[:57] + "..."
        return f"Msg({self.sender!r}, {short!r}, role={self.role!r}, id={self.id!r})"


def _block_to_dict(b: Block) -> dict[str, Any]:
    d = {f.name: getattr(b, f.name) for f in dataclasses.fields(b)}
    if isinstance(b, ToolCallBlock):
        d["arguments"] = dict(b.arguments)
    if isinstance(b, DataBlock) and hasattr(b.data, "model_dump"):
        d["data"] = b.data.model_dump(mode="json")
    return d


def _block_from_dict(d: Mapping[str, Any]) -> Block:
    kind = d.get("type")
    cls = _BLOCK_TYPES.get(str(kind))
    if cls is None:
        raise ConfigError(f"unknown block type {kind!r}; valid: {', '.join(_BLOCK_TYPES)}")
    block: Block = cls(**{k: v for k, v in d.items() if k != "type"})
    return block


def content_json(msg: Msg) -> str:
    """The blocks as a compact JSON string (the ``blocks`` column of the messages dataset)."""
    return json.dumps(msg.blocks_json(), separators=(",", ":"), default=str)
