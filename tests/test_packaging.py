"""Dependencies that say the truth, and a wheel that works as installed.

* every third-party module ``agentlab/`` imports is declared (core or an extra), every
  declared dependency is imported (or listed below with why not), and only ``agentlab.viz``
  imports an extra's module at import time;
* (slow) the built wheel, installed into clean venvs without extras and with ``[viz]``:
  ``agentlab demo``, ``agentlab report --html`` (a one-line install hint without ``viz``)
  and ``import agentlab.viz``.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from agentlab.errors import EXTRA_MODULES, install_hint

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "agentlab"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

#: declared, deliberately never imported by agentlab/
NOT_IMPORTED = {
    "ipykernel": "the kernel papermill runs sweep notebooks in",
    "jupyterlab": "the application (`lab` extra), never imported",
}
#: extras whose modules agentlab may import (dev holds only tools and test libraries)
SHIPPED_EXTRAS = ("ray", "viz", "lab", "sweep", "otlp", "search-vectors")
#: subpackages allowed to import their extra's modules at module level
TOP_LEVEL_EXTRA = {"viz": "viz"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _req_name(req: str) -> str:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    assert m, req
    return _norm(m.group(1))


def _declared() -> dict[str, set[str]]:
    """``{"core" | extra: {distribution}}`` (self-references like ``agentlab[viz]`` skipped)."""
    project = PYPROJECT["project"]
    out = {"core": {_req_name(r) for r in project["dependencies"]}}
    for extra, reqs in project["optional-dependencies"].items():
        out[extra] = {_req_name(r) for r in reqs if _req_name(r) != "agentlab"}
    return out


def _imports() -> dict[str, list[tuple[Path, bool]]]:
    """Third-party top-level module → [(file, imported at module level)]."""
    out: dict[str, list[tuple[Path, bool]]] = {}
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        top_level = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("agentlab", "__future__"):
                    continue
                out.setdefault(top, []).append((path, id(node) in top_level))
    return out


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return md.packages_distributions()


@functools.cache
def _imports_cached() -> dict[str, list[tuple[Path, bool]]]:
    return _imports()


def _dists(module: str) -> set[str]:
    found = _distributions().get(module)
    assert found, f"{module!r} is imported by agentlab but no installed distribution provides it"
    return {_norm(d) for d in found}


def test_imports_match_declared_dependencies() -> None:
    declared = _declared()
    shipped = declared["core"].union(*(declared[e] for e in SHIPPED_EXTRAS))
    imports = _imports_cached()
    undeclared = {
        m: sorted({str(p.relative_to(ROOT)) for p, _ in where})
        for m, where in imports.items()
        if not _dists(m) & shipped
    }
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
    imported = set().union(*(_dists(m) for m in imports))
    unused = sorted(d for d in shipped if d not in imported and d not in NOT_IMPORTED)
    assert not unused, f"declared but never imported by agentlab/: {unused}"
    assert set(NOT_IMPORTED) <= shipped, "NOT_IMPORTED names a package no longer declared"


def test_only_viz_imports_an_extra_at_import_time() -> None:
    """``import agentlab`` (and every module but the widgets) works without any extra."""
    declared = _declared()
    bad = []
    for module, where in _imports_cached().items():
        if _dists(module) & declared["core"]:
            continue
        for path, top in where:
            sub = path.relative_to(PKG).parts[0]
            if top and not (_dists(module) & declared.get(TOP_LEVEL_EXTRA.get(sub, ""), set())):
                bad.append(f"{path.relative_to(ROOT)}: import {module}")
    assert not bad, "module-level imports of an extra's package outside its subpackage: " + str(bad)


def test_jupyterlab_is_not_a_viz_dependency() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert "jupyterlab" not in {_req_name(r) for r in extras["viz"]}
    assert "jupyterlab" in {_req_name(r) for r in extras["lab"]}


# --- the wheel, installed ---------------------------------------------------------------


def _uv() -> str:
    uv = Path(sys.executable).parent / "uv"
    found = str(uv) if uv.exists() else shutil.which("uv")
    if found is None:
        pytest.skip("uv is not installed (make setup installs it into .venv)")
    return found


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_wheel_installs_and_runs_without_and_with_viz(tmp_path: Path) -> None:
    uv = _uv()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    built = _run([uv, "build", "--wheel", "-o", str(tmp_path / "dist"), str(ROOT)], ROOT, env)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("agentlab-*.whl")
    work = tmp_path / "work"  # outside the checkout: nothing of it is importable there
    work.mkdir()
    venvs = {}
    for name, spec in (("bare", str(wheel)), ("viz", f"agentlab[viz] @ {wheel.as_uri()}")):
        venv = tmp_path / name
        made = _run([uv, "venv", "-q", "-p", sys.executable, str(venv)], work, env)
        assert made.returncode == 0, made.stderr
        py = str(venv / "bin" / "python")
        inst = _run([uv, "pip", "install", "-q", "--python", py, spec], work, env)
        assert inst.returncode == 0, inst.stderr
        venvs[name] = venv / "bin"

    bare = venvs["bare"]
    demo = _run([str(bare / "agentlab"), "demo", "--out", "run", "--agents", "5", "--ticks", "1"],
                work, env)  # fmt: skip
    assert demo.returncode == 0, demo.stderr
    assert "notebooks/05" not in demo.stdout  # a wheel has no notebooks folder
    assert "pip install 'agentlab[viz,lab]'" in demo.stdout  # what opening it needs
    rep = _run([str(bare / "agentlab"), "report", "run", "--html", "r.html"], work, env)
    assert rep.returncode == 2 and "Traceback" not in rep.stderr, rep.stderr
    assert "pip install 'agentlab[viz]'" in rep.stderr and not (work / "r.html").exists()
    imp = _run([str(bare / "python"), "-c", "import agentlab.viz"], work, env)
    assert imp.returncode == 1 and "MissingExtraError" in imp.stderr, imp.stderr
    assert "pip install 'agentlab[viz]'" in imp.stderr and "ModuleNotFoundError" not in imp.stderr
    # Parquet export needs no pyarrow (DuckDB writes it); read back with DuckDB alone
    exp = _run([str(bare / "agentlab"), "export", "run", "--parquet", "pq"], work, env)
    assert exp.returncode == 0, exp.stderr
    code = (
        "import duckdb; con = duckdb.connect(); "
        "print(con.execute(\"select count(*) from 'pq/llm_calls.parquet'\").fetchone()[0])"
    )
    n = _run([str(bare / "python"), "-c", code], work, env)
    assert n.returncode == 0 and int(n.stdout) > 0, n.stderr

    viz = venvs["viz"]
    rep = _run([str(viz / "agentlab"), "report", "run", "--html", "r.html"], work, env)
    assert rep.returncode == 0, rep.stderr
    assert "plotly" in (work / "r.html").read_text() and (work / "plotly.min.js").is_file()
    code = "import agentlab, agentlab.viz; print(agentlab.show is agentlab.viz.show)"
    imp = _run([str(viz / "python"), "-c", code], work, env)
    assert imp.returncode == 0 and imp.stdout.strip() == "True", imp.stderr
    lab = _run([str(viz / "python"), "-c", "import jupyterlab"], work, env)
    assert lab.returncode != 0  # the widgets do not pull JupyterLab in


def test_extra_modules_match_pyproject() -> None:
    """``EXTRA_MODULES`` (what the install hints are built from) names each extra module
    agentlab imports, with the extra that declares its distribution."""
    declared = _declared()
    for module in _imports_cached():
        dists = _dists(module)
        if dists & declared["core"]:
            assert module not in EXTRA_MODULES, module
            continue
        assert module in EXTRA_MODULES, f"{module} comes with an extra: add it to EXTRA_MODULES"
        assert dists & declared[EXTRA_MODULES[module]], (module, EXTRA_MODULES[module])


@pytest.mark.parametrize(
    ("hidden", "argv", "extra"),
    [
        ("plotly", ["report", "{run}", "--html", "{tmp}/r.html"], "viz"),
        ("papermill", ["sweep", "{nb}", "-p", "x=1,2", "--out", "{tmp}/sw"], "sweep"),
    ],
)
def test_cli_names_the_missing_extra(
    hidden: str,
    argv: list[str],
    extra: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from agentlab.cli import main

    run = tmp_path / "run"
    (run / "replay").mkdir(parents=True)
    nb = ROOT / "notebooks" / "05_replay_analysis.ipynb"
    monkeypatch.setitem(sys.modules, hidden, None)  # `import <hidden>` now fails
    args = [a.format(run=run, tmp=tmp_path, nb=nb) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"agentlab {argv[0]}: error: agentlab {argv[0]}")
    assert f"needs the {extra!r} extra (no module {hidden!r})" in err
    assert install_hint(extra) in err and "Traceback" not in err
    assert not (tmp_path / "r.html").exists()


def test_import_viz_without_the_extra_says_how_to_install() -> None:
    code = "import sys; sys.modules['anywidget'] = None; import agentlab.viz"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("agentlab.errors.MissingExtraError: agentlab.viz"), res.stderr
    assert install_hint("viz") in last and "ModuleNotFoundError" not in res.stderr
