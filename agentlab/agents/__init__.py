"""Layer 4 — agents: ``AgentBase`` (workspace contract), the registry, built-in types.

See ``README.md`` in this directory.
"""

from agentlab.agents.base import AgentBase, AgentServices
from agentlab.agents.builtin import CounterAgent
from agentlab.agents.llm_agent import LLMAgent
from agentlab.agents.registry import (
    agent_types,
    ensure_registered,
    get_agent_class,
    portable_classes,
    register_agent,
)
from agentlab.agents.workspace import Workspace, workspace_of

__all__ = [
    "AgentBase",
    "AgentServices",
    "CounterAgent",
    "LLMAgent",
    "Workspace",
    "agent_types",
    "ensure_registered",
    "get_agent_class",
    "portable_classes",
    "register_agent",
    "workspace_of",
]
