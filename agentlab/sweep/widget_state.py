"""Saved notebooks keep their widgets: a Jupyter server pre-save hook (a server extension).

JupyterLab's widget manager (``jupyterlab_widgets`` 3.0, with ``saveState`` on, as
``agentlab.json`` in ``overrides.d`` sets it) writes ``metadata.widgets`` on every save
from the widget models that have a *live comm* only. A notebook reopened with a fresh
kernel draws its widgets from that saved state, but those restored models have no comm:
the next save writes a state without them, and the reopen after that shows "Error
displaying widget: model not found" (ipywidgets#3888, open upstream; found by
``scripts/newcomer.py``: run, save, reopen, save, reopen).

:func:`keep_widget_state` runs before each notebook save: every model an output of the
notebook being saved still shows (``application/vnd.jupyter.widget-view+json``) that the
new state lacks is taken from the file being replaced, with the models it refers to
(``IPY_MODEL_<id>``: layouts, styles, children). A re-run cell shows a new model, so its
old one is not kept; a notebook without widget outputs is saved untouched and costs one
scan of its outputs. A model with no state anywhere (a notebook first saved after a kernel
restart) loses its view in the saved output, which then shows its ``text/html`` snapshot. Installed enabled (``etc/jupyter/jupyter_server_config.d/agentlab.json``);
turn it off with ``jupyter server extension disable agentlab.sweep.widget_state``.

The extension also makes JupyterLab's HTML export (the server's nbconvert) prefer an
output's ``text/html`` to its widget view (:data:`SNAPSHOT_FIRST`), so an exported notebook
shows agentlab widgets' snapshots offline instead of blank widget-manager placeholders.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

__all__ = ["keep_widget_state", "shown_models"]

STATE = "application/vnd.jupyter.widget-state+json"
VIEW = "application/vnd.jupyter.widget-view+json"
REF = "IPY_MODEL_"


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": __name__}]


#: nbconvert's HTML priority with ``text/html`` first: an output holding both a widget view
#: and an HTML form (agentlab's widgets: their static snapshot) exports as the HTML. Other
#: outputs keep nbconvert's order (its default, ``HTMLExporter.default_config``).
SNAPSHOT_FIRST = [
    "text/html",
    VIEW,
    "application/javascript",
    "text/markdown",
    "image/svg+xml",
    "text/vnd.mermaid",
    "text/latex",
    "image/png",
    "image/jpeg",
    "text/plain",
]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    serverapp.contents_manager.register_pre_save_hook(keep_widget_state)
    # JupyterLab's File > Save and Export Notebook As > HTML runs the server's nbconvert
    # with this config. A saved notebook holds its widget state (for the reopen), and with
    # it nbconvert draws each widget through a widget manager loaded from a CDN, which is
    # blank offline; the snapshot next to the view needs nothing. (A setting of the user's
    # own is kept; the plain ``jupyter nbconvert`` CLI reads no server config: it gets the
    # same priority from ``etc/jupyter/jupyter_nbconvert_config.json``, installed with us.)
    section = serverapp.config.WidgetsDataTypeFilter
    if "display_data_priority" not in section:
        section.display_data_priority = list(SNAPSHOT_FIRST)


def keep_widget_state(model: dict[str, Any], path: str, contents_manager: Any, **_: Any) -> None:
    """Pre-save hook: put back the saved state of widget models the notebook still shows,
    and let an output whose model has no state left show its other forms.

    A model that neither the front end nor the file being replaced has a state for (the
    notebook first saved after a kernel restart, or after its kernel died: restored models
    have no comm, and no earlier save holds them) would reopen as "Error displaying widget:
    model not found", the widget view outranking everything else in the output. Its view is
    dropped from the saved output when the output has another form (agentlab's views: the
    ``text/html`` snapshot), which JupyterLab then shows; the open notebook is untouched.

    Args:
        model: the contents model being saved (``content`` is the notebook as a dict).
        path: its path for ``contents_manager``.
        contents_manager: the server's contents manager (reads the file being replaced).
    """
    nb = model.get("content")
    if model.get("type") != "notebook" or not isinstance(nb, dict):
        return
    shown = shown_models(nb)
    if not shown:
        return
    state = _state(nb)
    if shown <= state.keys():
        return
    old = _state(_saved(path, contents_manager))
    keep = _referenced(shown - state.keys(), old) - state.keys()
    if keep:
        meta = nb.setdefault("metadata", {})
        widgets = meta.get("widgets")
        if not isinstance(widgets, dict):
            widgets = meta["widgets"] = {}
        doc = widgets.get(STATE)
        if not isinstance(doc, dict):
            doc = widgets[STATE] = {"version_major": 2, "version_minor": 0}
        if not isinstance(doc.get("state"), dict):
            doc["state"] = {}
        for key in sorted(keep):
            doc["state"][key] = old[key]
    lost = shown - state.keys() - keep
    if lost:
        _drop_views(nb, lost)


def _drop_views(nb: dict[str, Any], lost: set[str]) -> None:
    """Take the widget view out of each output showing a model in ``lost`` that has another
    form to show (an output with the view alone keeps it: JupyterLab's error says what
    is missing, an empty output would not)."""
    for cell in nb.get("cells") or ():
        for o in cell.get("outputs") or ():
            data = o.get("data") if isinstance(o, dict) else None
            if not isinstance(data, dict):
                continue
            view = data.get(VIEW)
            if isinstance(view, dict) and str(view.get("model_id")) in lost and len(data) > 1:
                del data[VIEW]


def shown_models(nb: dict[str, Any]) -> set[str]:
    """The model ids the notebook's outputs show (widget views)."""
    out: set[str] = set()
    for cell in nb.get("cells") or ():
        for o in cell.get("outputs") or ():
            view = (o.get("data") or {}).get(VIEW) if isinstance(o, dict) else None
            if isinstance(view, dict) and view.get("model_id"):
                out.add(str(view["model_id"]))
    return out


def _saved(path: str, contents_manager: Any) -> dict[str, Any]:
    """The notebook file about to be replaced, as JSON; ``{}`` if there is none.

    Read from disk under the manager's ``root_dir``: JupyterLab's manager is async
    (``get`` returns a coroutine) and the hook runs synchronously inside its ``save``.
    A manager with no files on a local disk has no ``root_dir`` file: nothing is kept."""
    root = getattr(contents_manager, "root_dir", None)
    if not root:
        return {}
    try:
        with open(os.path.join(root, path.strip("/")), "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError):  # a new file, or one that is not JSON (yet)
        return {}
    return doc if isinstance(doc, dict) else {}


def _state(nb: Any) -> dict[str, Any]:
    """``metadata.widgets[STATE].state`` of a notebook, ``{}`` where any level is missing."""
    doc = ((nb.get("metadata") or {}).get("widgets") or {}).get(STATE) or {}
    state = doc.get("state") if isinstance(doc, dict) else None
    return state if isinstance(state, dict) else {}


def _referenced(roots: Iterable[str], state: dict[str, Any]) -> set[str]:
    """``roots`` found in ``state`` and every model they refer to, transitively."""
    found: set[str] = set()
    todo = [r for r in roots if r in state]
    while todo:
        key = todo.pop()
        if key in found:
            continue
        found.add(key)
        todo += [r for r in _refs(state[key]) if r in state and r not in found]
    return found


def _refs(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        if value.startswith(REF):
            yield value[len(REF) :]
    elif isinstance(value, dict):
        for v in value.values():
            yield from _refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from _refs(v)
