"""What the sim-serve HTTP tests share: a request body, a tool, a schema, one server.

One place, so the litellm, lean-transport and fault tests talk to the same server setup.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import BaseModel

from agentlab.llm.sim_serve import SimServeHandle, start_sim_server

MSGS = [{"role": "user", "content": "say something"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "post",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        },
    }
]


class Vote(BaseModel):
    agree: bool
    score: int


@contextmanager
def quick_vllm_server() -> Iterator[SimServeHandle]:
    """An in-process ``vllm-3b`` sim-serve: 0.2 s queue-free TTFT, fast decode (short waits)."""
    with start_sim_server("vllm-3b", seed=0, overhead_s=0.2, decode_tps=400) as h:
        yield h


def free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return int(sk.getsockname()[1])
