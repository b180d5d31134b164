"""What the sim-serve HTTP tests share: a request body, a tool, a schema, one server.

One place, so the litellm, lean-transport and fault tests talk to the same server setup.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
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


def sim_serve_process(
    profile: str, *extra: str, port: int | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """``agentlab sim-serve --profile PROFILE *EXTRA`` in its own process, once it answers
    ``/health``: the process and its base URL. ``port``: a given one (a server restarted
    on the same address), else a free one. The caller stops the process."""
    port = free_port() if port is None else port
    cmd = [sys.executable, "-m", "agentlab.cli", "sim-serve", "--profile", profile]
    proc = subprocess.Popen([*cmd, "--port", str(port), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"sim-serve did not start on {url}")
