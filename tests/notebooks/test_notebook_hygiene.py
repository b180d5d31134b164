"""Static checks of the shipped notebooks: no outputs, one parameters cell, thin, documented."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from agentlab.sweep.nbclean import has_outputs

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
EXPECTED = [
    "01_quickstart.ipynb",
    "02_topology_traffic.ipynb",
    "03_werewolf.ipynb",
    "04_sweep_agent_count.ipynb",
    "05_replay_analysis.ipynb",
]
#: More statements than this in one cell is logic that belongs in the package (house style:
#: "notebooks stay thin"). Imports do not count; a call spread over lines is one statement.
MAX_STATEMENTS = 15
#: "about 30 s", "1–3 minutes", "10 seconds": the first cell must say how long it takes.
_DURATION = re.compile(r"\d+\s*(?:[–-]\s*\d+\s*)?(?:s|sec|seconds?|min|minutes?)\b", re.I)


def _notebooks() -> list[Path]:
    return sorted(NOTEBOOKS_DIR.glob("*.ipynb"))


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def test_every_expected_notebook_is_shipped() -> None:
    names = {p.name for p in _notebooks()}
    missing = [n for n in EXPECTED if n not in names]
    assert not missing, f"notebooks missing from {NOTEBOOKS_DIR}: {missing}"


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.name)
def test_committed_without_outputs(path: Path) -> None:
    nb = _load(path)
    assert not has_outputs(nb), f"run: python -m agentlab.sweep.nbclean {path}"
    assert "widgets" not in nb.get("metadata", {}), "widget state must not be committed"


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.name)
def test_every_cell_has_its_own_id(path: Path) -> None:
    """nbformat 4.5 cell ids: a cell without one is a validation warning today (a hard
    error in later nbformat), two alike break links to a cell."""
    ids = [c.get("id") for c in _load(path)["cells"]]
    assert None not in ids, f"cells without an id: {[i for i, x in enumerate(ids) if x is None]}"
    assert len(set(ids)) == len(ids), "duplicate cell ids"


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.name)
def test_exactly_one_parameters_cell_of_literals(path: Path) -> None:
    cells = [c for c in _code_cells(_load(path)) if "parameters" in c["metadata"].get("tags", [])]
    assert len(cells) == 1, f"{path.name}: {len(cells)} cells tagged 'parameters'"
    tree = ast.parse(_source(cells[0]))
    assert tree.body, "the parameters cell is empty"
    for stmt in tree.body:
        # papermill injects a new cell after this one: plain `name = literal` lines only,
        # so every parameter can be overridden from the command line.
        assert isinstance(stmt, ast.Assign) and len(stmt.targets) == 1, ast.unparse(stmt)
        assert isinstance(stmt.targets[0], ast.Name), ast.unparse(stmt)
        ast.literal_eval(stmt.value)


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.name)
def test_first_cell_says_what_and_how_long(path: Path) -> None:
    first = _load(path)["cells"][0]
    text = _source(first)
    assert first["cell_type"] == "markdown" and text.startswith("# "), "start with a title"
    assert len(text.split()) >= 20, "say what the notebook shows"
    assert _DURATION.search(text), "say how long the notebook takes (e.g. 'about 30 s')"


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.name)
def test_code_cells_are_thin_and_valid_python(path: Path) -> None:
    for cell in _code_cells(_load(path)):
        src = _source(cell)
        # top-level await is fine in a kernel; compile with the flag that allows it
        tree = compile(
            src, path.name, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
        logic = [
            n for n in ast.walk(tree)
            if isinstance(n, ast.stmt) and not isinstance(n, ast.Import | ast.ImportFrom)
        ]  # fmt: skip
        assert len(logic) <= MAX_STATEMENTS, (
            f"{path.name}: move this logic into the package:\n{src}"
        )


def _figure_call(node: ast.stmt) -> bool:
    """``record_figure(...)`` / ``x_figure(...)`` as a bare statement (a value dropped)."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    fn = node.value.func
    name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
    return name.endswith("_figure")


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.name)
def test_a_figure_made_in_a_cell_is_shown(path: Path) -> None:
    """A figure built as a statement before a cell's last line is recorded but never drawn:
    notebook 02's prose pointed readers at a lengths figure its paper did not show."""
    for cell in _code_cells(_load(path)):
        tree = compile(_source(cell), path.name, "exec",
                       flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)  # fmt: skip
        dropped = [ast.unparse(n) for n in tree.body[:-1] if _figure_call(n)]  # type: ignore[attr-defined]
        assert not dropped, f"{path.name} cell {cell.get('id')}: shown nowhere: {dropped}"


def test_readme_lists_every_notebook() -> None:
    text = (NOTEBOOKS_DIR / "README.md").read_text()
    for path in _notebooks():
        assert path.name in text, f"notebooks/README.md does not mention {path.name}"


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.name)
def test_committed_text_is_what_the_clean_filter_writes(path: Path) -> None:
    from agentlab.sweep.nbclean import canonical, strip_outputs

    raw = path.read_text()
    assert canonical(strip_outputs(json.loads(raw))) == raw, (
        f"{path.name} is not in the clean filter's form: run python -m agentlab.sweep.nbclean "
        "--filter < NB > tmp && mv tmp NB"
    )


def test_git_clean_filter_keeps_the_tree_clean_after_a_run(tmp_path: Path) -> None:
    """A repo set up as ``make setup`` does: executing a notebook in place (outputs, widget
    state, papermill and JupyterLab metadata saved) is no change to git (``git diff`` is
    empty, which is what the run manifest's ``git.dirty`` checks; ``git status`` lists the
    file until the next ``git add`` because its size changed), and what git stores has no
    outputs."""
    import shutil
    import subprocess
    import sys

    repo = REPO_ROOT
    if shutil.which("git") is None:
        pytest.skip("git not installed")

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True
        ).stdout

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    # what `make setup` configures, with this interpreter instead of .venv/bin/python
    git("config", "filter.agentlab-nbstrip.clean", f"{sys.executable} -m agentlab.sweep.nbclean --filter")  # fmt: skip
    git("config", "filter.agentlab-nbstrip.smudge", "cat")
    shutil.copy(repo / ".gitattributes", tmp_path / ".gitattributes")
    nb_path = tmp_path / "quick.ipynb"
    shutil.copy(NOTEBOOKS_DIR / "01_quickstart.ipynb", nb_path)
    git("add", "-A")
    git("commit", "-qm", "init")
    nb = json.loads(nb_path.read_text())
    for i, c in enumerate(_code_cells(nb)):
        c["execution_count"] = i + 1
        c["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "ran\n"}]
        c["metadata"]["execution"] = {"iopub.status.idle": "2026-12-01T09:00:00Z"}
        c["metadata"].setdefault("tags", [])  # what papermill adds
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {}}
    nb["metadata"]["language_info"] = {"name": "python", "version": "3.11.7"}
    nb["metadata"]["papermill"] = {"duration": 3.2}
    # JupyterLab writes its installed kernel's display name on open, and its own key order
    nb["metadata"]["kernelspec"] = {"name": "python3", "language": "python",
                                    "display_name": "Python 3 (ipykernel)"}  # fmt: skip
    nb_path.write_text(json.dumps(nb, indent=2))
    assert git("diff", "--name-only", "HEAD") == ""  # no change, although the file changed
    git("add", "-u")
    assert git("status", "--porcelain") == ""
    # a new notebook saved with outputs is stored without them
    (tmp_path / "new.ipynb").write_text(json.dumps(nb))
    git("add", "new.ipynb")
    assert git("show", ":new.ipynb") == (NOTEBOOKS_DIR / "01_quickstart.ipynb").read_text()
