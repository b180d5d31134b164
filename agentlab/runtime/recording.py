"""``RecordingLLM``: an ``LLMClient`` whose every call lands in the run log.

Every ``complete`` and ``stream``, successful or not, writes one ``llm_calls`` row (columns
from :mod:`agentlab.store.catalog`), the attempts of a retried or failed call to
``llm_attempts``, and one ``llm.call`` span with OpenTelemetry GenAI attributes. It is
built by :attr:`agentlab.runtime.RunServices.llm`, the one recording path of every driver.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from agentlab.core.records import CallRecord, LLMResponse
from agentlab.errors import LLMError
from agentlab.store import catalog
from agentlab.store.trace import genai_llm_attrs

if TYPE_CHECKING:
    from agentlab.llm import LLMClient
    from agentlab.runtime.services import AgentContext, RunServices

__all__ = ["RecordingLLM", "RecordingStream"]


class RecordingLLM:
    """An ``LLMClient`` whose every call is written to the run log and traced.

    Other attributes (``model``, ``limit``, ``server_metrics()``...) are the client's.
    """

    def __init__(self, client: LLMClient, services: RunServices) -> None:
        self.client = client
        self._services = services

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "client":  # copy/pickle probes, half-built
            raise AttributeError(name)
        return getattr(self.client, name)

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        agent_id: str | None = None,
        labels: dict[str, Any] | None = None,
        tick: int | None = None,
        counter: AgentContext | None = None,
        **kwargs: Any,
    ) -> LLMResponse:
        """``LLMClient.complete`` plus the run log (see the class docstring).

        ``counter`` (an :class:`AgentContext`) also gets ``llm_calls``/``llm_errors``/
        ``tokens`` incremented, so concurrent batches in one process count separately.
        """
        tracer = self._services.trace
        # agent id: gen_ai.agent.id (set at the end); the row's request_id links the two
        span = tracer.start_span("llm.call", kind="client", tick=tick)
        try:
            resp = await self.client.complete(messages, agent_id=agent_id, labels=labels, **kwargs)
        except LLMError as err:
            self._log(getattr(err, "record", None), tick, span, None, counter, kwargs)
            raise
        except BaseException:
            tracer.end_span(span, status="error", message="cancelled")
            raise
        self._log(resp.record, tick, span, resp.finish_reason, counter, kwargs)
        return resp

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
        span: Any,
        finish_reason: str | None,
        counter: AgentContext | None,
        params: dict[str, Any],
    ) -> None:
        services = self._services
        tracer = services.trace
        if counter is not None:
            counter.llm_calls += 1
        if record is None:  # an error raised before the client made a record
            if counter is not None:
                counter.llm_errors += 1
            tracer.end_span(span, status="error")
            return
        ok = record.outcome == "ok"
        ntok = record.prompt_tokens + record.completion_tokens
        if counter is not None:
            counter.llm_errors += not ok
            counter.tokens += ntok
        run_id, replay = services.run_id, services.replay
        row = catalog.llm_call_row(record, run_id=run_id, tick=tick)
        replay.append("llm_calls", row)
        if record.attempts > 1 or not ok:
            # A first-attempt success is its llm_calls row; Run.llm_attempts_df adds it back.
            attempts = catalog.llm_attempt_rows(record, run_id=row["run_id"], tick=row["tick"])
            replay.extend("llm_attempts", attempts)
        tracer.end_span(
            span,
            status="ok" if ok else "error",
            message=None if ok else record.outcome,
            **genai_llm_attrs(record, params, finish_reason),
        )


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
        llm, tracer = self._llm, self._llm._services.trace
        span = tracer.start_span("llm.call", kind="client", tick=self._tick)
        try:
            # aclosing: an abandoned stream closes the client's at once (frees its slot)
            async with aclosing(self._inner.__aiter__()) as deltas:
                async for delta in deltas:
                    yield delta
        except LLMError as err:
            llm._log(getattr(err, "record", None), self._tick, span, None, None, self._params)
            raise
        except BaseException:
            tracer.end_span(span, status="error", message="cancelled")
            raise
        self.response = resp = self._inner.response
        finish = resp.finish_reason if resp is not None else None
        llm._log(resp.record if resp else None, self._tick, span, finish, None, self._params)
