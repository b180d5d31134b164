"""Spans: ``Tracer`` writes finished spans to ``trace/<shard>.jsonl``.

```python
tracer = get_tracer(run_dir, clock=clock)
with tracer.trace_span("tick", tick=3) as span:      # or: async with / @tracer.trace_span(...)
    child = tracer.start_span("llm.call", model="sim/vllm-3b")   # parent = current span
    tracer.record_event("retry", attempt=2)                      # on the current span
    tracer.end_span(child, status="ok", tokens=42)
```

A span row: ``trace_id`` (32 hex), ``span_id`` (16 hex), ``parent`` (16 hex or null),
``name``, ``kind``, ``start``/``end`` (seconds from the tracer's clock), ``status``
(``ok``/``error``/``unset``), ``status_message``, ``attributes`` (object), ``events``
(list of ``{name, ts, attributes}``), plus ``_shard``/``_seq``. Spans are written when they
end; the current span travels in a ``contextvars`` variable (so it follows asyncio tasks).
To continue a trace in another process pass ``span.context`` (a small dict) as ``parent``.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import os
import random
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from agentlab.core.clock import Clock, RealClock
from agentlab.errors import ConfigError
from agentlab.store._writer import _LogWriter, encode_mapping, get_writer
from agentlab.store.layout import TRACE_DIR

if TYPE_CHECKING:
    from agentlab.core.records import CallRecord

__all__ = [
    "Span",
    "Tracer",
    "genai_agent_attrs",
    "genai_llm_attrs",
    "genai_provider",
    "genai_tool_attrs",
    "get_tracer",
    "new_span_id",
    "new_trace_id",
]

F = TypeVar("F", bound=Callable[..., Any])
_STATUSES = ("ok", "error", "unset")
_CURRENT: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "agentlab_span", default=None
)
# Span and trace ids: unique, not reproducible. One generator per process seeded from the
# OS (two os.urandom syscalls per span were ~2 µs of every LLM call); reseeded in a forked
# child so parent and child never hand out the same ids.
_IDS = random.Random(os.urandom(32))
# Span ids are drawn _ID_CHUNK at a time (one getrandbits and one hex format) and handed
# out by a list iterator: ~0.2 µs per id instead of ~0.4, two per agent-step. ``next`` on a
# list iterator is atomic under the GIL, so threads never get the same id; two threads
# refilling at once each get their own draw.
_ID_CHUNK = 256
_id_pool: Iterator[str] = iter(())


def _reseed_ids() -> None:
    global _id_pool
    _IDS.seed(os.urandom(32))
    _id_pool = iter(())  # the parent's undrawn ids are the parent's


os.register_at_fork(after_in_child=_reseed_ids)


def _refill_ids() -> str:
    global _id_pool
    buf = f"{_IDS.getrandbits(64 * _ID_CHUNK):0{16 * _ID_CHUNK}x}"
    _id_pool = iter([buf[i : i + 16] for i in range(16, len(buf), 16)])
    return buf[:16]


def new_trace_id() -> str:
    """32 random hex digits (a W3C / OpenTelemetry trace id)."""
    return f"{_IDS.getrandbits(128):032x}"


def new_span_id() -> str:
    """16 random hex digits (a W3C / OpenTelemetry span id)."""
    return next(_id_pool, None) or _refill_ids()


class Span:
    """One unit of work. Mutable until it ends; then it is written and frozen."""

    __slots__ = (
        "attributes",
        "end",
        "events",
        "kind",
        "name",
        "parent",
        "span_id",
        "start",
        "status",
        "status_message",
        "trace_id",
    )

    def __init__(
        self,
        name: str,
        trace_id: str,
        span_id: str,
        parent: str | None,
        start: float,
        attributes: dict[str, Any],
        kind: str = "internal",
    ) -> None:
        self.name, self.trace_id, self.span_id, self.parent = name, trace_id, span_id, parent
        self.start = start
        self.end: float | None = None
        self.kind = kind
        self.attributes = attributes
        self.events: list[dict[str, Any]] = []
        self.status = "unset"
        self.status_message: str | None = None

    @property
    def context(self) -> dict[str, str]:
        """``{"trace_id", "span_id"}``: pass it as ``parent`` in another process."""
        return {"trace_id": self.trace_id, "span_id": self.span_id}

    @property
    def ended(self) -> bool:
        return self.end is not None

    def set_attributes(self, **attrs: Any) -> None:
        """Add or replace attributes."""
        self.attributes.update(attrs)

    def to_dict(self) -> dict[str, Any]:
        """The row written to the trace shard (without ``_shard``/``_seq``)."""
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent": self.parent,
            "name": self.name,
            "kind": self.kind,
            "start": self.start,
            "end": self.end,
            "status": self.status,
            "status_message": self.status_message,
            "attributes": self.attributes,
            "events": self.events,
        }

    def __repr__(self) -> str:
        return f"Span({self.name!r}, span_id={self.span_id!r}, status={self.status!r})"


#: what a span's ``parent`` may be: a :class:`Span`, its ``context`` dict, ``(trace_id,
#: span_id)``, or ``None`` (the current span, else a new trace)
SpanParent = Span | Mapping[str, Any] | tuple[str, str] | None


def _parent_ids(parent: Any) -> tuple[str | None, str | None]:
    if parent is None:
        return None, None
    if isinstance(parent, Span):
        return parent.trace_id, parent.span_id
    if isinstance(parent, Mapping):
        return str(parent["trace_id"]), str(parent["span_id"])
    if isinstance(parent, tuple) and len(parent) == 2:
        return str(parent[0]), str(parent[1])
    raise ConfigError(
        f"invalid span parent {parent!r}; pass a Span, span.context dict, or (trace_id, span_id)"
    )


class Tracer:
    """Creates spans and writes them through the process's run-log writer.

    Args:
        run_dir: the run directory.
        clock: source of timestamps (default :class:`~agentlab.core.clock.RealClock`).
        shard: shard file stem (default ``<hostname>-<pid>``, shared with the replay sink).
        **settings: writer settings on first creation (``flush_interval``, ``fsync``...).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        shard: str | None = None,
        **settings: Any,
    ) -> None:
        self._writer: _LogWriter = get_writer(run_dir, shard, **settings)
        self.clock: Clock = clock or RealClock()
        self._open: dict[str, Span] = {}
        self._lock = threading.Lock()

    @property
    def run_dir(self) -> Path:
        return self._writer.run_dir

    # current_span, activate and deactivate are the context variable's own methods, not
    # Python functions around them: no frame per call (several per agent-step).
    #: ``current_span()``: the span of the enclosing ``trace_span`` block in this context,
    #: if any.
    current_span = staticmethod(_CURRENT.get)

    def start_span(
        self, name: str, parent: SpanParent = None, *, kind: str = "internal", **attrs: Any
    ) -> Span:
        """Open a span. ``parent`` defaults to the current span; else a new trace starts."""
        trace_id, parent_id = _parent_ids(parent if parent is not None else _CURRENT.get())
        span = Span(
            name,
            trace_id or new_trace_id(),
            new_span_id(),
            parent_id,
            self.clock.now(),
            attrs,
            kind,
        )
        with self._lock:
            self._open[span.span_id] = span
        return span

    def open_span(
        self, name: str, parent: SpanParent = None, *, kind: str = "internal", **attrs: Any
    ) -> Span:
        """A span no one else tracks (no open-span record, not ended by :meth:`close`).

        For hot paths that end it themselves with :meth:`finish_row` and write the row in
        a batch (:meth:`extend`); make it the current span with :meth:`activate` so the
        spans started inside it become its children.
        """
        return self.child_span(name, self.parent_ids(parent), attrs, kind)

    @staticmethod
    def parent_ids(parent: SpanParent = None) -> tuple[str | None, str | None]:
        """``(trace_id, span_id)`` of ``parent`` (default: the current span), or
        ``(None, None)`` without one: taken once for many :meth:`child_span` calls."""
        return _parent_ids(parent if parent is not None else _CURRENT.get())

    def child_span(
        self,
        name: str,
        ids: tuple[str | None, str | None],
        attributes: dict[str, Any],
        kind: str = "internal",
    ) -> Span:
        """:meth:`open_span` for hot paths: the parent's ids from :meth:`parent_ids`, taken
        once for many spans (a batch's agent steps), and ``attributes`` the span's own dict
        (not copied). Without a parent (``(None, None)``) each span starts its own trace.
        End it with :meth:`finish_row`."""
        trace_id, parent_id = ids
        return Span(name, trace_id or new_trace_id(), new_span_id(), parent_id,
                    self.clock.now(), attributes, kind)  # fmt: skip

    def finish_row(
        self, span: Span, status: str = "ok", message: str | None = None, **attrs: Any
    ) -> dict[str, Any]:
        """End a span from :meth:`open_span` (or :meth:`child_span`) and return its row
        (to :meth:`extend`)."""
        if status != "ok" and status not in _STATUSES:
            raise ConfigError(f"unknown span status {status!r}; valid: {', '.join(_STATUSES)}")
        span.end = self.clock.now()
        span.status, span.status_message = status, message
        if attrs:
            span.attributes.update(attrs)
        return span.to_dict()

    #: ``activate(span)``: make ``span`` the current one (the parent of spans started in
    #: this context); returns the token that undoes it with :meth:`deactivate`.
    activate = staticmethod(_CURRENT.set)
    #: ``deactivate(token)``: restore the current span :meth:`activate` replaced.
    deactivate = staticmethod(_CURRENT.reset)

    def end_span(
        self, span: Span, status: str = "ok", message: str | None = None, **attrs: Any
    ) -> None:
        """Close ``span`` (idempotent), add ``attrs``, and queue it for writing."""
        if status not in _STATUSES:
            raise ConfigError(f"unknown span status {status!r}; valid: {', '.join(_STATUSES)}")
        with self._lock:
            if span.end is not None:
                return
            self._open.pop(span.span_id, None)
            span.end = self.clock.now()
        span.status, span.status_message = status, message
        if attrs:
            span.attributes.update(attrs)
        # encoded now (the bytes the flush gives it): the trace shard then holds only
        # encoded rows, which the flush joins without a Python loop (_writer.encode_mapping)
        w = self._writer
        w.extend(w.stream(f"{TRACE_DIR}/{w.shard}.jsonl"), [encode_mapping(span.to_dict())],
                 copy=False)  # fmt: skip

    def span_row(
        self,
        name: str,
        start: float,
        end: float,
        attributes: dict[str, Any],
        status: str = "ok",
        message: str | None = None,
        kind: str = "internal",
        *,
        parent: SpanParent = None,
    ) -> dict[str, Any]:
        """The row of a span that already ended, built in one go (no open-span record).

        For hot paths that know a span's start and end (an LLM call): the same row
        :meth:`end_span` writes, to be written later with :meth:`extend`. ``parent``
        defaults to the current span, as in :meth:`start_span`.
        """
        if status not in _STATUSES:
            raise ConfigError(f"unknown span status {status!r}; valid: {', '.join(_STATUSES)}")
        cur = parent if parent is not None else _CURRENT.get()
        trace_id: str | None
        if cur is None:  # a new trace: both ids from one draw, formatted once
            ids = f"{_IDS.getrandbits(192):048x}"
            trace_id, span_id, parent_id = ids[:32], ids[32:], None
        else:
            (trace_id, parent_id), span_id = _parent_ids(cur), new_span_id()
        return {
            "trace_id": trace_id,
            "span_id": span_id,
            "parent": parent_id,
            "name": name,
            "kind": kind,
            "start": start,
            "end": end,
            "status": status,
            "status_message": message,
            "attributes": attributes,
            "events": [],
        }

    def extend(self, rows: Sequence[Mapping[str, Any] | bytes], *, copy: bool = True) -> None:
        """Queue many span rows (from :meth:`span_row`) for writing at once.

        ``copy=False``: rows (and the list) the caller never touches again; rows may then
        be encoded already (``_writer.encode_row``, as a batch's are).
        """
        w = self._writer
        w.extend(w.stream(f"{TRACE_DIR}/{w.shard}.jsonl"), rows, copy=copy)

    def record_event(self, name: str, span: Span | None = None, **attrs: Any) -> None:
        """Attach an event to ``span`` (default: the current one).

        Without any span, the event is written as a zero-length span of kind ``event``.
        """
        target = span or _CURRENT.get()
        ts = self.clock.now()
        if target is not None and target.end is None:
            target.events.append({"name": name, "ts": ts, "attributes": attrs})
            return
        s = self.start_span(name, parent=target, kind="event", **attrs)
        s.start = ts
        self.end_span(s)

    def trace_span(self, name: str, **attrs: Any) -> _SpanScope:
        """A span around a block or function: ``with``, ``async with`` or ``@decorator``.

        An exception marks the span ``error`` (message = ``repr(exc)``) and propagates.
        """
        return _SpanScope(self, name, attrs)

    def flush(self) -> None:
        """Write every buffered span (and replay row) of this process now."""
        self._writer.flush()

    def close(self) -> None:
        """End still-open spans with status ``unset``, flush and release files."""
        with self._lock:
            still_open = list(self._open.values())
        for span in still_open:
            self.end_span(span, status="unset", message="never ended")
        self._writer.close()


class _SpanScope:
    """Context manager and decorator returned by :meth:`Tracer.trace_span`."""

    def __init__(self, tracer: Tracer, name: str, attrs: dict[str, Any]) -> None:
        self._tracer, self._name, self._attrs = tracer, name, attrs
        self._stack: list[tuple[Span, contextvars.Token[Span | None]]] = []

    def __enter__(self) -> Span:
        span = self._tracer.start_span(self._name, **dict(self._attrs))
        self._stack.append((span, _CURRENT.set(span)))
        return span

    def __exit__(self, et: Any, exc: BaseException | None, tb: Any) -> None:
        span, token = self._stack.pop()
        _CURRENT.reset(token)
        if exc is None:
            self._tracer.end_span(span, status="ok")
        else:
            self._tracer.end_span(span, status="error", message=repr(exc))

    async def __aenter__(self) -> Span:
        return self.__enter__()

    async def __aexit__(self, et: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(et, exc, tb)

    def __call__(self, fn: F) -> F:
        tracer, name, attrs = self._tracer, self._name, self._attrs
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                async with _SpanScope(tracer, name, attrs):
                    return await fn(*args, **kwargs)

            return awrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _SpanScope(tracer, name, attrs):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


_TRACERS: dict[tuple[str, str | None, int, int], Tracer] = {}


def get_tracer(
    run_dir: str | os.PathLike[str],
    *,
    clock: Clock | None = None,
    shard: str | None = None,
    **settings: Any,
) -> Tracer:
    """The process-wide :class:`Tracer` for ``run_dir`` (one per clock object)."""
    key = (str(Path(run_dir).resolve()), shard, os.getpid(), id(clock) if clock else 0)
    tracer = _TRACERS.get(key)
    if tracer is None:
        tracer = _TRACERS[key] = Tracer(run_dir, clock=clock, shard=shard, **settings)
    return tracer


# --- OpenTelemetry GenAI semantic conventions ----------------------------------------------
# https://opentelemetry.io/docs/specs/semconv/gen-ai/ — written next to agentlab's own
# attributes (``agentlab.tick``, ``agentlab.attempt``...) so OTLP exports read as GenAI traces in Jaeger,
# Phoenix or Langfuse.

_REQUEST_PARAMS = {
    "temperature": "gen_ai.request.temperature",
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "seed": "gen_ai.request.seed",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "stop": "gen_ai.request.stop_sequences",
}


def genai_provider(model: str) -> str:
    """``gen_ai.provider.name`` for a model string (``sim/x`` → ``agentlab.sim``)."""
    prefix, sep, _ = model.partition("/")
    if not sep:
        return "openai"
    return "agentlab.sim" if prefix == "sim" else prefix


def genai_llm_attrs(
    record: CallRecord,
    params: Mapping[str, Any],
    finish_reason: str | None,
    attrs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """GenAI attributes of one chat call (``record`` is a ``CallRecord``).

    Added to ``attrs`` when given (a span's own attributes: one dict per span, not two),
    else to a new dict; returns it. ``gen_ai.provider.name`` follows from the model and is
    added by the OTLP export (:mod:`agentlab.store.otlp`), so each stored span is that
    much smaller.
    """
    if attrs is None:
        attrs = {}
    attrs["gen_ai.operation.name"] = "chat"
    attrs["gen_ai.request.model"] = record.model
    attrs["gen_ai.usage.input_tokens"] = record.prompt_tokens
    attrs["gen_ai.usage.output_tokens"] = record.completion_tokens
    if params:
        for key, name in _REQUEST_PARAMS.items():
            value = params.get(key)
            if value is not None:
                attrs[name] = value
    if finish_reason is not None:
        attrs["gen_ai.response.finish_reasons"] = [finish_reason]
    if record.agent_id is not None:
        attrs["gen_ai.agent.id"] = record.agent_id
    if record.outcome != "ok":
        attrs["error.type"] = record.outcome
    else:  # the answer's id (the llm_calls row's request_id) and the model that answered
        attrs["gen_ai.response.id"] = record.request_id
        attrs["gen_ai.response.model"] = record.model
    return attrs


def genai_tool_attrs(name: str, call_id: str | None, agent_id: str | None) -> dict[str, Any]:
    """GenAI attributes of one tool execution."""
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
    }
    if call_id is not None:
        attrs["gen_ai.tool.call.id"] = call_id
    if agent_id is not None:
        attrs["gen_ai.agent.id"] = agent_id
    return attrs


def genai_agent_attrs(agent_id: str, name: str | None = None) -> dict[str, Any]:
    """GenAI attributes of an agent invocation span."""
    attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.id": agent_id}
    if name is not None:
        attrs["gen_ai.agent.name"] = name
    return attrs
