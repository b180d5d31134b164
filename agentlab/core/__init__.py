"""Layer 1: pure records and protocols shared by every other layer (no IO)."""

from agentlab.core.clock import Clock, RealClock, VirtualClock, clock_from_name
from agentlab.core.ids import new_id, validate_agent_id
from agentlab.core.records import CallRecord, LLMResponse, ToolCall, Usage

__all__ = [
    "CallRecord",
    "Clock",
    "LLMResponse",
    "RealClock",
    "ToolCall",
    "Usage",
    "VirtualClock",
    "clock_from_name",
    "new_id",
    "validate_agent_id",
]
