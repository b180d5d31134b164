"""guidellm and aiperf (chat and text completions), the openai SDK and litellm, unmodified,
against ``agentlab sim-serve`` (benchmarks/peer_clients.py): every request answered, 256
output tokens asked -> 256 delivered, the server's prompt count exactly the Llama-3 count of
the prompt sent.

Installs the peer tools on first use (``scripts/peer_tools.sh``: own venvs under
``.venv-peers/``, reused afterwards). An install failure fails the test: it never skips.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_peer_clients_get_the_lengths_they_ask_for(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    # all six clients (--quick runs four), 8 requests of 256 tokens each
    cmd = [sys.executable, str(ROOT / "benchmarks" / "peer_clients.py"), "--requests", "8"]
    cmd += ["--json", str(out), "--keep", str(tmp_path / "reports")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1100)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["tool"]: r for r in json.loads(out.read_text())["rows"]}
    completions = ("guidellm completions", "aiperf completions")
    assert set(rows) == {"guidellm", "aiperf", *completions, "openai SDK", "litellm"}
    for tool, r in rows.items():
        assert r["errors"] == 0 and r["ok"] >= 2, tool
        assert r["server_output_tokens"]["min"] == r["server_output_tokens"]["max"] == 256, tool
        assert 256 <= r["output_tokens"]["median"] <= 257, tool
    # aiperf's own checks: no output-length mismatch, usage agrees with its counts
    for tool in ("aiperf", "aiperf completions"):
        assert rows[tool]["osl_mismatch_count"] == 0, tool
        assert rows[tool]["usage_discrepancy_count"] == 0, tool
    # the prompt as the server counts it: exactly the Llama-3 count of each prompt sent,
    # chat template included (35 tokens of Llama 3.2's template around one user message)
    for tool, r in rows.items():
        assert r["server_prompt_exact"] == r["ok"], tool
    from agentlab.llm.tokens import count_prompt_tokens

    template = count_prompt_tokens([{"role": "user", "content": ""}], tokenizer="llama3")
    for tool in ("guidellm", "aiperf", "openai SDK"):
        assert rows[tool]["server_prompt_tokens"]["median"] == 1024 + template, tool
    # /v1/completions: the raw prompt and <|begin_of_text|>, no template (as vLLM encodes it)
    for tool in completions:
        assert rows[tool]["server_prompt_tokens"]["median"] == 1024 + 1, tool
