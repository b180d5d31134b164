"""Environment modules: ``EnvBase`` and ``@tool``, the env registry, routers, the sandbox
for generated code, and the built-in ``SocialFeed``. See README.md in this folder."""

from agentlab.env.base import DEFAULT_STATE_PATH, ENV_SCHEMA_VERSION, EnvBase
from agentlab.env.code_cache import CodeCache
from agentlab.env.registry import (
    class_ref,
    create_env,
    env_from_spec,
    env_spec,
    env_types,
    get_env_class,
    register_env,
    resolve_class_ref,
)
from agentlab.env.routers import (
    CodeGenRouter,
    DirectRouter,
    ReActRouter,
    Router,
    RouteResult,
    RouterStats,
    ToolArgumentError,
    make_router,
    router_from_spec,
    router_kinds,
)
from agentlab.env.routers_plan import PlanRouter, TwoTierRouter
from agentlab.env.sandbox import SAFE_BUILTINS, Limits, Sandbox, SandboxResult, check_code
from agentlab.env.sandbox_pool import PoolStats, SandboxPool, default_pool
from agentlab.env.social_feed import SocialFeed
from agentlab.env.tools import CONTEXT_PARAMS, ToolSpec, collect_tools, tool

__all__ = [
    "CONTEXT_PARAMS",
    "DEFAULT_STATE_PATH",
    "ENV_SCHEMA_VERSION",
    "SAFE_BUILTINS",
    "CodeCache",
    "CodeGenRouter",
    "DirectRouter",
    "EnvBase",
    "Limits",
    "PlanRouter",
    "PoolStats",
    "ReActRouter",
    "RouteResult",
    "Router",
    "RouterStats",
    "Sandbox",
    "SandboxPool",
    "SandboxResult",
    "SocialFeed",
    "ToolArgumentError",
    "ToolSpec",
    "TwoTierRouter",
    "check_code",
    "class_ref",
    "collect_tools",
    "create_env",
    "default_pool",
    "env_from_spec",
    "env_spec",
    "env_types",
    "get_env_class",
    "make_router",
    "register_env",
    "resolve_class_ref",
    "router_from_spec",
    "router_kinds",
    "tool",
]
