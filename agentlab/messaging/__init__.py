"""Layer 4 messaging: immutable ``Msg``, ``MsgHub``, pipelines, structured output, votes."""

from agentlab.messaging.agent import HubAgent, LLMAgent, Memory
from agentlab.messaging.hub import HubParticipant, MsgHub
from agentlab.messaging.msg import (
    Block,
    DataBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from agentlab.messaging.pipeline import fanout, gather_limited, sequential
from agentlab.messaging.sink import ListSink, MessageSink, ReplayMessageSink, message_row
from agentlab.messaging.structured import (
    CompletionClient,
    FailurePolicy,
    StructuredResult,
    choice_model,
    complete_structured,
    json_schema,
)
from agentlab.messaging.visibility import ShowAll, StripPrivate, VisibilityPolicy
from agentlab.messaging.votes import VoteResult, majority_vote, tally

__all__ = [
    "Block",
    "CompletionClient",
    "DataBlock",
    "FailurePolicy",
    "HubAgent",
    "HubParticipant",
    "LLMAgent",
    "ListSink",
    "Memory",
    "MessageSink",
    "Msg",
    "MsgHub",
    "ReplayMessageSink",
    "ShowAll",
    "StripPrivate",
    "StructuredResult",
    "TextBlock",
    "ThinkingBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "VisibilityPolicy",
    "VoteResult",
    "choice_model",
    "complete_structured",
    "fanout",
    "gather_limited",
    "json_schema",
    "majority_vote",
    "message_row",
    "sequential",
    "tally",
]
