"""Registry of env module types by string, and specs that rebuild a module elsewhere.

A *spec* is a small JSON-serialisable dict that another process (the Ray actor running the
router) turns back into the same module::

    {"type": "social_feed", "class": {"import": "agentlab.env.social_feed:SocialFeed"},
     "config": {...}, "seed": 0}

Classes that cannot be imported by name — defined in a notebook cell (``__main__``) or
inside a function — travel by value: ``{"pickle": "<base64 cloudpickle>"}``. cloudpickle
is taken from the standalone package if installed, else from Ray's vendored copy (loaded
without importing Ray, see ``_cloudpickle``).
"""

from __future__ import annotations

import base64
import importlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from agentlab.env.base import EnvBase
from agentlab.errors import ConfigError, UnknownNameError

__all__ = [
    "ENTRY_POINT_GROUP",
    "class_ref",
    "create_env",
    "env_from_spec",
    "env_spec",
    "env_types",
    "get_env_class",
    "register_env",
    "resolve_class_ref",
]

_REGISTRY: dict[str, type[EnvBase]] = {}
#: entry-point group through which other packages register env types
ENTRY_POINT_GROUP = "agentlab.envs"
E = TypeVar("E", bound=type[EnvBase])


def register_env(name: str) -> Callable[[E], E]:
    """Class decorator: register an :class:`EnvBase` subclass under ``name``.

    Re-registering the same name replaces the entry (a notebook cell run twice).
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"env type name must be a non-empty string, got {name!r}")

    def wrap(cls: E) -> E:
        if not (isinstance(cls, type) and issubclass(cls, EnvBase)):
            raise ConfigError(f"register_env({name!r}) needs an EnvBase subclass, got {cls!r}")
        cls.env_type = name
        _REGISTRY[name] = cls
        return cls

    return wrap


def env_types() -> list[str]:
    """Registered env type names, sorted."""
    return sorted(_REGISTRY)


def get_env_class(name: str) -> type[EnvBase]:
    """The class registered as ``name``.

    Raises:
        UnknownNameError: listing the registered names.
    """
    cls = _REGISTRY.get(name) or _from_entry_point(name)
    if cls is None:
        raise UnknownNameError("env type", name, list(_REGISTRY))
    return cls


def _from_entry_point(name: str) -> type[EnvBase] | None:
    # other packages add env types under [project.entry-points."agentlab.envs"]
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            cls = ep.load()
            if isinstance(cls, type) and issubclass(cls, EnvBase):
                register_env(name)(cls)
                return cls
            raise ConfigError(
                f"entry point {ep.value!r} for env {name!r} is not an EnvBase subclass"
            )
    return None


def create_env(kind: str | type[EnvBase], *, seed: int = 0, **config: Any) -> EnvBase:
    """Instantiate an env module by registry name (or class) and ``init(seed)`` it."""
    cls = get_env_class(kind) if isinstance(kind, str) else kind
    env = cls(**config)
    env.init(seed)
    return env


def _cloudpickle() -> Any:
    try:
        import cloudpickle

        return cloudpickle
    except ImportError:
        from agentlab.env import _cloudpickle  # Ray's vendored copy, without import ray

        return _cloudpickle


def _importable(cls: type) -> bool:
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        return False
    try:
        obj: Any = importlib.import_module(cls.__module__)
        for part in cls.__qualname__.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return False
    return obj is cls


def class_ref(cls: type) -> dict[str, str]:
    """A JSON-serialisable reference to ``cls``: by import path, or by value."""
    if _importable(cls):
        return {"import": f"{cls.__module__}:{cls.__qualname__}"}
    data = _cloudpickle().dumps(cls)
    return {"pickle": base64.b64encode(data).decode("ascii")}


def resolve_class_ref(ref: dict[str, str]) -> type:
    """Inverse of :func:`class_ref`."""
    if "import" in ref:
        module, _, qual = ref["import"].partition(":")
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
        return obj  # type: ignore[no-any-return]
    if "pickle" in ref:
        import pickle

        # cloudpickle output loads with plain pickle once cloudpickle is importable
        _cloudpickle()
        return pickle.loads(base64.b64decode(ref["pickle"]))  # type: ignore[no-any-return]
    raise ConfigError(f"bad class reference {ref!r}; expected an 'import' or 'pickle' key")


def env_spec(env: EnvBase) -> dict[str, Any]:
    """A small JSON-serialisable spec from which :func:`env_from_spec` rebuilds ``env``.

    The spec carries type, class, config and seed, not the live state: the receiving side
    restores state from the run directory.
    """
    try:
        json.dumps(env.config)
    except TypeError as exc:
        raise ConfigError(
            f"env config of {type(env).__name__} is not JSON-serialisable: {exc}"
        ) from None
    return {
        "type": env.env_type or type(env).__qualname__,
        "class": class_ref(type(env)),
        "config": dict(env.config),
        "seed": env.seed,
    }


def env_from_spec(spec: dict[str, Any], *, run_dir: str | None = None) -> EnvBase:
    """Rebuild a module from :func:`env_spec`: construct, ``init(seed)``, then restore.

    Args:
        spec: the spec.
        run_dir: if given, the module's checkpoint there (if any) is restored after init.
    """
    if "class" in spec:
        cls = resolve_class_ref(spec["class"])
        if spec.get("type") and spec["type"] not in _REGISTRY and issubclass(cls, EnvBase):
            _REGISTRY[spec["type"]] = cls  # so later by-name lookups in this process work
    else:
        cls = get_env_class(spec["type"])
    if not (isinstance(cls, type) and issubclass(cls, EnvBase)):
        raise ConfigError(f"spec class {cls!r} is not an EnvBase subclass")
    env = create_env(cls, seed=int(spec.get("seed", 0)), **spec.get("config", {}))
    if run_dir is not None:
        env.restore(run_dir)
    return env
