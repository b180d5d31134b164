"""A sweep's page says why each failed point failed, in its points table.

The table said only "failed": the error took a click into each point's own page.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from tests.view.conftest import write_notebook


def test_the_points_table_names_each_failed_points_error(tmp_path: Path) -> None:
    from agentlab.sweep import sweep
    from agentlab.view import render_page

    nb = tmp_path / "nb.ipynb"
    write_notebook(
        nb, ["x = 1", "if x == 3:\n    raise ValueError(f'x={x} is too big; use 1 or 2')"]
    )
    sweep(nb, {"x": [1, 3]}, out=tmp_path / "runs" / "sw", executor="local", max_parallel=2,
          progress=False)  # fmt: skip
    page = render_page(tmp_path / "runs", "r/sw/index.html") or ""
    table = re.search(r'<table id="points".*?</table>', page, re.S)
    assert table, page[-2000:]
    head = re.findall(r"<th[^>]*>([^<]+)</th>", table.group(0))
    assert head[-1] == "error", head
    rows = {
        re.sub(r"<[^>]+>", "", cells[1]): html.unescape(re.sub(r"<[^>]+>", "", cells[-1]))
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(0), re.S)[1:]
        if (cells := re.findall(r"<td[^>]*>(.*?)</td>", row, re.S))
    }
    assert rows == {"1": "", "3": "ValueError: x=3 is too big; use 1 or 2"}, rows
