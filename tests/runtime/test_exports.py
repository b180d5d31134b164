"""Every exported name imports; the runtime and agents packages stay light (no Ray/litellm)."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys

import pytest


@pytest.mark.parametrize("package", ["agentlab.agents", "agentlab.runtime"])
def test_every_exported_name_imports(package: str) -> None:
    mod = importlib.import_module(package)
    for name in mod.__all__:
        if name == "AgentSystem" and importlib.util.find_spec("agentlab.runtime.threads") is None:
            continue  # lives in agentlab.runtime.threads (another module), lazily re-exported
        assert getattr(mod, name) is not None, name


def test_runtime_import_is_light() -> None:
    code = (
        "import sys, agentlab.runtime, agentlab.agents, agentlab.demo, agentlab.runtime.cli_run\n"
        "bad = [m for m in ('ray', 'litellm', 'duckdb', 'plotly') if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
