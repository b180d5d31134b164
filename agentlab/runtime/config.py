"""The one validated shape of a society's configuration (``Society.create`` and configs).

``Society.create(...)`` arguments and an ``agentlab run`` TOML/YAML config are checked by
the same pydantic model, :class:`SocietyConfig`, and every problem is reported at once in
one :class:`~agentlab.errors.ConfigError` — each naming the key, what was given and what
is valid — instead of a traceback from deep inside the run (or, worse, a run built from
nonsense: ``agents = "five"`` once became agents of type ``'f'``, ``'i'``...).
Values are checked strictly: ``seed = "7"`` is an error, not silently converted.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentlab.errors import ConfigError

__all__ = [
    "CLI_KEYS",
    "LLM_SPANS_FORMS",
    "RetryConfig",
    "SocietyConfig",
    "llm_span_rate",
    "llm_spans_name",
    "ray_virtual_refusal",
    "validate_society_config",
    "virtual_clock_refusal",
]

#: keys a config file may hold besides the ``Society.create`` arguments
CLI_KEYS = frozenset({"out", "ticks", "until", "progress"})
EXECUTORS = ("local", "ray")


def virtual_clock_refusal(executor: str) -> str:
    """Why ``clock="virtual"`` is refused with an executor other than local and Ray.

    Virtual timings are a function of the one simulated server, client-CPU queue and AIMD
    gate every agent shares; the local executor runs them in one event loop, the Ray
    executor through its time server (runtime/README.md, "Virtual time across Ray
    workers"). Any other executor would give timings that are not reproducible.
    """
    return (
        f"clock 'virtual' needs executor 'local' or 'ray', got {executor!r}: virtual "
        "timings come from the one simulated server, client queue and AIMD gate all agents "
        "share, which only those two keep exact (see 'Virtual time across Ray workers' in "
        f"agentlab/runtime/README.md); use clock='real' with {executor!r}"
    )


def _env_class(name: Any) -> type | None:
    """The env class registered as ``name`` (``None`` when unknown: reported elsewhere)."""
    from agentlab.env.registry import get_env_class

    try:
        return get_env_class(str(name))
    except Exception:
        return None


def ray_virtual_refusal(llm: Any, env: Any, backoff_s: float) -> str | None:
    """Why this society cannot run under ``clock="virtual"`` on Ray, or ``None``.

    The time server reproduces a local virtual run exactly only for a simulated model
    whose calls cost client CPU (``client_overhead_s > 0``: a call is never sent at the
    instant it is issued, which is what lets the server run ahead of the workers), envs
    whose tool calls are tick-synchronous and have no language router (a router's LLM
    calls would run in the env actor), and no backoff between agent-step attempts (a
    sleep in a worker the server cannot order). Every unmet condition is listed.
    """
    from agentlab.llm import LLMClient

    problems = []
    try:
        if isinstance(llm, LLMClient):
            client = llm
        elif isinstance(llm, dict):
            client = LLMClient.from_dict(llm)
        else:
            client = LLMClient(str(llm))
        profile = client.profile
        overhead = profile.client_overhead_s if profile is not None else 0.0
        model = client.model
    except Exception:  # an invalid llm is reported by the llm check itself
        overhead, model = 0.0, repr(llm)
    if overhead <= 0:
        problems.append(
            "a simulated model whose calls cost client CPU (sim/<profile> with "
            f"client_overhead_s > 0, e.g. 'sim/vllm-3b'), got {model}"
        )
    for m in env or ():
        name = m if isinstance(m, str) else m.get("type") if isinstance(m, dict) else None
        if name is None:  # an env object
            cls: type | None = type(m)
            name = getattr(cls, "env_type", None) or type(m).__name__
        else:
            cls = _env_class(name)
        router = isinstance(m, dict) and m.get("router")
        if not getattr(cls, "tick_synchronous", False) or router:
            problems.append(
                "envs whose tool calls are tick-synchronous (an env class declares "
                "tick_synchronous = True when its tool calls take effect at the tick's end, "
                "whatever order agents call in; social_feed does), with no language router, "
                f"got {name!r}" + (f" with router {router!r}" if router else "")
            )
    if backoff_s:
        problems.append(f"retry.backoff_s = 0 (a sleep in a worker), got {backoff_s!r}")
    if not problems:
        return None
    return (
        "clock 'virtual' on executor 'ray' needs " + "; ".join(problems) + ": the time "
        "server keeps a run on Ray equal to the local one only then (see 'Virtual time "
        "across Ray workers' in agentlab/runtime/README.md); use executor='local'"
    )


#: the values of ``llm_spans`` (which LLM calls also get an ``llm.call`` span)
LLM_SPANS_FORMS = ("all", "none", "sample:<rate>")


def llm_span_rate(value: str) -> float:
    """The fraction of LLM calls traced for an ``llm_spans`` value.

    ``"all"`` is 1 (every call gets its ``llm.call`` span, the default), ``"none"`` 0,
    ``"sample:<rate>"`` a rate strictly between 0 and 1 (``"sample:0.01"``: 1 %). Which
    calls are kept is a hash of the run seed, agent, tick and call number, so a rerun, a
    Ray run and a resumed run keep the same spans; ``llm_calls`` rows are always complete.

    Raises:
        ConfigError: anything else, naming the value and the valid forms.
    """
    if value == "all":
        return 1.0
    if value == "none":
        return 0.0
    if isinstance(value, str) and value.startswith("sample:"):
        try:
            rate = float(value[len("sample:") :])
        except ValueError:
            rate = -1.0
        if 0.0 < rate < 1.0:
            return rate
    raise ConfigError(
        f"llm_spans={value!r}: valid: {', '.join(repr(f) for f in LLM_SPANS_FORMS)}, with "
        "0 < rate < 1 (e.g. 'sample:0.01' keeps the spans of 1% of LLM calls)"
    )


def llm_spans_name(rate: float) -> str:
    """The ``llm_spans`` value of a rate from 0 to 1 (inverse of :func:`llm_span_rate`)."""
    if rate >= 1.0:
        return "all"
    if rate <= 0.0:
        return "none"
    return f"sample:{rate!r}"


_Count = Annotated[int, Field(strict=True, ge=0)]
_Seconds = Annotated[float, Field(strict=True, ge=0)]


class RetryConfig(BaseModel):
    """The ``retry`` table: see :class:`~agentlab.runtime.batch.RetryPolicy`."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: Annotated[int, Field(strict=True, ge=1)] = 2
    backoff_s: _Seconds = 0.0
    timeout_s: Annotated[float, Field(strict=True, gt=0)] | None = None


class SocietyConfig(BaseModel):
    """Arguments of ``Society.create`` plus the config-file keys ``out``/``ticks``/``progress``.

    Python objects are accepted where ``Society.create`` takes them (an ``LLMClient`` for
    ``llm``, ``EnvBase`` instances in ``env``, an executor object, a ``RetryPolicy``).
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    out: Annotated[str, Field(strict=True, min_length=1)] | None = None
    ticks: _Count = 1
    until: _Count | None = None  # up to this tick (``ticks``: that many more)
    progress: Annotated[bool, Field(strict=True)] = True
    agents: Any = 10
    env: Any = ()
    llm: Any = "sim/instant"
    seed: Annotated[int, Field(strict=True)] = 0
    executor: Any = "local"
    batch_size: Annotated[int, Field(strict=True, ge=1)] | None = None
    clock: Literal["real", "virtual"] = "real"
    retry: RetryConfig | None = None
    tick_seconds: _Seconds = 0.0
    executor_options: dict[str, Any] | None = None
    keep_checkpoints: Annotated[bool, Field(strict=True)] = False
    #: ``None``: ``AGENTLAB_LLM_SPANS`` or ``"all"`` (see :func:`llm_span_rate`)
    llm_spans: str | None = None
    #: the agent store (``store/packed_store.py``: ``store_kind``)
    store: str = "auto"
    #: the stop rule (``runtime/stop_rule.py``); ``None``: never stop
    max_error_share: Annotated[float, Field(strict=True, ge=0, le=1)] | None = 1.0
    #: what ``Society.create`` does when ``out`` already holds a run
    exist_ok: Annotated[bool, Field(strict=True)] | Literal["replace"] = False

    @field_validator("llm_spans", mode="before")
    @classmethod
    def _llm_spans(cls, v: Any) -> Any:
        if v is not None:
            try:
                llm_span_rate(v)
            except ConfigError as exc:
                raise ValueError(str(exc).removeprefix(f"llm_spans={v!r}: ")) from None
        return v

    @field_validator("store", mode="before")
    @classmethod
    def _store(cls, v: Any) -> Any:
        from agentlab.store.packed_store import store_kind

        if not isinstance(v, str):
            raise ValueError(f"store must be 'auto', 'directory' or 'packed', got {v!r}")
        try:
            store_kind(v, 0)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return v

    @field_validator("agents", mode="before")
    @classmethod
    def _agents(cls, v: Any) -> Any:
        total = _agent_count(v)
        if total < 1:
            raise ValueError(f"a society needs at least one agent, got {v!r}")
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: Any) -> Any:
        from agentlab.env.base import EnvBase

        if isinstance(v, str | bytes) or not isinstance(v, list | tuple):
            raise ValueError(
                f"env must be a list of module names, {{type: name, ...}} tables or EnvBase "
                f"instances, e.g. ['social_feed']; got {v!r}"
            )
        for i, m in enumerate(v):
            ok = (isinstance(m, str) and m) or isinstance(m, EnvBase)
            ok = ok or (isinstance(m, dict) and isinstance(m.get("type"), str) and m["type"])
            if not ok:
                raise ValueError(
                    f"env[{i}] = {m!r}: use a module name, {{type: name, ...}} or an EnvBase"
                )
        return v

    @field_validator("llm", mode="before")
    @classmethod
    def _llm(cls, v: Any) -> Any:
        from agentlab.llm import LLMClient

        if isinstance(v, LLMClient) or (isinstance(v, str) and v):
            return v
        if isinstance(v, dict) and isinstance(v.get("model"), str) and v["model"]:
            return v
        raise ValueError(
            "llm must be a model string ('sim/vllm-3b', 'openai/gpt-4o-mini'), a table "
            f"with a 'model' key, or an LLMClient; got {v!r}"
        )

    @field_validator("executor", mode="before")
    @classmethod
    def _executor(cls, v: Any) -> Any:
        if isinstance(v, str):
            if v not in EXECUTORS:
                raise ValueError(f"unknown executor {v!r}; valid: {', '.join(EXECUTORS)}")
            return v
        if isinstance(getattr(v, "name", None), str) and callable(getattr(v, "run_batches", None)):
            return v
        raise ValueError(
            f"executor must be one of {', '.join(EXECUTORS)} or an Executor; got {v!r}"
        )

    @field_validator("retry", mode="before")
    @classmethod
    def _retry(cls, v: Any) -> Any:
        from agentlab.runtime.batch import RetryPolicy

        if isinstance(v, RetryPolicy):
            return {
                "max_attempts": v.max_attempts,
                "backoff_s": v.backoff_s,
                "timeout_s": v.timeout_s,
            }
        if v is not None and not isinstance(v, dict | RetryConfig):
            raise ValueError(
                f"retry must be a table like {{max_attempts = 3, backoff_s = 1.0}}; got {v!r}"
            )
        return v

    @model_validator(mode="after")
    def _virtual_needs_local(self) -> SocietyConfig:
        name = self.executor if isinstance(self.executor, str) else self.executor.name
        if self.clock == "virtual" and name == "ray":
            why = ray_virtual_refusal(self.llm, self.env, self.retry.backoff_s if self.retry else 0)
            if why:
                raise ValueError(why)
        elif self.clock == "virtual" and name != "local":
            raise ValueError(virtual_clock_refusal(name))
        return self


def _agent_count(v: Any) -> int:
    """Total agents described by ``v``; ``ValueError`` with the valid forms otherwise."""
    forms = (
        "an int (that many LLM persona agents), a {type: n} table, or a list of "
        "{type, n | id, config?} tables / (type, id, config) tuples"
    )
    if isinstance(v, bool) or v is None or isinstance(v, str | bytes | float):
        raise ValueError(f"agents must be {forms}; got {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, dict):
        for t, n in v.items():
            if not isinstance(t, str) or isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"agents.{t}: need a count >= 0 of agents of that type, got {n!r}")
        return sum(v.values())
    if not isinstance(v, list | tuple):
        raise ValueError(f"agents must be {forms}; got {v!r}")
    total = 0
    for i, item in enumerate(v):
        if isinstance(item, list | tuple):
            if not (2 <= len(item) <= 3 and all(isinstance(x, str) for x in item[:2])):
                raise ValueError(f"agents[{i}] = {item!r}: a tuple is (type, id[, config])")
            if len(item) == 3 and not isinstance(item[2], dict):
                raise ValueError(f"agents[{i}]: config must be a table, got {item[2]!r}")
            total += 1
            continue
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise ValueError(f"agents[{i}] = {item!r}: need a table with a 'type' key, or {forms}")
        unknown = sorted(set(item) - {"type", "n", "id", "config", "prefix"})
        if unknown:
            raise ValueError(
                f"agents[{i}]: unknown keys {unknown}; valid: type, n, id, config, prefix"
            )
        if ("n" in item) == ("id" in item):
            raise ValueError(f"agents[{i}]: give exactly one of 'n' (a count) or 'id'")
        n = item.get("n", 1)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"agents[{i}].n must be a count >= 0, got {n!r}")
        if not isinstance(item.get("config", {}), dict):
            raise ValueError(f"agents[{i}].config must be a table, got {item['config']!r}")
        total += n
    return total


def validate_society_config(values: dict[str, Any], *, source: str = "") -> SocietyConfig:
    """Validate ``values``; raise one ``ConfigError`` listing every problem.

    Args:
        values: ``Society.create`` keyword arguments or a parsed config file.
        source: where they came from (a file name), for the message.
    """
    try:
        return SocietyConfig.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None


def _describe(exc: ValidationError, source: str) -> str:
    valid = sorted(SocietyConfig.model_fields)
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            keys = sorted(RetryConfig.model_fields) if err["loc"][0] == "retry" else valid
            lines.append(f"  {loc}: unknown key; valid: {', '.join(keys)}")
            continue
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if not err["loc"] or repr(got) in msg else f" (got {got!r})"
        lines.append(f"  {loc}: {msg}{shown}")
    where = f" in {source}" if source else ""
    n = len(lines)
    return f"{n} problem{'s' if n > 1 else ''} with the society config{where}:\n" + "\n".join(lines)
