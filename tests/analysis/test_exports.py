from __future__ import annotations

import ast
from pathlib import Path

import agentlab.analysis as analysis

HEAVY = {"plotly", "ray", "litellm", "duckdb", "anywidget", "ipywidgets"}


def test_every_exported_name_resolves():
    for name in analysis.__all__:
        assert getattr(analysis, name) is not None, name


def test_heavy_libraries_only_imported_inside_functions():
    # static check (a subprocess import costs tens of seconds on a loaded 2-core box)
    offenders = []
    for path in Path(analysis.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:  # module level only; function bodies are lazy
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            else:
                continue
            offenders += [f"{path.name}: {m}" for m in mods if m.split(".")[0] in HEAVY]
    assert offenders == []
