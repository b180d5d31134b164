"""``sim_tools._named_at`` (the tools a request names, remembered per request and tool
names) answers as the search it remembers, whatever came before: a repeated request, the
same request with other tools offered, a renamed tool, a cache cleared when full."""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentlab.llm import sim_tools

_WORDS = ["post", "reply", "like", "follow", "unfollow", "read_feed", "feed", "Read", "x",
          "likes", "@like", "un-follow", "\u00fcn", "\n", " ", ".", "_"]  # fmt: skip


def _searched(request: str, fns: list[dict[str, Any]]) -> tuple[int, ...]:
    low = request.lower()
    return tuple(i for i, f in enumerate(fns) if sim_tools._names(f, low))


@pytest.mark.parametrize("bound", [3, 2048])
def test_named_at_equals_the_search(monkeypatch: pytest.MonkeyPatch, bound: int) -> None:
    monkeypatch.setattr(sim_tools, "_NAMED_AT", {})
    monkeypatch.setattr(sim_tools, "_NAMED_AT_MAX", bound)
    rng = random.Random(4)
    names = ["post", "reply", "like", "follow", "unfollow", "read_feed", "search_web"]
    requests = [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 12))) for _ in range(60)]
    for _ in range(3_000):
        fns: list[dict[str, Any]] = [{"name": n} for n in rng.sample(names, rng.randint(0, 6))]
        if rng.random() < 0.1:
            fns.append({})  # a tool without a name
        request = rng.choice(requests)  # asked again and again, with other tools
        assert sim_tools._named_at(request, fns) == _searched(request, fns), (request, fns)
        assert len(sim_tools._NAMED_AT) <= bound
    fns = [{"name": "like"}]
    assert sim_tools._named_at("I like it", fns) == (0,)
    fns[0]["name"] = "follow"  # a tool renamed in place: asked afresh
    assert sim_tools._named_at("I like it", fns) == ()
