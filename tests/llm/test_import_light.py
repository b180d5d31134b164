"""`import agentlab` and simulated calls never import litellm (or ray)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys, asyncio
import agentlab
from agentlab.llm import LLMClient
c = agentlab.LLMClient("sim/instant", seed=0)
r = asyncio.run(c.complete([{"role": "user", "content": "hi"}]))
assert r.text
heavy = [m for m in ("litellm", "ray", "duckdb", "plotly", "aiohttp") if m in sys.modules]
print("HEAVY", heavy)
"""


def test_sim_path_does_not_import_litellm_or_ray() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout, out.stdout
