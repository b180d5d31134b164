"""Executed notebook → offline HTML: static widget forms, one shared plotly.js, no CDN.

nbconvert's HTML needs require.js, MathJax and the widget manager from CDNs and inlines a
4.6 MB plotly.js into every page. A paper must open anywhere, offline. So:

- widget outputs keep their ``text/html`` snapshot (see ``agentlab.viz._static``) and
  lose the live view, whose model cannot exist without a kernel;
- plotly figures (``application/vnd.plotly.v1+json``) become a ``<div>`` plus a call to
  ``Plotly.newPlot`` against ``plotly.min.js`` written once next to the pages, so a bundle
  of pages shares one copy (the one the installed plotly package ships);
- every ``<script src>`` / ``<link href>`` pointing off the machine is dropped.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

__all__ = [
    "PLOTLY_JS",
    "drop_snapshot_widget_state",
    "export_html",
    "static_notebook",
    "strip_remote",
]

#: file name of the shared plotly bundle next to the exported pages
PLOTLY_JS = "plotly.min.js"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PLOTLY_MIME = "application/vnd.plotly.v1+json"

_REMOTE_SCRIPT = re.compile(
    r"<script\b[^>]*\bsrc=[\"']?(?:https?:)?//[^>]*>\s*</script>", re.IGNORECASE
)
_REMOTE_LINK = re.compile(r"<link\b[^>]*\bhref=[\"']?(?:https?:)?//[^>]*>", re.IGNORECASE)


def _script_json(value: Any) -> str:
    # JSON inside <script>: "</" would end the script element early
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


def _plotly_html(fig: dict[str, Any], n: int) -> str:
    div = f"agentlab-fig-{n}"
    layout = fig.get("layout") or {}
    height = layout.get("height") or 450
    return (
        f'<div id="{div}" class="plotly-graph-div" style="height:{int(height)}px;width:100%">'
        f"</div><script>Plotly.newPlot({_script_json(div)}, {_script_json(fig.get('data', []))},"
        f" {_script_json(layout)}, {_script_json({'responsive': True, **fig.get('config', {})})})"
        "</script>"
    )


def static_notebook(nb: Any) -> tuple[Any, int]:
    """A copy of ``nb`` for offline rendering, and how many plotly figures it holds.

    Outputs with a static ``text/html`` form drop the live widget view; plotly JSON
    outputs become HTML that plots with the shared ``plotly.min.js``; saved widget state
    goes (nothing could load it without a kernel).
    """
    out = copy.deepcopy(nb)
    figs = 0
    for cell in out.get("cells", []):
        for o in cell.get("outputs", []) or []:
            data = o.get("data")
            if not isinstance(data, dict):
                continue
            if WIDGET_VIEW in data and "text/html" in data:
                del data[WIDGET_VIEW]
            if PLOTLY_MIME in data:
                fig = data.pop(PLOTLY_MIME)
                if isinstance(fig, str):
                    fig = json.loads(fig)
                data["text/html"] = _plotly_html(fig, figs)
                figs += 1
    out.get("metadata", {}).pop("widgets", None)
    return out, figs


def drop_snapshot_widget_state(path: Path) -> int:
    """Drop the saved widget state (which papermill/nbclient stores) of every output that
    carries its own ``text/html`` snapshot; returns how many states were dropped.

    nbconvert renders a widget view whenever its state is saved, which needs the widget
    manager from a CDN; without the state it falls back to the snapshot, which works
    offline. A kernel recreates the live widgets when the notebook runs again.
    """
    nb = json.loads(path.read_text())
    key = "application/vnd.jupyter.widget-state+json"
    state = nb.get("metadata", {}).get("widgets", {}).get(key, {}).get("state")
    if not state:
        return 0
    views = [
        (o.get("data") or {})
        for cell in nb.get("cells", [])
        for o in cell.get("outputs", []) or []
        if isinstance((o.get("data") or {}).get(WIDGET_VIEW), dict)
    ]
    with_snapshot = [d[WIDGET_VIEW].get("model_id") for d in views if "text/html" in d]
    if len(with_snapshot) == len(views):
        # no output needs saved state: drop it all (child and layout models too), so
        # nbconvert does not load the widget manager from a CDN either
        dropped = len(state)
        nb["metadata"].pop("widgets")
    else:
        dropped = sum(state.pop(m, None) is not None for m in with_snapshot)
    if dropped:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return dropped


def strip_remote(html: str) -> str:
    """Drop every ``<script src>`` and ``<link href>`` that points off the machine."""
    return _REMOTE_LINK.sub("", _REMOTE_SCRIPT.sub("", html))


def _write_plotly_js(folder: Path) -> Path:
    path = folder / PLOTLY_JS
    if not path.is_file():
        from plotly.offline import get_plotlyjs

        path.write_text(get_plotlyjs())
    return path


def export_html(executed: Path, html_path: Path) -> Path:
    """Convert an executed notebook to HTML that renders offline; returns the HTML path.

    Figures load ``plotly.min.js`` from the page's folder (written there once).
    """
    import nbconvert
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    static, figs = static_notebook(nb)
    exporter = nbconvert.HTMLExporter(template_name="lab", embed_images=True)
    body, _ = exporter.from_notebook_node(nbformat.from_dict(static))
    body = strip_remote(body)
    if figs:
        _write_plotly_js(html_path.parent)
        body = body.replace("<head>", f'<head>\n<script src="{PLOTLY_JS}"></script>', 1)
    html_path.write_text(body)
    return html_path
