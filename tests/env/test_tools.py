"""Tool schema generation: types, Literal, Optional, defaults, docstrings, inheritance."""

from __future__ import annotations

from typing import Literal

import pytest

from agentlab.env import EnvBase, tool
from agentlab.env.tools import parse_docstring
from agentlab.errors import ConfigError, ToolError, UnknownNameError


class Parent(EnvBase):
    """A test module."""

    @tool
    def search(
        self,
        query: str,
        limit: int = 5,
        mode: Literal["fast", "exact"] = "fast",
        tag: str | None = None,
    ) -> list[str]:
        """Search the archive.

        Args:
            query: words to look for.
            limit: how many hits
                to return at most.
            mode: matching strategy.
            tag: optional tag filter.

        Returns:
            matching titles.
        """
        return [query] * limit

    @tool(name="whoami", description="Say who is calling.")
    def identity(self, agent_id: str) -> str:
        return agent_id

    @tool
    async def slow_add(self, a: int, b: float = 0.5) -> float:
        """Add two numbers asynchronously."""
        return a + b

    def helper(self) -> None:
        """Not a tool."""


class Child(Parent):
    @tool
    def extra(self, flag: bool) -> bool:
        """A tool only the child has."""
        return not flag

    def search(self, query: str, limit: int = 2, mode: str = "fast", tag: str | None = None):  # type: ignore[override]
        return ["child", query]


class Pruned(Parent):
    slow_add = None  # type: ignore[assignment]


def test_schema_shape_types_and_docstrings() -> None:
    spec = Parent.tool_specs()["search"]
    schema = spec.openai_schema()
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "search"
    assert fn["description"].startswith("Search the archive.")
    assert "matching titles" in fn["description"]
    params = fn["parameters"]
    assert params["type"] == "object" and params["additionalProperties"] is False
    assert params["required"] == ["query"]
    props = params["properties"]
    assert props["query"] == {"type": "string", "description": "words to look for."}
    assert props["limit"]["type"] == "integer" and props["limit"]["default"] == 5
    assert props["limit"]["description"] == "how many hits to return at most."
    assert props["mode"]["enum"] == ["fast", "exact"]
    assert {"type": "null"} in props["tag"]["anyOf"]
    assert spec.params == ("query", "limit", "mode", "tag")


def test_context_param_hidden_and_custom_name() -> None:
    specs = Parent.tool_specs()
    assert set(specs) == {"search", "whoami", "slow_add"}  # helper is not a tool
    who = specs["whoami"]
    assert who.method == "identity" and who.description == "Say who is calling."
    assert who.parameters["properties"] == {} and who.context == ("agent_id",)
    assert specs["slow_add"].is_async


def test_tools_are_inherited_and_overrides_stay_tools() -> None:
    specs = Child.tool_specs()
    assert set(specs) == {"search", "whoami", "slow_add", "extra"}
    # the override keeps the tool, uses its own signature, inherits the parent's docstring
    assert specs["search"].parameters["properties"]["limit"]["default"] == 2
    assert specs["search"].description.startswith("Search the archive.")
    assert "whoami" in {s["function"]["name"] for s in Child().tool_schemas()}
    assert set(Pruned.tool_specs()) == {"search", "whoami"}


async def test_call_tool_validates_coerces_and_injects_agent() -> None:
    env = Child()
    assert await env.call_tool("search", {"query": "x", "limit": "3"}) == ["child", "x"]
    assert await env.call_tool("whoami", {}, agent_id="a1") == "a1"
    assert await env.call_tool("slow_add", {"a": 2}) == 2.5
    with pytest.raises(ToolError, match="needs the calling agent"):
        await env.call_tool("whoami", {})
    with pytest.raises(
        ToolError, match=r"invalid arguments for tool 'search': query: Field required"
    ):
        await env.call_tool("search", {"limit": 1})
    with pytest.raises(ToolError, match="mode"):
        await Parent().call_tool("search", {"query": "q", "mode": "slow"})
    with pytest.raises(ToolError, match="extra_arg"):
        await env.call_tool("search", {"query": "q", "extra_arg": 1})
    with pytest.raises(UnknownNameError, match="registered: extra, search, slow_add, whoami"):
        await env.call_tool("nope", {})


def test_varargs_tool_is_refused() -> None:
    class Bad(EnvBase):
        @tool
        def f(self, *names: str) -> None:
            """Bad."""

    with pytest.raises(ConfigError, match=r"takes \*names"):
        Bad.tool_specs()


def test_locally_defined_class_with_unresolvable_hints() -> None:
    class Local:  # a name get_type_hints cannot resolve from module globals
        pass

    class LocalEnv(EnvBase):
        @tool
        def use(self, thing: Local, n: int = 1) -> int:  # type: ignore[valid-type]
            """Use a thing."""
            return n

    props = LocalEnv.tool_specs()["use"].parameters["properties"]
    assert props["n"]["default"] == 1 and "thing" in props


def test_parse_docstring() -> None:
    summary, args, returns = parse_docstring(
        """Do it.

        Longer text.

        Args:
            x (int): the x.
                continued.
            y: the y.

        Returns:
            something.
        """
    )
    assert summary == "Do it. Longer text."
    assert args == {"x": "the x. continued.", "y": "the y."}
    assert returns == "something."
