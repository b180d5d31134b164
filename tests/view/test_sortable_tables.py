"""The agents table and an experiment's topology table sort by a header click.

A researcher looking for the agent that failed or called most clicked the agents page's
headers and nothing happened (only the runs list, a sweep's points and a topology's runs
sorted); the same for the few rows of an experiment's topology table.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.view.conftest import SOCIETY


def _sort_headers(page: str, table_id: str) -> list[str]:
    table = re.search(rf'<table id="{table_id}"[^>]*>.*?</thead>', page, re.S)
    assert table, f"no table {table_id}"
    return re.findall(r'<th[^>]*data-sort="\d+"[^>]*>([^<]+)</th>', table.group(0))


def test_the_agents_table_sorts(mixed_folder: Path) -> None:
    from agentlab.view import render_page

    page = render_page(mixed_folder, f"r/{SOCIETY}/agents-1.html") or ""
    heads = _sort_headers(page, "agents")
    assert heads[:3] == ["agent", "steps", "llm_calls"], heads


def test_an_experiments_topology_table_sorts(mixed_folder: Path) -> None:
    from agentlab.view import render_page

    page = render_page(mixed_folder, "r/experiment/index.html") or ""
    heads = _sort_headers(page, "topologies")
    assert heads[:3] == ["topology", "runs", "ok"], heads
