"""The codegen cache reuses a program only for the same agent's request, the same up to its
parameters (issue 23: a program written for agent ``m`` ran for ``a`` and ``c``)."""

from __future__ import annotations

import pytest

from agentlab.env import CodeGenRouter, SocialFeed, create_env
from agentlab.env.code_cache import CodeCache

SIGS = ("like(post_id: str)", "post(content: str)", "follow(user: str)")


@pytest.fixture()
def feed() -> SocialFeed:
    env = create_env("social_feed", seed=0)
    assert isinstance(env, SocialFeed)
    env.post("hello town", agent_id="bob")
    env.post("tram line news", agent_id="carol")
    env.step(0)
    return env


@pytest.mark.parametrize("isolation", ["inline", "process"])
async def test_a_cached_program_never_runs_as_another_agent(
    feed: SocialFeed, scripted, isolation: str
) -> None:
    # What m's LLM wrote for "like post 0.bob.0" (its prompt said "You are @m").
    m_program = "like('0.bob.0')\npost('I hereby endorse @m')\nfollow('m_sock')"
    llm = scripted(m_program, "like('0.bob.0')", "like('0.carol.0')")
    router = CodeGenRouter(feed, llm=llm, isolation=isolation)
    m = await router.route("like post 0.bob.0", agent_id="m")
    a = await router.route("like post 0.bob.0", agent_id="a")
    c = await router.route("like post 0.carol.0", agent_id="c")
    assert m.ok and a.ok and c.ok, (m.observation, a.observation, c.observation)
    assert a.cache_hit is False and c.cache_hit is False
    assert len(llm.requests) == 3  # each agent's own request reached the LLM
    assert [x["agent_id"] for x in llm.requests] == ["m", "a", "c"]
    assert [call["tool"] for call in a.calls] == ["like"]
    assert [call["tool"] for call in c.calls] == ["like"]
    feed.step(1)
    authors = {p["author"] for p in feed.posts.values() if "endorse" in p["content"]}
    assert authors == {"m"}
    assert "m_sock" not in {*feed.following.get("a", ()), *feed.following.get("c", ())}
    # m's own next request of that shape is still served from the cache
    again = await router.route("like post 0.carol.0", agent_id="m")
    assert again.cache_hit is True and again.code == m_program.replace("0.bob.0", "0.carol.0")


def test_a_literal_the_program_does_not_take_as_a_parameter_misses() -> None:
    cache = CodeCache(8)
    # the LLM wrote its own text: the request's value is not a parameter of the program
    cache.put("post 'hello'", SIGS, "post('Hello!')", "m")
    assert cache.get("post 'bye'", SIGS, "m") is None
    assert cache.get("post 'hello'", SIGS, "m") == "post('Hello!')"  # the same request
    # the old value also inside a longer text: rewriting the call alone would be half
    cache.put("like post 0.bob.0", SIGS, "like('0.bob.0')\npost('I like 0.bob.0')", "m")
    assert cache.get("like post 0.carol.0", SIGS, "m") is None
    # a complete rewrite is reused, by its agent only
    cache.put("like post 0.bob.0", SIGS, "like('0.bob.0')", "m")
    assert cache.get("like post 0.carol.0", SIGS, "m") == "like('0.carol.0')"
    assert cache.get("like post 0.carol.0", SIGS, "a") is None
    assert cache.stats()["hits"] == 2
