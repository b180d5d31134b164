"""The pre-save hook that keeps a reopened notebook's widget state (ipywidgets#3888), on a
real Jupyter server contents manager."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentlab.sweep.widget_state import STATE, VIEW, keep_widget_state, shown_models

pytest.importorskip("jupyter_server")


def _model(mid: str, layout: str) -> dict[str, Any]:
    return {"model_name": "AnyModel", "model_module": "anywidget", "model_module_version": "~0.9.*",
            "state": {"layout": f"IPY_MODEL_{layout}", "status": "done"}}  # fmt: skip


def _nb(shown: list[str], state: dict[str, Any] | None) -> dict[str, Any]:
    outputs = [{"output_type": "display_data", "metadata": {},
                "data": {"text/plain": "View", VIEW: {"version_major": 2, "version_minor": 0,
                                                      "model_id": m}}} for m in shown]  # fmt: skip
    meta: dict[str, Any] = {"kernelspec": {"name": "python3", "display_name": "Python 3"}}
    if state is not None:
        meta["widgets"] = {STATE: {"version_major": 2, "version_minor": 0, "state": state}}
    cell = {"cell_type": "code", "execution_count": 1, "id": "c0", "metadata": {},
            "source": "show(run)", "outputs": outputs}  # fmt: skip
    return {"cells": [cell], "metadata": meta, "nbformat": 4, "nbformat_minor": 5}


def _saved_state(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())["metadata"].get("widgets", {}).get(STATE, {}).get("state")


@pytest.mark.parametrize("manager", ["FileContentsManager", "AsyncFileContentsManager"])
def test_a_reopened_notebook_saved_again_keeps_the_state_of_what_it_shows(
    tmp_path: Path, manager: str
) -> None:
    from jupyter_server.services.contents import filemanager

    cm = getattr(filemanager, manager)(root_dir=str(tmp_path))
    cm.register_pre_save_hook(keep_widget_state)

    def save(nb: dict[str, Any]) -> None:
        out = cm.save({"type": "notebook", "format": "json", "content": nb}, "explore.ipynb")
        if asyncio.iscoroutine(out):
            asyncio.run(out)

    full = {"v1": _model("v1", "l1"), "l1": {"model_name": "LayoutModel", "state": {}},
            "old": _model("old", "l2"), "l2": {"model_name": "LayoutModel", "state": {}}}  # fmt: skip
    save(_nb(["v1"], full))  # the live save: every model has a comm
    # reopened with a fresh kernel: the front end saves only models with a live comm, none
    save(_nb(["v1"], {}))
    # what the output shows and its layout are kept; a model no output shows is not
    assert set(_saved_state(tmp_path / "explore.ipynb")) == {"v1", "l1"}
    assert _saved_state(tmp_path / "explore.ipynb")["v1"] == full["v1"]
    # the cell re-run: a new live model, saved by the front end; the old one is not kept
    save(_nb(["v2"], {"v2": _model("v2", "l3"), "l3": {"model_name": "LayoutModel"}}))
    assert set(_saved_state(tmp_path / "explore.ipynb")) == {"v2", "l3"}
    # widget state saving off in the front end (no metadata.widgets at all): kept as well
    save(_nb(["v2"], None))
    assert set(_saved_state(tmp_path / "explore.ipynb")) == {"v2", "l3"}


def test_no_widget_outputs_no_change_and_a_new_file_is_left_alone(tmp_path: Path) -> None:
    from jupyter_server.services.contents.filemanager import FileContentsManager

    cm = FileContentsManager(root_dir=str(tmp_path))
    plain = _nb([], None)
    model = {"type": "notebook", "content": json.loads(json.dumps(plain))}
    keep_widget_state(model, "plain.ipynb", cm)
    assert model["content"] == plain and shown_models(plain) == set()
    new = _nb(["v9"], {})  # shows a model nobody saved: nothing to put back
    model = {"type": "notebook", "content": new}
    keep_widget_state(model, "new.ipynb", cm)
    assert model["content"]["metadata"]["widgets"][STATE]["state"] == {}
    # ... so its view goes and the output shows its other form, not "model not found"
    assert model["content"]["cells"][0]["outputs"][0]["data"] == {"text/plain": "View"}
    keep_widget_state({"type": "file", "content": "text"}, "a.txt", cm)  # not a notebook


def test_a_notebook_first_saved_after_a_kernel_restart_shows_its_snapshots(
    tmp_path: Path,
) -> None:
    """The restart's restored models have no comm, so the front end saves no state, and no
    earlier save holds one: JupyterLab would reopen each view as "Error displaying widget:
    model not found" (the view outranks the snapshot beside it)."""
    from jupyter_server.services.contents.filemanager import FileContentsManager

    cm = FileContentsManager(root_dir=str(tmp_path))
    cm.register_pre_save_hook(keep_widget_state)
    nb = _nb(["live", "other", "bare"], {"other": _model("other", "l1"), "l1": {}})
    outputs = nb["cells"][0]["outputs"]
    outputs[0]["data"]["text/html"] = "<div>SocietyView: done, tick 5</div>"
    del outputs[2]["data"]["text/plain"]  # a view with nothing else to show
    cm.save({"type": "notebook", "format": "json", "content": nb}, "restarted.ipynb")
    saved = json.loads((tmp_path / "restarted.ipynb").read_text())
    data = [o["data"] for o in saved["cells"][0]["outputs"]]
    joined = {k: "".join(v) for k, v in data[0].items()}  # (nbformat splits text in lines)
    assert joined == {"text/plain": "View", "text/html": "<div>SocietyView: done, tick 5</div>"}
    assert VIEW in data[1] and set(_saved_state(tmp_path / "restarted.ipynb")) == {"other", "l1"}
    assert set(data[2]) == {VIEW}  # kept: JupyterLab's error names what is missing
    assert shown_models(saved) == {"other", "bare"}


def test_the_extension_is_installed_enabled() -> None:
    """``make setup`` installs ``etc/jupyter/jupyter_server_config.d/agentlab.json``."""
    from jupyter_core.paths import jupyter_config_path
    from jupyter_server.extension.config import ExtensionConfigManager
    from jupyter_server.extension.manager import ExtensionManager

    mgr = ExtensionManager(config_manager=ExtensionConfigManager(
        read_config_path=[p for p in jupyter_config_path()]))  # fmt: skip
    mgr.from_config_manager(mgr.config_manager)
    assert "agentlab.sweep.widget_state" in mgr.extensions
    assert mgr.extensions["agentlab.sweep.widget_state"].enabled
