"""Agent type registry: ``@register_agent`` plus the ``agentlab.agents`` entry-point group.

Types are keyed by a short string stored in each workspace's ``AGENT.json``. Classes
defined in a notebook (module ``__main__``) cannot be imported by name in another process;
:func:`portable_classes` picks them out so an executor can ship the class objects with a
batch (Ray pickles ``__main__`` classes by value) and :func:`ensure_registered` puts them
in the worker's registry.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from importlib import metadata
from typing import Any, TypeVar, overload

from agentlab.agents.base import AgentBase, _set_class_lookup
from agentlab.errors import ConfigError, UnknownNameError

__all__ = [
    "agent_types",
    "ensure_registered",
    "get_agent_class",
    "portable_classes",
    "register_agent",
]

ENTRY_POINT_GROUP = "agentlab.agents"
_REGISTRY: dict[str, type[AgentBase]] = {}
_entry_points_loaded = False

A = TypeVar("A", bound="type[AgentBase]")


@overload
def register_agent(name_or_cls: A) -> A: ...
@overload
def register_agent(name_or_cls: str | None = None) -> Callable[[A], A]: ...


def register_agent(name_or_cls: Any = None) -> Any:
    """Register an :class:`AgentBase` subclass under a type name.

    Use bare (``@register_agent``: the name is the class's ``type_name`` or its lower-case
    class name) or with a name (``@register_agent("trader")``). Re-registering a name with a
    different class replaces it (a notebook cell run twice must keep working).
    """

    def deco(cls: A, name: str | None = None) -> A:
        if not (isinstance(cls, type) and issubclass(cls, AgentBase)):
            raise ConfigError(f"register_agent expects an AgentBase subclass, got {cls!r}")
        key = name or cls.__dict__.get("type_name") or cls.__name__.lower()
        cls.type_name = key
        _REGISTRY[key] = cls
        return cls

    if isinstance(name_or_cls, type):
        return deco(name_or_cls)
    return lambda cls: deco(cls, name_or_cls)


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _REGISTRY:
            cls = ep.load()
            register_agent(ep.name)(cls)


def _load_builtins() -> None:
    importlib.import_module("agentlab.agents.builtin")


def agent_types() -> list[str]:
    """Registered type names (built-ins, decorated classes, entry points), sorted."""
    _load_builtins()
    _load_entry_points()
    return sorted(_REGISTRY)


def get_agent_class(name: str, class_path: str | None = None) -> type[AgentBase]:
    """The class registered as ``name``.

    Args:
        name: the type name.
        class_path: ``"module:QualName"`` from ``AGENT.json``; tried when ``name`` is not
            registered in this process (e.g. a worker that never imported the module).

    Raises:
        UnknownNameError: listing the registered types.
    """
    cls = _REGISTRY.get(name)
    if cls is not None:
        return cls
    _load_builtins()
    _load_entry_points()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if class_path and ":" in class_path and not class_path.startswith("__main__:"):
        module, _, qual = class_path.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in qual.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            obj = None
        if obj is not None:
            register_agent(name)(obj)
            return _REGISTRY[name]
    raise UnknownNameError("agent type", name, list(_REGISTRY))


def portable_classes(names: Iterable[str]) -> dict[str, type[AgentBase]]:
    """The classes among ``names`` that another process could not import by name."""
    out: dict[str, type[AgentBase]] = {}
    for name in set(names):
        cls = get_agent_class(name)
        module = cls.__module__
        if module == "__main__" or "<locals>" in cls.__qualname__:
            out[name] = cls
            continue
        try:
            importlib.import_module(module)
        except ImportError:
            out[name] = cls
    return out


def ensure_registered(classes: dict[str, type[AgentBase]] | None) -> None:
    """Register classes shipped with a batch (idempotent)."""
    for name, cls in (classes or {}).items():
        if _REGISTRY.get(name) is not cls:
            register_agent(name)(cls)


_set_class_lookup(get_agent_class)
