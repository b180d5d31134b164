"""``@tool``: mark env methods as tools and build their JSON schemas.

A tool's JSON schema (OpenAI function-tool shape) comes from its signature (type hints,
``Literal``, ``Optional``, defaults) and its Google-style docstring. Tools are collected
over the whole MRO, so a subclass inherits every tool of its parents (AgentSociety 2.9.3
only looked at the class's own ``__dict__``); a subclass that overrides a tool method
without re-decorating it keeps it as a tool, and setting the attribute to ``None`` removes
it. Parameters named in :data:`CONTEXT_PARAMS` (``agent_id``) are filled by the router
from the caller's identity and are hidden from the schema, so a model cannot act as
someone else.
"""

from __future__ import annotations

import inspect
import itertools
import re
import typing
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import pydantic

from agentlab.core.tools import function_tool
from agentlab.errors import ConfigError, ToolError

__all__ = ["CONTEXT_PARAMS", "ToolSpec", "collect_tools", "parse_docstring", "tool"]

#: parameters the router fills from the call context; never part of the schema
CONTEXT_PARAMS = frozenset({"agent_id"})

_MARK = "__agentlab_tool__"
F = TypeVar("F", bound=Callable[..., Any])


#: numbers the marks in the order ``@tool`` ran: a class's tools keep the order they were
#: defined in where the class's ``__dict__`` does not (cloudpickle rebuilds a notebook's
#: class with its attributes sorted by name, so a Ray worker listed its tools otherwise)
_ORDER = itertools.count()


@dataclass(frozen=True, slots=True)
class _ToolMark:
    name: str | None
    description: str | None
    keywords: tuple[str, ...] = ()
    order: int = 0


@overload
def tool(fn: F) -> F: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    keywords: str | list[str] | tuple[str, ...] = (),
) -> Callable[[F], F]: ...


def tool(
    fn: F | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    keywords: str | list[str] | tuple[str, ...] = (),
) -> F | Callable[[F], F]:
    """Mark an env method (sync or async) as a tool.

    Use as ``@tool`` or ``@tool(name="search", description="...", keywords="cab ride")``.

    Args:
        fn: the method (when used without parentheses).
        name: tool name shown to models; defaults to the method name.
        description: overrides the docstring summary.
        keywords: other words a request may use for what the tool does (synonyms,
            aliases: ``"cab ride lift"``); the ``search`` router indexes them, models never
            see them (no prompt tokens).

    Returns:
        The same function, marked.

    Raises:
        ConfigError: ``keywords`` is not a string or a list of strings.
    """
    words = keywords.split() if isinstance(keywords, str) else keywords
    if not isinstance(words, list | tuple) or not all(isinstance(w, str) for w in words):
        raise ConfigError(
            f"@tool keywords must be a string or a list of strings, got {keywords!r:.80}"
        )

    def wrap(f: F) -> F:
        setattr(f, _MARK, _ToolMark(name, description, tuple(words), next(_ORDER)))
        return f

    return wrap(fn) if fn is not None else wrap


_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?):\s*$"
)
_ARG = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str], str]:
    """Split a Google-style docstring into (summary, {arg: description}, returns text)."""
    if not doc:
        return "", {}, ""
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    returns: list[str] = []
    section = "summary"
    current: str | None = None
    for raw in lines:
        m = _SECTION.match(raw.strip()) if not raw.startswith((" ", "\t")) else None
        if m:
            section, current = m.group(1).lower(), None
            continue
        if section == "summary":
            summary.append(raw.strip())
        elif section in {"args", "arguments", "parameters"}:
            am = (
                _ARG.match(raw.strip())
                if raw.startswith("    ") and not raw.startswith("     ")
                else None
            )
            if am:
                current = am.group(1).lstrip("*")
                args[current] = am.group(3).strip()
            elif current and raw.strip():
                args[current] = (args[current] + " " + raw.strip()).strip()
        elif section in {"returns", "return"} and raw.strip():
            returns.append(raw.strip())
    text = " ".join(summary).strip()
    # keep only the first paragraph-ish summary, joined
    return re.sub(r"\s+", " ", text), args, " ".join(returns)


@dataclass(frozen=True)
class ToolSpec:
    """A tool of an env class: name, schema and how to call it.

    Attributes:
        name: tool name shown to models.
        method: attribute name on the env.
        description: one-paragraph description (summary + returns).
        parameters: JSON schema of the arguments (object).
        params: argument names in signature order (positional binding for generated code).
        context: context parameters the method accepts (e.g. ``agent_id``).
        is_async: whether the method is a coroutine function.
        model: pydantic model validating the arguments.
        keywords: search words the tool's author declared (``@tool(keywords=...)``); not
            part of the schema models see.
    """

    name: str
    method: str
    description: str
    parameters: dict[str, Any]
    params: tuple[str, ...]
    context: tuple[str, ...]
    is_async: bool
    model: type[pydantic.BaseModel]
    keywords: tuple[str, ...] = ()

    def openai_schema(self) -> dict[str, Any]:
        """The ``tools=[...]`` entry for an OpenAI-style chat request."""
        return function_tool(self.name, self.description, self.parameters)

    def signature_text(self) -> str:
        """A one-line Python-like signature, for code-generation prompts."""
        props = self.parameters.get("properties", {})
        required = set(self.parameters.get("required", []))
        parts = []
        for p in self.params:
            t = _type_text(props.get(p, {}))
            parts.append(
                f"{p}: {t}" if p in required else f"{p}: {t} = {props[p].get('default')!r}"
            )
        return f"{self.name}({', '.join(parts)})"

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Validate model-supplied arguments; return the coerced keyword arguments.

        Raises:
            ToolError: naming the tool, the bad field and the expected parameters.
        """
        if not isinstance(arguments, dict):
            raise ToolError(
                f"arguments for tool {self.name!r} must be an object, got "
                f"{type(arguments).__name__}; expected {self.signature_text()}"
            )
        try:
            obj = self.model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(x) for x in e['loc']) or '(root)'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ToolError(
                f"invalid arguments for tool {self.name!r}: {problems}; expected "
                f"{self.signature_text()}"
            ) from None
        return {k: getattr(obj, k) for k in self.params}


def _type_text(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "Literal[" + ", ".join(repr(v) for v in schema["enum"]) + "]"
    if "anyOf" in schema:
        return " | ".join(_type_text(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"list[{_type_text(schema.get('items', {}))}]"
    return {
        "string": "str",
        "integer": "int",
        "number": "float",
        "boolean": "bool",
        "object": "dict",
        "null": "None",
    }.get(str(schema.get("type")), "Any")


def _strip_titles(schema: Any) -> Any:
    # pydantic adds "title" everywhere; models do not need it and it costs prompt tokens
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # names local to a function or notebook cell that no longer resolve
        return {}


def _build_spec(cls: type, attr: str, fn: Callable[..., Any], mark: _ToolMark) -> ToolSpec:
    name = mark.name or attr
    target = inspect.unwrap(fn)
    sig = inspect.signature(target)
    hints = _hints(target)
    doc = next(
        (
            getattr(k.__dict__.get(attr), "__doc__", None)
            for k in cls.__mro__
            if getattr(k.__dict__.get(attr), "__doc__", None)
        ),
        None,
    )
    summary, arg_docs, returns = parse_docstring(doc)
    fields: dict[str, Any] = {}
    params: list[str] = []
    context: list[str] = []
    for i, (pname, p) in enumerate(sig.parameters.items()):
        if i == 0 and pname in {"self", "cls"}:
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ConfigError(
                f"tool {cls.__qualname__}.{attr} takes *{pname}; tools need named parameters "
                "so that a JSON schema can describe them"
            )
        if pname in CONTEXT_PARAMS:
            context.append(pname)
            continue
        ann = hints.get(pname, p.annotation)
        if ann is inspect.Parameter.empty or isinstance(ann, str):
            ann = Any
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[pname] = (ann, pydantic.Field(default, description=arg_docs.get(pname) or None))
        params.append(pname)
    model = pydantic.create_model(  # type: ignore[call-overload]
        f"{name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    schema = _strip_titles(model.model_json_schema())
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    schema["additionalProperties"] = False
    description = mark.description or summary or f"Tool {name}."
    if returns and not mark.description:
        description = f"{description} Returns: {returns}"
    return ToolSpec(
        name=name,
        method=attr,
        description=description,
        parameters=schema,
        params=tuple(params),
        context=tuple(context),
        is_async=inspect.iscoroutinefunction(target),
        model=model,
        keywords=mark.keywords,
    )


# per class, not stored on the class: cloudpickle must not ship generated pydantic models
_CACHE: weakref.WeakKeyDictionary[type, dict[str, ToolSpec]] = weakref.WeakKeyDictionary()


def collect_tools(cls: type) -> dict[str, ToolSpec]:
    """Every tool of ``cls`` including inherited ones, keyed by tool name (cached per class)."""
    cached = _CACHE.get(cls)
    if cached is not None:
        return cached
    marks: dict[str, _ToolMark] = {}
    for klass in reversed(cls.__mro__):
        found: list[tuple[str, _ToolMark]] = []
        for attr, value in vars(klass).items():
            fn = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            mark = getattr(fn, _MARK, None)
            if isinstance(mark, _ToolMark):
                found.append((attr, mark))
        for attr, mark in sorted(found, key=lambda am: am[1].order):  # in definition order
            marks[attr] = mark
    specs: dict[str, ToolSpec] = {}
    for attr, mark in marks.items():
        fn = inspect.getattr_static(cls, attr, None)
        if fn is None:  # a subclass set the attribute to None: tool removed
            continue
        fn = fn.__func__ if isinstance(fn, (staticmethod, classmethod)) else fn
        own = getattr(fn, _MARK, None)
        spec = _build_spec(cls, attr, fn, own if isinstance(own, _ToolMark) else mark)
        if spec.name in specs:
            raise ConfigError(f"two tools named {spec.name!r} on {cls.__qualname__}")
        specs[spec.name] = spec
    _CACHE[cls] = specs
    return specs
