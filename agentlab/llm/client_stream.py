"""Streamed completions: :class:`LLMStream` (``client.stream(...)``) and the pipe that
carries one attempt's deltas from the retry loop's transport to the consumer.

The stream drives the retry loop (:mod:`agentlab.llm.client_retry`) inline, step by step:
no task, no queue between the transport and the caller's ``async for``.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Generator
from typing import Any, Protocol, cast

from agentlab.core.clock import Clock
from agentlab.core.records import CallRecord, LLMResponse
from agentlab.llm._live import Live
from agentlab.llm.aimd import ConcurrencyGate
from agentlab.llm.sim_backend import SimResult
from agentlab.llm.structured import OutputSpec

__all__ = ["LLMStream"]

#: a stream's call: messages, output spec, tools, agent id, labels, earlier attempts
StreamArgs = tuple[
    list[dict[str, Any]], OutputSpec | None, list[dict[str, Any]] | None, str | None,
    dict[str, Any] | None, int,
]  # fmt: skip

#: a streamed call's first attempt planned by ``LLMClient._ready``: its record (opened),
#: the planned result, its pieces, the gate, limiter epoch, attempt start
ReadyAttempt = tuple[CallRecord, SimResult, list[str], ConcurrencyGate, int, float]


class _Sender(Protocol):
    """What a stream attempt reads of its client (``LLMClient``)."""

    @property
    def model(self) -> str: ...
    @property
    def timeout(self) -> float: ...
    @property
    def _transport(self) -> Any: ...
    def _lkw(
        self,
        messages: list[dict[str, Any]],
        spec: OutputSpec | None,
        tools: list[dict[str, Any]] | None,
        params: dict[str, Any],
        attempt: int,
    ) -> dict[str, Any]: ...


class _Caller(Protocol):
    """What :class:`LLMStream` calls on its client (``LLMClient``)."""

    @property
    def _clock(self) -> Clock: ...
    @property
    def _req_defaults(self) -> dict[str, Any]: ...
    def _get_live(self) -> Live: ...
    def _ready(
        self, live: Live, args: StreamArgs, params: dict[str, Any], whole: bool
    ) -> ReadyAttempt | None: ...
    def _ready_done(self, live: Live, ready: ReadyAttempt, first: float | None) -> LLMResponse: ...
    def _call(
        self,
        live: Live,
        messages: list[dict[str, Any]],
        spec: OutputSpec | None,
        tools: list[dict[str, Any]] | None,
        params: dict[str, Any],
        agent_id: str | None,
        labels: dict[str, Any] | None,
        prior: int,
        pipe: _Pipe | None,
    ) -> Coroutine[Any, Any, LLMResponse]: ...


class _Pipe:
    """One stream's transport inside :meth:`LLMClient._call`: its deltas go to the consumer.

    ``_call`` runs inside the :class:`LLMStream` iterator, driven step by step by it (no
    task, no queue). Each attempt builds its transport's delta generator and awaits the
    pipe: that hands the generator to the iterator, which runs it, yields each delta
    straight to the consumer and then resumes the attempt (or throws the transport's
    error into it, for the retry loop). A reply the simulator has ready whole (an instant
    server's) comes as the list of its pieces instead, with no generator to resume per
    piece (``whole``: as one piece, its text). Only that iterator may drive a ``_call``
    given a pipe (a task would refuse the pipe as a "bad yield").
    """

    __slots__ = ("clock", "delivered", "deltas", "first", "whole")

    def __init__(self, clock: Clock, whole: bool) -> None:
        self.clock = clock
        self.whole = whole
        self.deltas: AsyncGenerator[str, None] | list[str] | None = None
        self.delivered = False  # text reached the consumer: a retry would duplicate it
        self.first: float | None = None

    def __await__(self) -> Generator[_Pipe, None, None]:
        yield self  # to LLMStream._run, which runs self.deltas

    async def send(
        self,
        client: _Sender,
        live: Live,
        messages: list[dict[str, Any]],
        spec: OutputSpec | None,
        tools: list[dict[str, Any]] | None,
        params: dict[str, Any],
        attempt: int,
        labels: dict[str, Any],
    ) -> SimResult:
        clock = self.clock
        holder: list[SimResult] = []
        deltas: AsyncGenerator[str, None] | list[str] | None
        server = live.server
        if server is not None:
            res = server.plan(messages, attempt=attempt, spec=spec, tools=tools,
                              params=params, timeout=client.timeout,
                              labels=labels)  # fmt: skip
            holder.append(res)
            deltas = server.ready_pieces(res, self.whole)
            if deltas is None:
                deltas = cast(AsyncGenerator[str, None], server.chunks(res, client.model))
        else:
            deltas = client._transport.astream(
                clock, holder, **client._lkw(messages, spec, tools, params, attempt)
            )
        self.deltas = deltas
        try:
            await self
        except BaseException:
            # The transport failed (then this is a no-op), or the consumer left while it
            # held a delta: the transport is suspended at its yield; close it now
            # (connection, timer) rather than whenever the generator is collected.
            if not isinstance(deltas, list):
                await deltas.aclose()
            raise
        finally:
            self.deltas = None
        res = holder[-1]
        if self.first is not None:
            res.first_token = self.first
        elif not res.tool_calls:
            res.first_token = clock.now()
        # else a reply of tool calls alone, whose first token is not text: the transport's
        # time of its first tool-call delta, or the simulated engine's first token (as
        # sim-serve streams the call's arguments while they are generated)
        return res


@types.coroutine
def _wait(awaited: Any) -> Generator[Any, Any, Any]:
    # Pass what the attempt awaits (a future, or None for a bare yield) to the task running
    # the consumer, and its answer back: the task waits on it in the attempt's place.
    return (yield awaited)


class LLMStream:
    """An in-progress streamed completion (see :meth:`LLMClient.stream`).

    The attempts run in :meth:`LLMClient._call` (the same retry/limiter loop as
    ``complete``), driven inline by the iterator the caller consumes: each delta the
    transport produces is yielded at once, with no task or queue in between. Closing the
    iterator early (``aclose``, or breaking out and letting it be collected), an error in
    the consumer's loop body, or cancelling the consumer cancels the attempt where it
    stands, which frees its concurrency slot and its connection at once.
    """

    def __init__(
        self,
        client: _Caller,
        args: StreamArgs,
        overrides: dict[str, Any],
    ) -> None:
        self._client = client
        self._args = args
        self._overrides = overrides
        self.response: LLMResponse | None = None
        self.chunks = 0
        #: start the attempt in the consumer's own step, not one loop turn later (see
        #: _run): for a consumer that keeps no records in step with other calls (the
        #: thread runtime's ``LLMClientModel``)
        self.start_at_once = False
        #: hand a reply the simulator has ready whole (an instant server's) over as one
        #: delta, its text, not in its pieces: for a consumer that only joins the deltas
        #: (the thread runtime's ``AgentSystem``), to which each piece is one more resume
        #: of this generator and of its own loop, with nothing in between
        self.whole_when_ready = False

    def __aiter__(self) -> AsyncIterator[str]:
        return self._run()

    async def collect(self) -> LLMResponse:
        """Drain the stream and return the final response."""
        async for _ in self._run():
            pass
        assert self.response is not None
        return self.response

    def ready_text(self) -> str | None:
        """The text of a reply an instant simulator answers at once and well-formed, the
        call done as iterating would leave it (``response``, its record, the slot, the
        limiter and the usage; ``chunks`` 1); ``None`` for any other, with nothing done:
        iterate then (and not after a text: that would be a second call).

        Only with ``start_at_once`` and ``whole_when_ready`` (else ``None``): for a consumer
        that joins the deltas and does nothing between them (``AgentSystem``), the text
        is the one delta iterating yields, with no async generator run for it.
        """
        if not (self.start_at_once and self.whole_when_ready):
            return None
        if self._args[1] is not None:  # structured output: the retry loop's
            return None
        c = self._client
        live = c._get_live()
        defaults = c._req_defaults  # none for most clients: the call's own overrides as they are
        params = {**defaults, **self._overrides} if defaults else self._overrides
        planned = c._ready(live, self._args, params, True)
        if planned is None:
            return None
        text = planned[2][0]
        self.chunks = 1
        first = c._clock.now() if text else None  # the first text of the stream
        self.response = c._ready_done(live, planned, first)
        return text

    async def _run(self) -> AsyncIterator[str]:
        c = self._client
        messages, spec, tools, agent_id, labels, prior = self._args
        live = c._get_live()
        params = {**c._req_defaults, **self._overrides}
        pipe = _Pipe(c._clock, self.whole_when_ready)
        clock = pipe.clock
        call: Coroutine[Any, Any, LLMResponse] | None = None
        # What to throw into the attempt at its next step (what a task would): the
        # transport's error, the consumer's cancellation, or CancelledError once the
        # consumer has gone (``gone``: why it stopped listening).
        exc: BaseException | None = None
        gone: BaseException | None = None
        # The attempt starts one loop turn after iteration does, where a task running it
        # (the previous design) took its first step: the request id, the gate's FIFO
        # order and so every record stay what they were next to calls made in the same
        # turn (a virtual-clock run repeats across releases). One loop turn, ~3 us — and,
        # for an instant transport, the difference between a consumer that finishes its
        # call in one step and one that suspends mid-way with all it holds alive while
        # every other ready task runs: ``start_at_once`` skips it.
        try:
            if not self.start_at_once:
                await asyncio.sleep(0)  # in the try: cancelled here, the unstarted call is closed
            # A first attempt an instant server answers at once and well-formed is planned
            # here with no coroutine (_ready, then _ready_done or the slot handed back: the
            # same request id, slot, limiter feed, record and usage as _call's); anything
            # else runs _call, whose transport's deltas come out of the same loop below.
            planned = None if spec is not None else c._ready(live, self._args, params, pipe.whole)
            if planned is None:
                call = c._call(live, messages, spec, tools, params, agent_id, labels, prior, pipe)
                send, throw = call.send, call.throw
            else:
                pipe.deltas = planned[2]
            while True:
                if call is not None:
                    try:
                        got = send(None) if exc is None else throw(exc)
                    except StopIteration as stop:
                        if gone is None:
                            self.response = stop.value
                            return
                        raise gone from None
                    except asyncio.CancelledError:
                        if gone is None:
                            raise
                        raise gone from None
                    exc = None
                    if got is not pipe:  # the attempt waits (a slot, a backoff): so do we
                        try:
                            await _wait(got)
                        except BaseException as why:  # e.g. the consumer's task was cancelled
                            exc = why
                        continue
                # The attempt streams: run its transport here, each delta straight out; a
                # reply ready whole is a list of its pieces, no transport to resume.
                deltas = pipe.deltas
                ready = deltas if type(deltas) is list else None
                i = 0
                try:
                    while True:
                        if ready is not None:
                            if i == len(ready):
                                break
                            d = ready[i]
                            i += 1
                        else:
                            try:
                                d = await deltas.__anext__()  # type: ignore[union-attr]
                            except StopAsyncIteration:
                                break
                        if d and pipe.first is None:  # the first text of the stream
                            pipe.first = clock.now()
                            pipe.delivered = True
                        self.chunks += 1
                        try:
                            yield d
                        except BaseException as why:  # GeneratorExit (closed early), athrow
                            gone, exc = why, asyncio.CancelledError()
                            break
                except BaseException as why:  # the transport's error: the retry loop's
                    exc = why
                if planned is not None:  # the end of _call's attempt, as it would end it
                    if gone is not None:  # the consumer left: the slot goes back, no record
                        planned[3].release()
                        raise gone from None
                    self.response = c._ready_done(live, planned, pipe.first)
                    return
        finally:
            if call is not None:
                call.close()  # a no-op once finished; else (left some other way) no awaits now
