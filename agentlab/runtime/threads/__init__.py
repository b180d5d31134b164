"""Suspendable agent threads: slices, per-thread queues, asynchronous tools, step mode.

See README.md in this directory for the design, message shapes and measured numbers.
"""

from agentlab.runtime.threads.model import LLMClientModel, Model, ScriptedModel
from agentlab.runtime.threads.records import KINDS, Delivery, ThreadState
from agentlab.runtime.threads.shapes import (
    RUNTIME_TOOLS,
    synthetic_pair,
    validate_openai_messages,
)
from agentlab.runtime.threads.slice import INTERRUPTED
from agentlab.runtime.threads.society_hook import LongToolHook
from agentlab.runtime.threads.stores import MemoryThreadStore, SQLiteThreadStore, ThreadStore
from agentlab.runtime.threads.system import AgentSystem, SimulatedCrash, StepResult
from agentlab.runtime.threads.tools import Tool, ToolContext, thread_tool

__all__ = [
    "INTERRUPTED",
    "KINDS",
    "RUNTIME_TOOLS",
    "AgentSystem",
    "Delivery",
    "LLMClientModel",
    "LongToolHook",
    "MemoryThreadStore",
    "Model",
    "SQLiteThreadStore",
    "ScriptedModel",
    "SimulatedCrash",
    "StepResult",
    "ThreadState",
    "ThreadStore",
    "Tool",
    "ToolContext",
    "synthetic_pair",
    "thread_tool",
    "validate_openai_messages",
]
