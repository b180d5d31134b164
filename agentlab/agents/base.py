"""``AgentBase``: an agent is a workspace on disk plus a ``step(tick)`` coroutine.

The runtime rebuilds an agent for every step (``from_workspace``), awaits ``step``, then
persists it (``to_workspace``); nothing lives only in memory between ticks. Subclasses
keep their persistent data in ``self.state`` (a JSON-able dict) or override
:meth:`get_state` / :meth:`set_state`.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, TypeVar

import orjson

from agentlab.agents.workspace import (
    SLOT_KEYS,
    Workspace,
    decode_slot,
    encode_slot,
    pick_version,
    workspace_of,
)
from agentlab.core.ids import validate_agent_id
from agentlab.core.records import LLMResponse
from agentlab.errors import AgentError, ConfigError, CorruptRecordError
from agentlab.store.agent_store import AgentStore
from agentlab.store.packed_store import open_agent_store

__all__ = [
    "AGENT_SCHEMA_VERSION",
    "AgentBase",
    "AgentEnv",
    "AgentLLM",
    "AgentServices",
    "load_agent",
]

AGENT_SCHEMA_VERSION = 1

T = TypeVar("T", bound="AgentBase")

#: ``registry.get_agent_class``: :mod:`agentlab.agents.registry` imports this module (to
#: check what it registers) and installs its lookup here with :func:`_set_class_lookup`;
#: the package ``__init__`` imports the registry, so it is set before any agent loads.
_class_lookup: Callable[[str, str | None], type[AgentBase]] | None = None


def _set_class_lookup(lookup: Callable[[str, str | None], type[AgentBase]]) -> None:
    global _class_lookup
    _class_lookup = lookup


def _registered_class(name: str, class_path: str | None) -> type[AgentBase]:
    if _class_lookup is None:  # pragma: no cover - the package __init__ installs it
        raise AgentError("the agent registry is not loaded: import agentlab.agents")
    return _class_lookup(name, class_path)


class AgentLLM(Protocol):
    """The LLM an agent calls: ``LLMClient.complete`` with the run's recording around it."""

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> LLMResponse:
        """One chat completion; ``agent_id``/``tick`` are filled in, the call recorded."""
        ...


class AgentEnv(Protocol):
    """The env as one agent sees it (every call carries the agent id)."""

    def tools(self) -> list[dict[str, Any]]:
        """OpenAI tool schemas of the env's tools."""
        ...

    def describe(self) -> str:
        """The world, as text for a prompt."""
        ...

    async def call(
        self, name: str, arguments: dict[str, Any] | None = None, *, call_id: str | None = None
    ) -> Any:
        """Run one tool (``call_id``: the model's tool-call id, recorded on the span)."""
        ...

    async def ask(self, text: str, *, module: str | None = None) -> dict[str, Any]:
        """Ask the *environment* in words (not a person: that is ``ask_user``); the env
        module's router turns it into tool calls. Returns ``RouteResult.to_dict()``."""
        ...

    async def observe(self) -> Any:
        """What the agent sees now."""
        ...


class AgentServices(Protocol):
    """What the runtime hands an agent for one step (``agentlab.runtime.AgentContext``).

    The per-agent view of the run's one services object
    (:class:`agentlab.runtime.RunServices`), which the ``Society``, ``Experiment`` and
    ``AgentSystem`` all record through.

    Attributes:
        agent_id: the agent being stepped.
        llm: ``await llm.complete(messages, tools=..., labels=...)`` -> ``LLMResponse``;
            ``agent_id`` and ``tick`` are filled in and every call lands in ``llm_calls``
            (each attempt in ``llm_attempts``).
        env: ``await env.call(name, arguments)`` (one tool call), ``await env.ask(text)``
            (a natural-language request the env's router turns into tool calls — the
            environment answers, not a person; see ``ask_user`` for that),
            ``await env.observe()``, ``env.tools()`` (OpenAI tool schemas),
            ``env.describe()`` (world text); ``None`` without env.
        tick: the tick being stepped.
        attempt: 1 for the first try of this step, 2 for the first retry, ...
    """

    agent_id: str
    llm: AgentLLM
    env: AgentEnv | None
    tick: int
    attempt: int

    @property
    def rng(self) -> random.Random:
        """A ``random.Random`` seeded from ``(seed, agent_id, tick)``."""
        ...

    def now(self) -> float:
        """The run clock's time."""
        ...

    def message_sink(self) -> Any:
        """A ``MessageSink`` writing the run's ``messages`` (give it to a ``MsgHub``)."""
        ...

    async def ask_user(
        self, question: str, schema: Any = None, *, timeout: float | None = None
    ) -> Any:
        """Ask a person and wait for the answer (recorded in the run log)."""
        ...


def _store_of(run: Any) -> AgentStore:
    if isinstance(run, str | os.PathLike):
        return open_agent_store(run)  # a packed run's path reaches its packed store
    store = getattr(run, "store", run)  # a Society or a store
    if hasattr(store, "write_many") and hasattr(store, "read"):
        return store  # type: ignore[no-any-return]
    raise ConfigError(f"create() expects a run directory or an AgentStore, got {run!r}")


_UNREAD: Any = object()


def _read_committed(
    ws: Workspace, committed: int | None, guessed: bytes | None = _UNREAD
) -> tuple[int, int, Any] | None:
    # Slots alternate, so in steady state version C sits in slot C % 2: if that slot holds
    # exactly C nothing newer can qualify and the second read is skipped. ``guessed``: that
    # slot's bytes when the caller already read them (a batch reads them all at once).
    if committed is not None:
        guess = committed % 2
        raw = ws.read_bytes(SLOT_KEYS[guess]) if guessed is _UNREAD else guessed
        if raw is not None:
            try:
                tick, value = decode_slot(raw)
            except CorruptRecordError:
                tick = -1
            if tick == committed:
                return guess, tick, value
    slots = [ws.read_bytes(k) for k in SLOT_KEYS]
    if all(x is None for x in slots):
        return None
    return pick_version(slots, committed, where=f"of {ws.agent_id!r} ({ws.path or ws.store})")


def load_agent(
    klass: type[T],
    ws: Workspace,
    services: AgentServices | None,
    committed_tick: int | None,
    config_raw: bytes | None,
    slot_raw: bytes | None = _UNREAD,
) -> T:
    """Build ``klass`` from a workspace's bytes already read (``from_workspace``'s core).

    ``slot_raw``: the bytes of slot ``committed_tick % 2`` when the caller read them (the
    runtime reads a batch's configs and slots in one store call); otherwise, or when that
    slot does not hold the committed version, the slots are read here.

    Raises:
        AgentError: no ``config.json`` (not an agent workspace).
        CorruptRecordError: unreadable config or committed state.
    """
    if config_raw is None:
        raise AgentError(f"no agent workspace for {ws.agent_id!r} in {ws.store!r}")
    try:
        config = orjson.loads(config_raw)
    except orjson.JSONDecodeError as exc:
        raise CorruptRecordError(
            f"workspace key 'config.json' of agent {ws.agent_id!r} is not valid JSON: {exc}"
        ) from exc
    agent = klass(ws.agent_id, config, workspace=ws, services=services)
    found = _read_committed(ws, committed_tick, slot_raw)
    if found is not None:
        agent._base_slot, agent.base_tick, value = found
        agent.set_state(value)
    return agent


class AgentBase:
    """Base class of every agent type; register subclasses with ``@register_agent``.

    Args:
        agent_id: validated id (one path component).
        config: JSON-able configuration, stored in ``config.json``.
        workspace: where the agent persists (``None`` for a detached agent).
        services: runtime services for :meth:`step` (``None`` outside a run).
    """

    #: registry key (set by ``register_agent``)
    type_name: ClassVar[str] = ""

    def __init__(
        self,
        agent_id: str,
        config: dict[str, Any] | None = None,
        *,
        workspace: Workspace | None = None,
        services: AgentServices | None = None,
    ) -> None:
        # The workspace's id was checked when the handle was made (or, for the runtime's
        # Workspace.of_known, when the society was created): no second regex per step.
        known = workspace is not None and workspace.agent_id is agent_id
        self.agent_id = agent_id if known else validate_agent_id(agent_id)
        self.config: dict[str, Any] = dict(config or {})
        self.workspace = workspace
        self.services = services
        self.state: dict[str, Any] = self.initial_state()
        #: tick of the loaded state version; ``to_workspace`` writes ``tick`` on top of it
        self.base_tick = 0
        self._base_slot = 0  # the slot holding the loaded version (never overwritten)

    _rng: random.Random | None = None

    @property
    def rng(self) -> random.Random:
        """The runtime's per-(seed, agent, tick) generator; a fixed seed when detached.

        Built on first use: an agent that draws nothing pays nothing for it.
        """
        rng = self._rng
        if rng is None:
            rng = getattr(self.services, "rng", None)
            self._rng = rng = rng if rng is not None else random.Random(0)
        return rng

    @rng.setter
    def rng(self, value: random.Random) -> None:
        self._rng = value

    # --- overridables ------------------------------------------------------------------

    def initial_state(self) -> dict[str, Any]:
        """The state of a freshly created agent (from ``self.config``)."""
        return {}

    def get_state(self) -> Any:
        """The JSON-able value persisted in the state slots (``state/state.{0,1}.json``)."""
        return self.state

    def set_state(self, value: Any) -> None:
        """Install a value read back from the committed state slot."""
        self.state = value

    async def step(self, tick: int) -> None:
        """Advance the agent by one tick (override)."""
        raise NotImplementedError(f"{type(self).__name__}.step")

    def summary(self) -> dict[str, Any]:
        """A small JSON-able dict written per tick to the ``agent_states`` dataset."""
        return {}

    # --- workspace ---------------------------------------------------------------------

    @classmethod
    def create(cls: type[T], run: Any, agent_id: str, config: dict[str, Any] | None = None) -> T:
        """Write a new workspace and return the agent.

        Args:
            run: the run directory (its directory or packed agent store), an
                ``AgentStore``, or an object with a ``.store``.
            agent_id: the new agent's id (validated; must not exist yet).
            config: JSON-able configuration.

        Raises:
            AgentError: the workspace already exists.
        """
        if cls is AgentBase or not cls.type_name:
            raise ConfigError(
                f"{cls.__name__} is not a registered agent type; decorate it with @register_agent"
            )
        ws = Workspace(_store_of(run), validate_agent_id(agent_id))
        if ws.exists():
            raise AgentError(f"agent {agent_id!r} already exists in {ws.store!r}")
        agent, items = cls.new_workspace_items(agent_id, config, workspace=ws)
        # AGENT.json goes last (atomically): its presence means the workspace is complete,
        # so the files before it can be plain writes (a rename each made create 3x slower).
        if ws.path is not None:
            (ws.path / "state").mkdir(parents=True, exist_ok=True)
        ws.overwrite_bytes("config.json", items["config.json"])
        ws.overwrite_bytes(SLOT_KEYS[0], items[SLOT_KEYS[0]])
        ws.write_bytes("AGENT.json", items["AGENT.json"])
        return agent

    @classmethod
    def new_workspace_items(
        cls: type[T],
        agent_id: str,
        config: dict[str, Any] | None = None,
        *,
        workspace: Workspace | None = None,
    ) -> tuple[T, dict[str, bytes]]:
        """The new agent and the keys of its fresh workspace (``AGENT.json`` last).

        What :meth:`create` writes; a bulk writer (``runtime/population.py``) stores many
        agents' items in one transaction instead.
        """
        agent = cls(agent_id, config, workspace=workspace)
        ident = {
            "schema_version": AGENT_SCHEMA_VERSION,
            "agent_id": agent_id,
            "type": cls.type_name,
            "class": f"{cls.__module__}:{cls.__qualname__}",
        }
        return agent, {
            "config.json": orjson.dumps(agent.config, option=orjson.OPT_SORT_KEYS),
            SLOT_KEYS[0]: encode_slot(0, agent.get_state()),
            "AGENT.json": orjson.dumps(ident, option=orjson.OPT_SORT_KEYS),
        }

    @classmethod
    def from_workspace(
        cls,
        target: Workspace | str | os.PathLike[str] | tuple[AgentStore, str],
        services: AgentServices | None = None,
        *,
        committed_tick: int | None = None,
        agent_class: type[AgentBase] | None = None,
    ) -> AgentBase:
        """Rebuild an agent from its workspace.

        Args:
            target: the workspace directory, a ``(store, agent_id)`` pair or a handle.
            services: runtime services for ``step``.
            committed_tick: load the newest state not after this tick (resume); ``None``
                loads the newest.
            agent_class: skip the registry lookup (the runtime passes it).
        """
        ws = workspace_of(target)
        if agent_class is not None and cls is AgentBase:
            klass = agent_class  # the runtime knows the type: skip reading AGENT.json
        else:
            ident = ws.read_json("AGENT.json")
            if ident is None:
                raise AgentError(f"no agent workspace for {ws.agent_id!r} in {ws.store!r}")
            klass = agent_class or _registered_class(ident["type"], ident.get("class"))
        if cls is not AgentBase and not issubclass(klass, cls):
            raise AgentError(
                f"agent {ws.agent_id!r} has type {klass.type_name!r} ({klass.__name__}), "
                f"not a {cls.__name__}"
            )
        return load_agent(klass, ws, services, committed_tick, ws.read_bytes("config.json"))

    def to_workspace(self, tick: int | None = None) -> None:
        """Persist the state as the version of ``tick`` (default: the loaded tick).

        A new tick goes into the slot *not* holding the loaded version, so an uncommitted
        tick never destroys the committed state (see ``workspace.py``); rewriting the
        loaded tick itself replaces its slot atomically.
        """
        if self.workspace is None:
            raise AgentError(f"agent {self.agent_id!r} has no workspace to persist to")
        t = self.base_tick if tick is None else int(tick)
        data = encode_slot(t, self.get_state())
        if t == self.base_tick:
            self.workspace.write_bytes(SLOT_KEYS[self._base_slot], data)
        else:
            slot = 1 - self._base_slot
            self.workspace.overwrite_bytes(SLOT_KEYS[slot], data)
            self.base_tick, self._base_slot = t, slot

    def log(self, name: str, record: dict[str, Any]) -> None:
        """Append a diagnostic JSON line to ``.runtime/logs/<name>.jsonl`` (best effort).

        A store without files that can append (a Ray batch's segment) takes the line; the
        driver appends it to the run's workspace.
        """
        path = self.workspace.path if self.workspace else None
        if path is None:
            append = getattr(self.workspace.store, "append", None) if self.workspace else None
            if append is not None:
                append(self.agent_id, f".runtime/logs/{name}.jsonl", orjson.dumps(record) + b"\n")
            return
        logs = path / ".runtime" / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.jsonl", "ab") as f:
            f.write(orjson.dumps(record) + b"\n")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.agent_id!r} tick={self.base_tick}>"
