"""Guards on the installed environment and on import cost."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys


def test_rfc3987_syntax_not_installed() -> None:
    # It makes `import ray` ~7 s slower and ray.init() time out here (ray-project/ray#65983);
    # `make setup` removes it as its last step. If this fails, a later install brought it back.
    assert importlib.util.find_spec("rfc3987_syntax") is None


HEAVY = [
    "litellm",
    "ray",
    "duckdb",
    "plotly",
    "anywidget",
    "ipywidgets",
    "jupyter_client",
    "papermill",
    "pandas",
    "scipy",
    "ipykernel",
]


def test_import_agentlab_is_light() -> None:
    code = (
        "import sys, json, agentlab, agentlab.core, agentlab.errors;"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_public_names_resolve() -> None:
    import agentlab

    missing = []
    for name in agentlab.__all__:
        try:
            getattr(agentlab, name)
        except (ImportError, AttributeError) as exc:  # report all at once
            missing.append(f"{name}: {exc}")
    assert not missing, missing


def test_subpackages_are_attributes_after_a_plain_import() -> None:
    """``agentlab.datasets.path("reference_run")`` after ``import agentlab`` alone, as
    notebook 05 and the docs write it (it was an AttributeError), each subpackage
    imported only when first reached."""
    code = (
        "import sys, json, agentlab;"
        "before = 'agentlab.datasets' in sys.modules;"
        "p = agentlab.datasets.path('reference_run');"
        "print(json.dumps([before, p.is_dir(), 'datasets' in dir(agentlab),"
        " agentlab.analysis.__name__]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [False, True, True, "agentlab.analysis"]
