"""``RecordingLLM``: an ``LLMClient`` whose every call lands in the run log.

Every ``complete`` and ``stream``, successful or not, writes one ``llm_calls`` row (columns
from :mod:`agentlab.store.catalog`), the attempts of a retried or failed call to
``llm_attempts``, and one ``llm.call`` span with OpenTelemetry GenAI attributes (or a
sample of them: ``RunServices(llm_spans=...)`` / ``AGENTLAB_LLM_SPANS``). It is built by
:attr:`agentlab.runtime.RunServices.llm`, the one recording path of every driver.

An agent's calls inside a society batch go into the batch's :class:`BatchLog` (written
once per batch); every other caller's rows are appended one by one. The span row is built
when the call ends, with ``Tracer.span_row``: no open-span record per call.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from agentlab.core.records import CallRecord, LLMResponse
from agentlab.errors import LLMError
from agentlab.store import catalog
from agentlab.store.trace import Tracer, genai_llm_attrs

if TYPE_CHECKING:
    from agentlab.llm import LLMClient
    from agentlab.runtime.batch_log import BatchLog
    from agentlab.store.replay import ReplaySink

__all__ = ["CallCounter", "RecordingLLM", "RecordingServices", "RecordingStream"]


class RecordingServices(Protocol):
    """What a :class:`RecordingLLM` writes through (``runtime.services.RunServices``)."""

    @property
    def run_id(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def llm_spans(self) -> float: ...
    @property
    def llm_io(self) -> bool: ...
    @property
    def replay(self) -> ReplaySink: ...
    @property
    def trace(self) -> Tracer: ...


class CallCounter(Protocol):
    """What counts a caller's calls (``runtime.services.AgentContext``, an env request's
    counter). Read only if present: ``agent_id`` and ``log`` (a batch's
    :class:`~agentlab.runtime.batch_log.BatchLog`, or ``None``: that takes the rows)."""

    llm_calls: int
    llm_errors: int
    tokens: int
    latency_us: int  # the answered calls' latencies, whole µs (sums in any order alike)


class RecordingLLM:
    """An ``LLMClient`` whose every call is written to the run log and traced.

    Other attributes (``model``, ``limit``, ``server_metrics()``...) are the client's.
    """

    def __init__(self, client: LLMClient, services: RecordingServices) -> None:
        self.client = client
        self._services = services
        self._server = _server_attrs(getattr(client, "base_url", None))
        # LLMClient's complete_now that takes the labels dict as given (the calls here hand
        # it a copy of their own); looked up on the class: a wrapper's __getattr__ (the
        # virtual-time worker's client) must not lend it its inner client's.
        owned = getattr(type(client), "_complete_now", None)
        self._now_owned: Callable[..., LLMResponse | None] | None = (
            None if owned is None else owned.__get__(client)
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "client":  # copy/pickle probes, half-built
            raise AttributeError(name)
        if name == "complete_now":  # the client's would make a call the log never sees
            raise AttributeError(
                "RecordingLLM has no complete_now (it would bypass the run log); "
                "await complete(...), which answers at once where it can"
            )
        return getattr(self.client, name)

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        agent_id: str | None = None,
        labels: dict[str, Any] | None = None,
        tick: int | None = None,
        counter: CallCounter | None = None,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, LLMResponse]:
        """``LLMClient.complete`` plus the run log (see the class docstring); awaitable.

        ``counter`` (an :class:`AgentContext`) also gets ``llm_calls``/``llm_errors``/
        ``tokens`` incremented, so concurrent batches in one process count separately.
        """
        # a copy of the caller's labels: _complete may hand them to the record as they are
        own = dict(labels) if labels else None
        return self._complete(messages, agent_id, own, tick, counter, kwargs)

    async def _complete(
        self,
        messages: list[dict[str, Any]],
        agent_id: str | None,
        labels: dict[str, Any] | None,
        tick: int | None,
        counter: CallCounter | None,
        kwargs: dict[str, Any],
    ) -> LLMResponse:
        """:meth:`complete` with positional arguments (an agent's calls come here directly);
        ``labels`` a dict of the caller's own (or ``None``): it may become the record's."""
        # The span is built when the call ends (no open-span bookkeeping on the hot path);
        # agent id: gen_ai.agent.id, and the row's request_id links span and row.
        # the tracer read once per call (a property of the services) and handed to _span
        tracer = self._services.trace
        t0 = tracer.clock.now()
        if not kwargs:
            # Answered at once where it can be (an instant simulator: most calls of a
            # sim/instant society): no second coroutine and no exception handling needed.
            now = self._now_owned
            if now is not None:
                resp = now(messages, agent_id, labels if labels is not None else {})
            else:
                resp = self.client.complete_now(messages, agent_id=agent_id, labels=labels)
            if resp is not None:
                self._log(resp.record, tick, t0, resp.finish_reason, counter, kwargs, tracer)
                if self._services.llm_io:
                    self._io(resp.record, messages, resp, None, tick, counter)
                return resp
        try:
            resp = await self.client.complete(messages, agent_id=agent_id, labels=labels, **kwargs)
        except LLMError as err:
            self._log(getattr(err, "record", None), tick, t0, None, counter, kwargs, tracer)
            if self._services.llm_io:
                self._io(getattr(err, "record", None), messages, None, err, tick, counter)
            raise
        except BaseException:
            log = getattr(counter, "log", None)
            self._span(counter, t0, tick, "error", "cancelled", None, None, kwargs, tracer, log)
            raise
        self._log(resp.record, tick, t0, resp.finish_reason, counter, kwargs, tracer)
        if self._services.llm_io:
            self._io(resp.record, messages, resp, None, tick, counter)
        return resp

    def _io(
        self,
        record: CallRecord | None,
        messages: list[dict[str, Any]],
        resp: LLMResponse | None,
        err: BaseException | None,
        tick: int | None,
        counter: CallCounter | None,
    ) -> None:
        """The ``llm_io`` row (prompt and reply) of a finished call (``llm_io=True``)."""
        if record is None:  # no request id to link it to
            return
        row = {
            "request_id": record.request_id,
            "run_id": (record.labels or {}).get("run_id") or self._services.run_id,
            "tick": tick,
            "agent_id": record.agent_id,
            "messages": list(messages),  # the caller may append the reply to its list
            "reply": resp.text if resp is not None else None,
            "tool_calls": [tc.to_openai() for tc in resp.tool_calls] if resp is not None else None,
            "error": None if err is None else f"{type(err).__name__}: {err}"[:2000],
            "schema_version": 1,
        }
        log: BatchLog | None = getattr(counter, "log", None)
        if log is not None:
            log.add("llm_io", row)
        else:
            self._services.replay.append("llm_io", row)

    def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        agent_id: str | None = None,
        labels: dict[str, Any] | None = None,
        tick: int | None = None,
        **kwargs: Any,
    ) -> RecordingStream:
        """``LLMClient.stream`` plus the run log: iterate it for the deltas."""
        inner = self.client.stream(messages, agent_id=agent_id, labels=labels, **kwargs)
        return RecordingStream(self, inner, tick, kwargs)

    def _log(
        self,
        record: CallRecord | None,
        tick: int | None,
        start: float,
        finish_reason: str | None,
        counter: CallCounter | None,
        params: dict[str, Any],
        tracer: Tracer | None = None,
    ) -> None:
        """The call's rows and span; into the batch's log when ``counter`` has one.
        ``tracer``: the services' tracer when the caller has it at hand."""
        services = self._services
        log: BatchLog | None = getattr(counter, "log", None)
        if counter is not None:
            counter.llm_calls += 1
        if record is None:  # an error raised before the client made a record
            if counter is not None:
                counter.llm_errors += 1
            self._span(counter, start, tick, "error", None, None, None, params, tracer, log)
            return
        ok = record.outcome == "ok"
        if counter is not None:
            counter.llm_errors += not ok
            counter.tokens += record.prompt_tokens + record.completion_tokens
            if ok:
                counter.latency_us += round((record.end - record.start) * 1e6)
        row = catalog.llm_call_row(record, run_id=services.run_id, tick=tick,
                                   finish_reason=finish_reason if ok else None)  # fmt: skip
        attempts = None
        if record.attempts > 1 or not ok:
            # A first-attempt success is its llm_calls row; Run.llm_attempts_df adds it back.
            attempts = catalog.llm_attempt_rows(record, run_id=row["run_id"], tick=row["tick"])
        if log is not None:
            log.call(row, catalog.CALL_ROW_KEYS if type(record) is CallRecord else None)
            if attempts:
                log.rows.setdefault("llm_attempts", []).extend(attempts)
        else:
            replay = services.replay
            replay.append("llm_calls", row)
            if attempts:
                replay.extend("llm_attempts", attempts)
        self._span(counter, start, tick, "ok" if ok else "error",
                   None if ok else record.outcome, record, finish_reason, params,
                   tracer, log)  # fmt: skip

    def _span(
        self,
        counter: CallCounter | None,
        start: float,
        tick: int | None,
        status: str,
        message: str | None,
        record: CallRecord | None,
        finish_reason: str | None,
        params: dict[str, Any],
        tracer: Tracer | None = None,
        log: BatchLog | None = None,
    ) -> None:
        """The ``llm.call`` span of a finished call, if sampled (``RunServices.llm_spans``):
        buffered in the batch's log, else queued on the tracer (``tracer``: the services'
        tracer when the caller has it at hand; ``log``: the batch's log of ``counter``, if
        it has one)."""
        services = self._services
        rate = services.llm_spans
        if rate < 1.0 and (rate <= 0.0 or not _sampled(rate, services.seed, counter, record, tick)):
            return
        if tracer is None:
            tracer = services.trace
        # the agent.step (invoke_agent) span, if any: read once, it is also the parent
        agent = Tracer.current_span()
        attrs: dict[str, Any] = {"agentlab.tick": tick}
        if record is not None:  # the GenAI attributes go into the same dict
            genai_llm_attrs(record, params, finish_reason, attrs)
            attrs["gen_ai.conversation.id"] = f"{services.run_id}/{record.agent_id or ''}"
            if agent is not None and "gen_ai.agent.name" in agent.attributes:
                attrs["gen_ai.agent.name"] = agent.attributes["gen_ai.agent.name"]
            elif record.agent_id is not None:  # no invoke_agent span (an experiment's expert)
                attrs["gen_ai.agent.name"] = record.agent_id
        if self._server:
            attrs.update(self._server)
        row = tracer.span_row("llm.call", start, tracer.clock.now(), attrs, status, message,
                              "client", parent=agent)  # fmt: skip
        if log is not None:
            log.span(row)
        else:
            tracer.extend([row])


def _server_attrs(base_url: str | None) -> dict[str, Any]:
    """``server.address`` / ``server.port`` of an OpenAI-compatible endpoint (none for a
    simulated model, which has no server)."""
    if not base_url:
        return {}
    url = urlsplit(base_url)
    out: dict[str, Any] = {"server.address": url.hostname or ""}
    port = url.port or {"http": 80, "https": 443}.get(url.scheme)
    if port is not None:
        out["server.port"] = port
    return out


def _sampled(
    rate: float,
    seed: int,
    counter: CallCounter | None,
    record: CallRecord | None,
    tick: int | None,
) -> bool:
    """Whether a call's span is kept at ``rate``: a hash of what identifies the call in
    every rerun, local or Ray, straight or resumed (the run seed, agent, tick and the
    call's number in the step; else the request id), not a draw: another seed samples
    other calls."""
    agent = getattr(counter, "agent_id", None)
    if agent is not None:
        key = f"{seed}\x1f{agent}\x1f{tick}\x1f{getattr(counter, 'llm_calls', 0)}"
    elif record is not None:
        key = f"{seed}\x1f{record.request_id}"
    else:
        return False
    return zlib.crc32(key.encode()) < rate * 4294967296.0


class RecordingStream:
    """A streamed call that writes its record when the stream ends (see ``RecordingLLM``).

    A stream the consumer abandons mid-way (an interrupt) writes no ``llm_calls`` row: the
    call produced no complete record.
    """

    def __init__(
        self, llm: RecordingLLM, inner: Any, tick: int | None, params: dict[str, Any]
    ) -> None:
        self._llm, self._inner, self._tick, self._params = llm, inner, tick, params
        self.response: LLMResponse | None = None

    def __aiter__(self) -> AsyncIterator[str]:
        return self._run()

    async def collect(self) -> LLMResponse:
        """Drain the stream and return the final response."""
        async for _ in self._run():
            pass
        assert self.response is not None
        return self.response

    async def _run(self) -> AsyncIterator[str]:
        llm = self._llm
        t0 = llm._services.trace.clock.now()
        try:
            # aclosing: an abandoned stream closes the client's at once (frees its slot)
            async with aclosing(self._inner.__aiter__()) as deltas:
                async for delta in deltas:
                    yield delta
        except LLMError as err:
            llm._log(getattr(err, "record", None), self._tick, t0, None, None, self._params)
            raise
        except BaseException:
            llm._span(None, t0, self._tick, "error", "cancelled", None, None, self._params)
            raise
        self.response = resp = self._inner.response
        finish = resp.finish_reason if resp is not None else None
        llm._log(resp.record if resp else None, self._tick, t0, finish, None, self._params)
