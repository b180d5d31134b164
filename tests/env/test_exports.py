"""Every name exported by agentlab.env and agentlab.datasets resolves."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("module", ["agentlab.env", "agentlab.datasets"])
def test_all_exports_resolve(module: str) -> None:
    mod = importlib.import_module(module)
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert missing == []
    assert len(mod.__all__) == len(set(mod.__all__))
