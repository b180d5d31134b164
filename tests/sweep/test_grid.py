from __future__ import annotations

from pathlib import Path

import pytest

from agentlab.errors import ConfigError
from agentlab.sweep import expand_grid, parse_param_args, point_id


def test_cartesian_order_and_ids() -> None:
    pts = expand_grid({"topology": ["seq", "star"], "agents": [3, 4, 5]})
    assert len(pts) == 6
    assert pts[0] == {"topology": "seq", "agents": 3}
    assert pts[1] == {"topology": "seq", "agents": 4}
    assert pts[-1] == {"topology": "star", "agents": 5}
    ids = [point_id(p) for p in pts]
    assert len(set(ids)) == 6
    # stable across calls and independent of key order
    assert point_id({"agents": 3, "topology": "seq"}) == ids[0]
    assert ids[0].startswith("agents=3_topology=seq-")


def test_list_of_dicts_kept() -> None:
    pts = expand_grid([{"a": 1}, {"a": 2, "b": "x"}])
    assert pts == [{"a": 1}, {"a": 2, "b": "x"}]


@pytest.mark.parametrize(
    "bad",
    [{"a": 3}, {"a": []}, {"a": "abc"}, [{"a": 1}, {"a": 1}], 42, [1, 2]],
)
def test_bad_grids_raise(bad: object) -> None:
    with pytest.raises(ConfigError):
        expand_grid(bad)  # type: ignore[arg-type]


def test_parse_param_args_types() -> None:
    got = parse_param_args(["topology=sequential,star", "agents=3,4", "p=0.5", "flag=true"])
    assert got == {"topology": ["sequential", "star"], "agents": [3, 4], "p": [0.5], "flag": [True]}
    assert parse_param_args(["n=3"], multi=False) == {"n": 3}
    with pytest.raises(ConfigError, match="NAME=VALUE"):
        parse_param_args(["oops"])
    with pytest.raises(ConfigError, match="identifier"):
        parse_param_args(["1x=3"])


def test_param_values_are_yaml() -> None:
    got = parse_param_args(
        [
            'topologies=["a","b"],["c"]',  # top-level commas separate values
            "agents=[3, 4]",
            "seed=0",
            "name=star",
            "cfg={k: 1}",
        ]
    )
    assert got == {
        "topologies": [["a", "b"], ["c"]],
        "agents": [3, 4],
        "seed": [0],
        "name": ["star"],
        "cfg": [{"k": 1}],
    }
    single = parse_param_args(["topologies=[a, b]", "p=0.5", "off=null"], multi=False)
    assert single == {"topologies": ["a", "b"], "p": 0.5, "off": None}


def test_params_file(tmp_path) -> None:
    from agentlab.sweep.grid import load_params_file

    f = tmp_path / "p.yaml"
    f.write_text("agents: [3, 4]\nseed: 0\ntopologies: [[a, b], [c]]\n")
    assert load_params_file(str(f)) == {
        "agents": [3, 4],
        "seed": [0],
        "topologies": [["a", "b"], ["c"]],
    }
    assert load_params_file(str(f), multi=False)["seed"] == 0
    f.write_text("- not a mapping\n")
    with pytest.raises(ConfigError, match="must map parameter names"):
        load_params_file(str(f))


def test_unknown_notebook_parameter_is_an_error(tmp_path) -> None:
    import json

    from agentlab.sweep import sweep
    from agentlab.sweep.paper import make_paper

    nb = tmp_path / "nb.ipynb"
    cell = {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "agents = 3\n",
            "outputs": [], "execution_count": None, "id": "p"}  # fmt: skip
    nb.write_text(
        json.dumps(
            {
                "cells": [cell],
                "nbformat": 4,
                "nbformat_minor": 5,
                "metadata": {
                    "kernelspec": {
                        "name": "python3",
                        "display_name": "Python 3",
                        "language": "python",
                    }
                },
            }
        )
    )
    with pytest.raises(ConfigError, match=r"unknown parameter\(s\) agnets .*valid: agents"):
        sweep(nb, {"agnets": [3]}, out=tmp_path / "s", executor="local")
    with pytest.raises(ConfigError, match=r"unknown parameter\(s\) tick"):
        make_paper(nb, tmp_path / "p", {"tick": 2})
    assert not (tmp_path / "s").exists() and not (tmp_path / "p").exists()


def _notebook(tmp_path, source: str):  # type: ignore[no-untyped-def]
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}  # fmt: skip
    nb.cells = [nbformat.v4.new_code_cell(source, metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("print(1)")]  # fmt: skip
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, str(path))
    return path


def test_every_parameter_of_the_shipped_notebooks_is_known() -> None:
    """papermill's line regex dropped notebook 05's ``run_dir`` (its comment holds ``""``)
    and notebook 03's ``players``: ``agentlab paper notebooks/05_replay_analysis.ipynb -p
    run_dir=...`` was refused as an unknown parameter."""
    from pathlib import Path

    from agentlab.sweep.grid import check_params, notebook_defaults

    nbs = Path(__file__).resolve().parents[2] / "notebooks"
    assert notebook_defaults(nbs / "05_replay_analysis.ipynb")["run_dir"] == ""
    assert notebook_defaults(nbs / "03_werewolf.ipynb")["players"] == 7
    check_params(nbs / "05_replay_analysis.ipynb", ["run_dir", "agents"])
    with pytest.raises(ConfigError, match=r"unknown parameter\(s\) run_dri .*valid: agents"):
        check_params(nbs / "05_replay_analysis.ipynb", ["run_dri"])


def test_parameters_are_read_as_python_reads_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from agentlab.sweep.grid import notebook_defaults

    path = _notebook(tmp_path, (
        'name = ""  # "" = the default, \'quoted\' = ok\n'
        "grid = [\n    1,\n    2,\n]  # over lines\n"
        "rate: float = 0.5\n"
        "out = Path('x') / 'y'  # not a literal: its source\n"
        "a = b = 3\n"
    ))  # fmt: skip
    assert notebook_defaults(path) == {"name": "", "grid": [1, 2], "rate": 0.5,
                                       "out": "Path('x') / 'y'", "a": 3, "b": 3}  # fmt: skip
    # a cell only IPython parses (a magic) goes to papermill's reader
    magic = _notebook(tmp_path, "%matplotlib inline\nticks = 3\n")
    assert notebook_defaults(magic) == {"ticks": 3}


@pytest.mark.parametrize(
    "first",
    ["", "from agentlab import record", "import agentlab.sweep.summary",
     "from agentlab.sweep import current_output_dir", "import agentlab; agentlab.sweep"],
)  # fmt: skip
def test_agentlab_sweep_is_the_function_and_the_package_whatever_came_first(first: str) -> None:
    """``agentlab.sweep`` names a package and its function: the first import decided which
    one the name was. After ``from agentlab import record`` (a notebook's first cell),
    ``from agentlab import sweep; sweep(...)`` raised "'module' object is not callable";
    otherwise ``agentlab.sweep.current_output_dir()`` (as the docs write it) was an
    attribute of a function. Fresh interpreters: import order is the point."""
    import subprocess
    import sys

    code = (f"{first}\nimport inspect, agentlab\nfrom agentlab import sweep\n"
            "assert callable(sweep) and callable(agentlab.sweep)\n"
            "assert agentlab.sweep.current_output_dir and sweep.Sweep and sweep.open_sweep\n"
            "assert 'grid' in inspect.signature(sweep).parameters\n"
            "from agentlab import *\nassert callable(sweep)\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-1500:]


def test_calling_the_package_runs_a_sweep(tmp_path: Path) -> None:
    import agentlab

    with pytest.raises(ConfigError, match="does not exist"):  # (the function's own check)
        agentlab.sweep(tmp_path / "nb.ipynb", {}, out=tmp_path / "out")
