"""A notebook's recorded tables on the run browser's sweep / paper pages (``_recorded``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from agentlab.sweep import record_table
from agentlab.view.pages_sweep import _recorded


def _table(folder: Path, name: str) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    _recorded(folder, blocks)
    return next(b for b in blocks if b["id"] == f"table-{name}")


def test_a_recorded_table_shows_its_columns_and_only_a_meaningful_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLAB_RUN_DIR", str(tmp_path))  # as a sweep or paper sets it
    record_table("plain", pd.DataFrame({"topology": ["star", "mesh"], "calls": [4, 6]}))
    named = pd.Index(["star", "mesh"], name="topology")
    record_table("named", pd.DataFrame({"calls": [4, 6]}, index=named))
    record_table("labelled", pd.DataFrame({"calls": [4, 6]}, index=["star", "mesh"]))
    # a user's own CSV, written without an index, keeps its first column
    (tmp_path / "tables" / "own.csv").write_text("topology,calls\nstar,4\nmesh,6\n")

    plain = _table(tmp_path, "plain")  # the default 0, 1 index is not shown
    assert plain["columns"] == ["topology", "calls"]
    assert [r["cells"] for r in plain["rows"]] == [["star", 4], ["mesh", 6]]
    assert _table(tmp_path, "named")["columns"] == ["topology", "calls"]
    labelled = _table(tmp_path, "labelled")  # labels are data, even unnamed
    assert labelled["columns"] == ["index", "calls"]
    assert [r["cells"][0] for r in labelled["rows"]] == ["star", "mesh"]
    assert _table(tmp_path, "own")["columns"] == ["topology", "calls"]


def test_a_recorded_figure_keeps_its_notebook_layout_one_a_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A paper's figures were squeezed into the page's 320-px chart cells, three a row,
    with their legends moved under the plot: subplot titles and legends overlapped their
    axis labels. Each now keeps its height, legend and margins, one a row."""
    import plotly.graph_objects as go

    from agentlab.sweep import record_figure

    monkeypatch.setenv("AGENTLAB_RUN_DIR", str(tmp_path))
    fig = go.Figure(go.Bar(x=["a", "b"], y=[1, 2], name="sim"))
    fig.update_layout(height=500, width=480, legend={"x": 1.02, "y": 1}, margin={"t": 50})
    record_figure("ratio", fig)
    record_figure("plain", go.Figure(go.Scatter(x=[1, 2], y=[3, 4])))
    blocks: list[dict[str, Any]] = []
    assert _recorded(tmp_path, blocks)
    figs = next(b for b in blocks if b["type"] == "charts")
    assert figs["wide"] and [c["title"] for c in figs["charts"]] == ["plain", "ratio"]
    plain, ratio = (c["html"] for c in figs["charts"])
    assert "height:500px" in ratio and '"legend":{"x":1.02,"y":1}' in ratio
    assert '"width":480' not in ratio  # (its width follows the page)
    assert "height:450px" in plain and '"orientation":"h"' not in plain
