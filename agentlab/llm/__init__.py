"""Layer 2: LLM access — ``LLMClient``, the AIMD limiter, the simulated backend, sim-serve.

Importing this package is cheap: litellm is imported only when a real provider is called,
aiohttp only when ``sim_serve`` is used.
"""

from agentlab.llm._live import reset_live
from agentlab.llm.aimd import AIMDLimiter, ConcurrencyGate
from agentlab.llm.client import LLMClient, LLMStream, client_on_clock
from agentlab.llm.sim_backend import SIM_OVERRIDES, SimServer
from agentlab.llm.sim_profiles import PROFILES, SimProfile, get_profile
from agentlab.llm.structured import OutputSpec, output_spec, validate_schema

__all__ = [
    "PROFILES",
    "SIM_OVERRIDES",
    "AIMDLimiter",
    "ConcurrencyGate",
    "LLMClient",
    "LLMStream",
    "OutputSpec",
    "SimProfile",
    "SimServer",
    "client_on_clock",
    "get_profile",
    "output_spec",
    "reset_live",
    "validate_schema",
]
