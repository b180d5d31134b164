"""The code-generating router's sandbox: benign code runs, escape attempts are refused."""

from __future__ import annotations

import time

import pytest

from agentlab.env import CodeGenRouter, Limits, SocialFeed, check_code, create_env
from agentlab.errors import ToolError, UnsafeCodeError


@pytest.fixture()
def feed() -> SocialFeed:
    env = create_env("social_feed", seed=0)
    assert isinstance(env, SocialFeed)
    env.post("hello town", agent_id="bob")
    env.post("tram line news", agent_id="carol")
    env.step(0)
    env.like("0.bob.0", agent_id="carol")
    env.step(1)
    return env


BENIGN = [
    ('post("good morning")', lambda v: v["post_id"] == "2.alice.0"),
    (
        "posts = read_feed(limit=5, source='recent')\n"
        "best = sorted([p['likes'] for p in posts], reverse=True)[0]\n"
        "for p in posts:\n"
        "    if p['likes'] == best:\n"
        "        like(p['id'])\n"
        "best",
        lambda v: v == 1,
    ),
    ("authors = {p['author']: p['id'] for p in read_feed(source='recent')}\nsorted(authors.keys())",
     lambda v: v == ["bob", "carol"]),
    ("n = 0\nwhile n < 10:\n    n += 1\nf'{n} done'.upper()", lambda v: v == "10 DONE"),
    ("follow('bob')\nlen(read_feed())", lambda v: v == 1),
    ("x = [1, 2, 3]\nx.append(4)\nsum(x) + max(x) * 2", lambda v: v == 18),
]  # fmt: skip

# (label, code): every one must be refused with UnsafeCodeError
ESCAPES = [
    ("subclasses walk", "().__class__.__bases__[0].__subclasses__()"),
    ("tool globals", "post.__globals__['__builtins__']"),
    ("builtins name", "__builtins__['eval']('1')"),
    ("getattr string", "getattr(post, '__glob' + 'als__')"),
    ("class via method", "'x'.__class__"),
    ("import", "import os\nos.system('id')"),
    ("from import", "from subprocess import run"),
    ("dunder import", "__import__('os').system('id')"),
    ("open", "open('/etc/passwd').read()"),
    ("eval", "eval('1+1')"),
    ("exec", "exec('x = 1')"),
    ("compile", "compile('1', 'f', 'eval')"),
    ("globals", "globals()"),
    ("vars", "vars()"),
    ("lambda smuggling", "f = lambda: post\nf()"),
    ("def smuggling", "def f():\n    return 1\nf()"),
    ("class def", "class A:\n    pass"),
    ("format attribute", "'{0.__class__.__mro__}'.format(1)"),
    ("format_map", "'{x.__class__}'.format_map({'x': 1})"),
    ("f-string format spec bomb", "f'{1:>{10**9}}'"),
    ("percent format", "'%s' % 'x'"),
    ("function as value", "f = post\nf('x')"),
    ("tool as key callable", "sorted(['a'], key=post)"),
    ("huge string", "'a' * 10**9"),
    ("huge list", "[0] * 10**9"),
    ("huge int power", "10 ** 10 ** 10"),
    ("doubling string", "s = 'ab'\nfor i in range(40):\n    s = s + s"),
    ("big range", "for i in range(10**12):\n    pass"),
    ("generator bomb", "sum(x for x in range(10**10))"),
    ("nested comprehension bomb", "[[0 for a in range(10000)] for b in range(10000)]"),
    ("join bomb", "'-'.join(['x' * 10000] * 10000)"),
    ("str bomb", "str([['y' * 10000] * 10000])"),
    ("while true", "while True:\n    pass"),
    ("while 1 == 1", "x = 0\nwhile 1 == 1:\n    x = x + 1"),
    ("deep nesting", "x = " + "[" * 200 + "]" * 200),
    ("deep recursion via def", "def r(n):\n    return r(n + 1)\nr(0)"),
    ("yield", "x = (yield 1)"),
    ("try/except swallowing budget", "try:\n    pass\nexcept Exception:\n    pass"),
    ("with statement", "with open('x') as f:\n    pass"),
    ("global", "global post"),
    ("walrus", "(y := 1)"),
    ("star unpack", "post(*['x'])"),
    ("kwargs unpack", "post(**{'content': 'x'})"),
    ("private name", "_secret = 1"),
    ("delete", "del post"),
    ("tool flood", "for i in range(100):\n    post('spam')"),
    ("bytes literal", "b'x' * 10"),
    ("round bomb", "round(5, -10**9)"),
    ("assign over tool", "post = 1"),
]


@pytest.mark.parametrize(("code", "check"), BENIGN)
async def test_benign_code_runs(feed: SocialFeed, scripted, code: str, check) -> None:  # type: ignore[no-untyped-def]
    router = CodeGenRouter(feed, llm=scripted(code))
    res = await router.route("do the thing", agent_id="alice")
    assert res.ok, res.observation
    assert check(res.value), res.value
    assert router.stats.rejections == 0 and router.stats.errors == 0


@pytest.mark.parametrize("isolation", ["process", "inline"])
@pytest.mark.parametrize(("label", "code"), ESCAPES, ids=[e[0] for e in ESCAPES])
async def test_escape_attempt_rejected_and_counted(
    feed: SocialFeed, scripted, label: str, code: str, isolation: str
) -> None:
    router = CodeGenRouter(feed, llm=scripted(f"```python\n{code}\n```"), isolation=isolation)
    t0 = time.perf_counter()
    res = await router.route(f"attack: {label}", agent_id="mallory")
    assert time.perf_counter() - t0 < 5.0
    assert not res.ok and res.error_type == "UnsafeCodeError", res.observation
    assert res.observation.startswith("error: request rejected:")
    assert router.stats.rejections == 1 and router.stats.calls == 1
    with pytest.raises(UnsafeCodeError):
        res.raise_for_error()
    assert "mallory" not in {p["author"] for p in feed.posts.values()}


def test_escape_list_is_long_enough() -> None:
    assert len(ESCAPES) >= 15


async def test_side_effects_before_budget_are_bounded(feed: SocialFeed, scripted) -> None:
    router = CodeGenRouter(feed, llm=scripted("for i in range(100):\n    post('spam')"),
                           limits=Limits(max_tool_calls=3))  # fmt: skip
    res = await router.route("spam", agent_id="mallory")
    assert not res.ok and "more than 3 tool calls" in (res.error or "")
    assert len(res.calls) == 3 and len(feed.pending) == 3


async def test_runtime_errors_are_errors_not_crashes(feed: SocialFeed, scripted) -> None:
    router = CodeGenRouter(feed, llm=scripted("x = {}\nx['missing']"))
    res = await router.route("oops", agent_id="a")
    assert not res.ok and res.error_type == "ToolError" and "KeyError" in (res.error or "")
    assert router.stats.errors == 1 and router.stats.rejections == 0


async def test_tool_results_are_copies(feed: SocialFeed, scripted) -> None:
    code = "p = read_feed(source='recent')\np[0]['content'] = 'hacked'\np[0]['content']"
    res = await CodeGenRouter(feed, llm=scripted(code)).route("mutate", agent_id="a")
    assert res.value == "hacked"
    assert all(p["content"] != "hacked" for p in feed.posts.values())


def test_check_code_messages_name_the_rule() -> None:
    with pytest.raises(UnsafeCodeError, match=r"line 2: Import is not allowed"):
        check_code("x = 1\nimport os", {"post"})
    with pytest.raises(UnsafeCodeError, match=r"function 'open' is not available; callable: post"):
        check_code("open('x')", {"post"})
    with pytest.raises(UnsafeCodeError, match="not valid Python"):
        check_code("this is not python at all (", {"post"})
    with pytest.raises(UnsafeCodeError, match="characters; the limit"):
        check_code("x = 1\n" * 2000, {"post"})


async def test_time_budget_stops_slow_loops(feed: SocialFeed, scripted) -> None:
    limits = Limits(max_steps=10**9, max_seconds=0.2)
    router = CodeGenRouter(feed, llm=scripted("while True:\n    pass"), limits=limits)
    t0 = time.perf_counter()
    res = await router.route("spin", agent_id="a")
    assert not res.ok and "time budget" in (res.error or "")
    assert time.perf_counter() - t0 < 3.0


async def test_sandbox_refuses_non_plain_tool_results() -> None:
    from agentlab.env import Sandbox

    async def leak(args: list, kwargs: dict) -> object:
        return object()

    with pytest.raises(ToolError, match="plain data"):
        await Sandbox({"leak": leak}).run("leak()")
