"""The ``search`` router: BM25 over tool specs, top-k offered, counters in the timeline."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import pytest

from agentlab.env import create_env
from agentlab.env.routers import make_router, router_from_spec, router_kinds
from agentlab.env.routers_search import SearchRouter, ToolIndex, tokenize
from agentlab.errors import ConfigError
from agentlab.llm import LLMClient

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location(
        "bench_search", ROOT / "benchmarks/search_router.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Spy:
    """Wraps the simulated LLM and keeps the tool lists it was offered."""

    def __init__(self, llm: LLMClient) -> None:
        self.llm = llm
        self.offered: list[list[str]] = []

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        self.offered.append([t["function"]["name"] for t in kwargs.get("tools") or []])
        return await self.llm.complete(messages, **kwargs)


def test_tokenize_splits_names_and_stems() -> None:
    assert tokenize("read_inbox: Reading the Emails") == ["read", "inbox", "read", "email"]
    assert tokenize("reminders") == ["remind"]


def test_index_ranks_by_name_description_and_parameters() -> None:
    index = ToolIndex(
        {
            "like": "like Like a post. post_id the post to like",
            "follow": "follow Follow a user. user who to follow",
            "read_feed": "read_feed Read the newest posts of your feed",
        }
    )
    assert index.top("follow @bob", 1) == ["follow"]
    assert index.top("what is new on my feed?", 1) == ["read_feed"]
    assert index.top("like a post", 2, among=["follow", "like"]) == ["like", "follow"]
    with pytest.raises(ConfigError, match="at least one tool"):
        ToolIndex({})


async def test_search_router_offers_only_top_k_and_sim_picks_from_them() -> None:
    b = _bench()
    env = b.city_env()
    assert "search" in router_kinds()
    spy = _Spy(LLMClient("sim/instant", seed=3, sim_tool_call_p=1.0))  # never answers in text
    router = make_router("search", env, llm=spy, k=4, max_iterations=2)
    assert isinstance(router, SearchRouter)
    res = await router.route("will it rain in Paris tomorrow", agent_id="alice")
    assert res.search is not None and res.search["offered"][0] == "weather_forecast"
    assert len(res.search["offered"]) == 4
    assert spy.offered and all(o == res.search["offered"] for o in spy.offered)
    assert res.calls and res.calls[0]["tool"] in res.search["offered"]  # the sim chose from them
    assert not res.ok and res.search["hit"]  # the loop hit max_iterations; retrieval recorded
    assert router.search_stats["search_hits"] == 1
    assert json.loads(json.dumps(res.to_dict()))["search"]["offered"] == res.search["offered"]
    # rebuilt from its spec in another process: same k
    again = router_from_spec(router.to_spec(), env=env, llm=spy)
    assert isinstance(again, SearchRouter) and again.k == 4
    with pytest.raises(ConfigError, match="positive int"):
        make_router("search", env, llm=spy, k=0)


async def test_benchmark_recall_and_prompt_tokens() -> None:
    out = await _bench().main(quick=True)
    assert out["tools"] >= 50 and sum(out["labelled_requests"].values()) >= 140
    table = {(r["set"], r["keywords"]): r for r in out["recall_table"]}
    # measured at k=5, keywords / none: original 93.8 / 91.7 %, held-out 86.7 / 78.3 %,
    # blind 97.5 / 90.0 %: the author's keywords add what BM25 cannot guess ("cab")
    assert table[("blind", True)]["recall"] >= 0.95, table[("blind", True)]["misses"]
    assert table[("original", True)]["recall"] >= 0.9
    assert table[("held_out", True)]["recall"] >= 0.85
    for name in ("original", "held_out", "blind"):
        assert table[(name, True)]["recall"] >= table[(name, False)]["recall"]
    react, search = out["routers"]
    assert search["prompt_tokens_per_request"] < 0.3 * react["prompt_tokens_per_request"]
    assert search["ok"] >= react["ok"] - 3


def test_tool_keywords_are_indexed_but_never_shown_to_models() -> None:
    from agentlab.env import EnvBase, tool

    class Town(EnvBase):
        @tool(keywords="cab lift ride")
        def book_taxi(self, address: str) -> str:
            """Order a taxi to an address.

            Args:
                address: destination.
            """
            return address

        @tool
        def weather(self, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
            """Today's forecast."""
            return unit

        @tool
        def send_letter(self, to: str) -> str:
            """Post a letter."""
            return to

    env = Town()
    env.init(0)
    specs = env.tool_specs()
    assert specs["book_taxi"].keywords == ("cab", "lift", "ride")
    assert "cab" not in json.dumps(specs["book_taxi"].openai_schema())  # no prompt tokens
    index = ToolIndex.for_env(env)
    assert index.top("get me a cab", 1) == ["book_taxi"]
    assert index.top("in fahrenheit please", 1) == ["weather"]  # enum values are indexed
    with pytest.raises(ConfigError, match="keywords must be a string or a list"):
        tool(keywords=3)


def test_index_fields_weigh_the_name_and_match_shared_prefixes() -> None:
    index = ToolIndex(
        {
            "refill": {"name": "refill", "description": "Refill a medicine prescription."},
            "remind": {"name": "set_reminder", "description": "Set an alarm at a time."},
        }
    )
    assert index.top("more medication", 1) == ["refill"]  # medic- prefix
    assert index.top("a reminder", 1) == ["remind"]
    with pytest.raises(ConfigError, match="unknown index field 'body'"):
        ToolIndex({"x": {"body": "text"}})


async def _society_run(path: Path, router: str, options: dict[str, Any]) -> Any:
    from agentlab import open_run
    from agentlab.runtime import Society

    society = Society.create(
        path,
        agents=[{"type": "llm", "n": 4, "config": {"env_mode": "ask"}}],
        env=[{"type": "social_feed", "router": router, "router_options": options}],
        llm=LLMClient("sim/instant", seed=0),
        seed=1,
        progress=False,
    )
    try:
        await society.run(ticks=2)
    finally:
        society.close()
    return open_run(path)


async def test_society_reports_search_counters_in_timeline(tmp_path: Path) -> None:
    run = await _society_run(tmp_path / "search", "search", {"k": 2})
    df = run.sql("select router, n_tool_calls, ok from env_requests")
    assert len(df) == 8 and set(df.router) == {"search"}
    stats = [json.loads(r) if isinstance(r, str) else r for r in run.sql(
        "select routers from timeline order by tick").routers]  # fmt: skip
    total = {k: sum(s.get(k, 0) for s in stats) for k in ("search_hits", "search_misses")}
    assert total["search_hits"] + total["search_misses"] == 8, stats
    assert total["search_hits"] == int((df.n_tool_calls > 0).sum())  # sim picks from offered
    # per-tool choice counts: the first tool of each request that called one, by name
    calls = run.sql("select tool_calls from env_requests where n_tool_calls > 0").tool_calls
    first = Counter((json.loads(c) if isinstance(c, str) else c)[0]["tool"] for c in calls)
    chosen: dict[str, int] = {}
    for s in stats:
        assert s.get("search_chosen") == s["by_kind"]["search"].get("search_chosen")
        for name, n in (s.get("search_chosen") or {}).items():
            chosen[name] = chosen.get(name, 0) + n
    assert chosen == dict(first) and sum(chosen.values()) == int((df.n_tool_calls > 0).sum())
    # each router prompt is visibly shorter than react's with every schema (measured 463 vs
    # 777 tokens per call on the 6-tool feed, k=2; search made 17 calls to react's 10)
    react = await _society_run(tmp_path / "react", "react", {})
    q = "select avg(prompt_tokens) t from llm_calls where stage = 'router'"
    assert run.sql(q).t[0] < 0.9 * react.sql(q).t[0]
    with pytest.raises(Exception, match="positive int"):
        make_router("search", create_env("social_feed", seed=0), k=-1)
