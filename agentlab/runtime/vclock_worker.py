"""The worker's side of a virtual-clock run on Ray: per-agent time and a remote LLM client.

A batch task runs its agents as usual, except that their LLM calls go to the run's
time server (``runtime/vclock_server.py``) and their clock is their own:

- :class:`AgentTime` is the clock every reader in the worker uses (``services.now()``,
  spans, rows). Agent code takes no virtual time, so an agent's time is that of the
  event that last woke it — the tick's start, then each of its answers; several agents
  of one worker are at different times at once, so the reading is per agent (a context
  variable of the agent's task). Outside an agent it reads the latest time this batch
  has seen: its span ends when its last agent's last answer came.
- :class:`RemoteLLM` stands where the run's ``LLMClient`` stands (under
  ``RecordingLLM``, so rows and spans are written here as locally): each call is queued
  with its issue time and rank, and answered by the time server.
- :class:`WorkerHub` reports the queued calls once every agent of the batch waits for
  an answer (the event loop is idle and no env call is under way), and wakes each agent
  with its answer, at the answer's time.

What only a local run can order — an agent sleeping on the clock, two LLM calls of one
agent in flight at once, a stream, an env ``ask`` (a router's LLM calls run in the env
actor) — raises :class:`~agentlab.errors.ConfigError` in the agent's step.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from agentlab.core.clock import settle
from agentlab.core.records import LLMResponse
from agentlab.errors import ConfigError
from agentlab.llm.sim_backend import check_sim_overrides
from agentlab.llm.structured import output_spec
from agentlab.runtime.vclock_server import Answer, CallIn

if TYPE_CHECKING:
    from agentlab.llm import LLMClient
    from agentlab.runtime.batch import BatchResult, BatchSpec
    from agentlab.runtime.services import RunServices

__all__ = [
    "PROCESS_CLOCK",
    "AgentTime",
    "CountingEnv",
    "RemoteLLM",
    "WorkerHub",
    "run_virtual_batch",
    "step_virtual_batch",
]

#: the running agent's (time, rank, calls issued since that wake-up)
_NOW: contextvars.ContextVar[tuple[float, tuple[int, ...], list[int]] | None] = (
    contextvars.ContextVar("agentlab_vclock_agent_now", default=None)
)

Exchange = Callable[[list[CallIn], bool], Awaitable[list[Answer]]]


def _unsupported(what: str) -> ConfigError:
    return ConfigError(
        f"{what} is not supported with clock='virtual' on executor 'ray' (the time server "
        "cannot order it as a local run would); use executor='local' for this agent"
    )


class AgentTime:
    """The clock of a virtual batch on Ray: each agent's own time (module docstring)."""

    is_virtual = True

    def __init__(self, start: float = 0.0) -> None:
        self.latest = float(start)

    def now(self) -> float:
        cur = _NOW.get()
        return self.latest if cur is None else cur[0]

    async def sleep(self, seconds: float) -> None:
        raise _unsupported(f"clock.sleep({seconds!r}) in a batch")


class WorkerHub:
    """One batch's link to the time server (see the module docstring).

    Args:
        exchange: sends ``(calls, done)`` to the time server, returns this worker's next
            answers (awaitable).
        worker: this batch's index in the tick.
        agent_ids: the batch's agents, in batch order (their rank at the tick's start).
        clock: the batch's :class:`AgentTime`.
    """

    def __init__(
        self, exchange: Exchange, worker: int, agent_ids: list[str], clock: AgentTime
    ) -> None:
        self._exchange = exchange
        self.worker = worker
        self.clock = clock
        self._start = clock.latest
        self._index = {a: i for i, a in enumerate(agent_ids)}
        self._outbox: list[CallIn] = []
        self._waiting: dict[int, asyncio.Future[Answer]] = {}
        self._busy: set[str] = set()  # agents with a call in flight
        self._ids = 0
        self._in_env = 0
        self._env_idle = asyncio.Event()
        self._env_idle.set()

    def call(
        self, agent_id: str | None, messages: list[dict[str, Any]], kwargs: dict[str, Any]
    ) -> asyncio.Future[Answer]:
        """Queue one call of the running agent at its current time and rank."""
        cur = _NOW.get()
        if cur is None:  # the agent's first call of the tick: it starts at the tick's start
            cur = (self._start, (0, self.worker, self._index.get(agent_id or "", -1)), [0])
            _NOW.set(cur)
        key = agent_id or ""
        if key in self._busy:
            raise _unsupported(f"a second LLM call of agent {agent_id!r} while one is in flight")
        self._busy.add(key)
        t, rank, issued = cur
        issued[0] += 1
        self._ids += 1
        fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiting[self._ids] = fut
        self._outbox.append(
            CallIn(self.worker, self._ids, t, (*rank, issued[0]), agent_id, messages, kwargs)
        )
        return fut

    def woke(self, agent_id: str | None, answer: Answer) -> None:
        """The agent has its answer: from now on it is at the answer's time."""
        self._busy.discard(agent_id or "")
        _NOW.set((answer.at, (1, answer.ordinal), [0]))

    def enter_env(self) -> None:
        self._in_env += 1
        self._env_idle.clear()

    def leave_env(self) -> None:
        self._in_env -= 1
        if not self._in_env:
            self._env_idle.set()

    async def drive(self, batch: asyncio.Future[Any]) -> None:
        """Report and deliver until ``batch`` has finished, then tell the server."""
        while True:
            await settle()
            if self._in_env:
                await self._env_idle.wait()
                continue
            if batch.done():
                await self._exchange([], True)
                return
            if not self._waiting:
                # an agent waits on something that is neither the LLM nor the env
                await asyncio.wait([batch], timeout=0.01)
                continue
            calls, self._outbox = self._outbox, []
            answers = await self._exchange(calls, False)
            for a in sorted(answers, key=lambda a: a.ordinal):
                self.clock.latest = max(self.clock.latest, a.at)
                self._waiting.pop(a.call_id).set_result(a)


class RemoteLLM:
    """The run's LLM client as a batch on Ray sees it under the virtual clock.

    Calls are answered by the time server (see :class:`WorkerHub`); the configuration
    (``model``, ``max_retries``...) is the run's client's.
    """

    def __init__(self, client: LLMClient, hub: WorkerHub) -> None:
        self._client = client
        self._hub = hub
        self.model = client.model
        self.max_retries = client.max_retries

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._client, name)

    def complete_now(self, messages: list[dict[str, Any]], **kwargs: Any) -> None:
        """Never at once: every call's timing comes from the time server."""
        return None

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        response_format: Any = None,
        tools: list[dict[str, Any]] | None = None,
        stream: bool = False,
        agent_id: str | None = None,
        labels: dict[str, Any] | None = None,
        prior_attempts: int = 0,
        **overrides: Any,
    ) -> Coroutine[Any, Any, LLMResponse]:
        """``LLMClient.complete``, answered by the time server (awaitable)."""
        if stream:
            raise _unsupported("a streamed LLM call")
        if overrides:
            check_sim_overrides(overrides)  # raised at the call, as the client does
        if response_format is not None:
            output_spec(response_format)
        kw: dict[str, Any] = dict(overrides)
        if response_format is not None:
            kw["response_format"] = response_format
        if tools:
            kw["tools"] = tools
        if labels:
            kw["labels"] = dict(labels)
        if prior_attempts:
            kw["prior_attempts"] = prior_attempts
        fut = self._hub.call(agent_id, messages, kw)
        return self._wait(agent_id, fut)

    async def _wait(self, agent_id: str | None, fut: asyncio.Future[Answer]) -> LLMResponse:
        answer = await fut
        self._hub.woke(agent_id, answer)
        if answer.error is not None:
            raise answer.error
        assert answer.response is not None
        return answer.response

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        raise _unsupported("a streamed LLM call")


class CountingEnv:
    """The env handle of a virtual batch on Ray: tells the hub when an env call is under
    way (the batch is not waiting on the time server then)."""

    def __init__(self, inner: Any, hub: WorkerHub) -> None:
        self._inner, self._hub = inner, hub

    def tools(self) -> list[dict[str, Any]]:
        return self._inner.tools()  # type: ignore[no-any-return]

    def describe(self) -> str:
        return self._inner.describe()  # type: ignore[no-any-return]

    async def call(self, agent_id: str, name: str, arguments: dict[str, Any], tick: int) -> Any:
        self._hub.enter_env()
        try:
            return await self._inner.call(agent_id, name, arguments, tick)
        finally:
            self._hub.leave_env()

    async def observe(self, agent_id: str, tick: int) -> str:
        self._hub.enter_env()
        try:
            return await self._inner.observe(agent_id, tick)  # type: ignore[no-any-return]
        finally:
            self._hub.leave_env()

    async def run_skill_script(self, *args: Any) -> Any:
        self._hub.enter_env()
        try:
            return await self._inner.run_skill_script(*args)
        finally:
            self._hub.leave_env()

    async def ask(self, *args: Any, **kwargs: Any) -> Any:
        raise _unsupported("env.ask (a language router's LLM calls run in the env actor)")


#: the clock of every virtual batch this process runs (one tracer per process reads it)
PROCESS_CLOCK = AgentTime()


def run_virtual_batch(
    batch: BatchSpec, proxy: RunServices, server: Any, worker: int, start: float
) -> BatchResult:
    """Run ``batch`` (a Ray task's body) with its calls answered by ``server``.

    ``server`` is the time server's Ray actor handle, or a
    :class:`~agentlab.runtime.vclock_server.TimeServer` in this process.
    """
    return asyncio.run(step_virtual_batch(batch, proxy, server, worker, start))


async def step_virtual_batch(
    batch: BatchSpec, proxy: RunServices, server: Any, worker: int, start: float
) -> BatchResult:
    """``step_agent_batch`` with per-agent time and the time server's answers."""
    from agentlab.runtime.batch import step_agent_batch

    remote = getattr(server, "exchange", None)
    if hasattr(remote, "remote"):

        async def exchange(calls: list[CallIn], done: bool) -> list[Answer]:
            return await server.exchange.remote(worker, calls, done)  # type: ignore[no-any-return]

    else:

        async def exchange(calls: list[CallIn], done: bool) -> list[Answer]:
            return await asyncio.to_thread(server.exchange, worker, calls, done)  # type: ignore[no-any-return]

    clock = PROCESS_CLOCK
    clock.latest = float(start)
    hub = WorkerHub(exchange, worker, [a.agent_id for a in batch.agents], clock)
    if proxy.clock is not clock:  # (a staged batch has it bound already:
        proxy.bind_clock(clock)  # binding again would drop its staged tracer)
    client = proxy.llm.client  # the run's client config (its calls go to the server)
    proxy.bind_llm(RemoteLLM(client, hub))
    if proxy.env is not None:
        proxy.env = CountingEnv(proxy.env, hub)
    task = asyncio.ensure_future(step_agent_batch(batch, proxy))
    try:
        await hub.drive(task)
    except BaseException:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    return await task
