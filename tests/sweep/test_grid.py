from __future__ import annotations

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
