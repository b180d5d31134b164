"""``recorded_run``: a run directory for a workflow of your own (hubs, pipelines, a game).

``Society``, ``Experiment`` and ``AgentSystem`` record through :class:`RunServices`; a
workflow written in a notebook cell — ``MsgHub`` and ``LLMAgent`` (``agentlab.messaging``),
a pipeline, a loop of ``complete`` calls — had to assemble the same pieces by hand
(``writing_run``, ``RunServices``, its clock, its message sinks, a final flush) to land in
``agentlab runs`` / ``view`` / ``report`` / ``show``. One context manager does it::

    with recorded_run("runs/debate", "sim/vllm-3b", kind="debate", seed=0) as rec:
        alice = LLMAgent("alice", "You are Alice.", rec.llm)
        bob = LLMAgent("bob", "You are Bob.", rec.llm)
        async with MsgHub([alice, bob], announcement=Msg("host", "Ship on Friday?"),
                          sink=rec.messages("debate")):
            await sequential([alice, bob])

Every call of ``rec.llm`` lands in ``llm_calls`` (``llm_attempts``, ``llm.call`` spans);
each hub given ``rec.messages(name)`` in ``messages``. A ``sim/`` model runs on a fresh
virtual clock unless told otherwise (the run takes no wall time; its timings are the
simulated server's).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Literal

from agentlab.core.clock import Clock, clock_from_name
from agentlab.runtime.services import RecordingLLM, RunServices
from agentlab.store.lifecycle import writing_run
from agentlab.store.writer_lock import held_here

__all__ = ["Recording", "recorded_run"]


class Recording:
    """What a :func:`recorded_run` block records through.

    Attributes:
        llm: the recording client (``await rec.llm.complete(messages, ...)``, or give it to
            an ``LLMAgent``): every call lands in the run's ``llm_calls``.
        clock: the run's clock (a ``VirtualClock`` for a ``sim/`` model by default, else
            a ``RealClock``).
        run_dir: the run directory.
        services: the underlying :class:`RunServices`.
    """

    def __init__(self, services: RunServices, clock: Clock, model: str) -> None:
        self.services = services
        self.clock = clock
        self.run_dir = Path(services.run_dir)
        self.model = model

    @property
    def llm(self) -> RecordingLLM:
        return self.services.llm

    def messages(self, hub: str | None = None) -> Any:
        """A message sink for a ``MsgHub`` (``sink=``): its messages land in ``messages``
        with ``run_id`` ``hub`` (default: the run's)."""
        return self.services.message_sink(hub)

    def __repr__(self) -> str:
        clock = "virtual" if self.clock.is_virtual else "real"
        return f"Recording({str(self.run_dir)!r}, model={self.model!r}, {clock} clock)"


@contextmanager
def recorded_run(
    run_dir: str | os.PathLike[str],
    llm: Any = "sim/instant",
    *,
    kind: str = "workflow",
    config: dict[str, Any] | None = None,
    seed: int = 0,
    clock: Clock | Literal["virtual", "real"] | None = None,
    run_id: str | None = None,
    exist_ok: bool | Literal["replace"] = False,
) -> Iterator[Recording]:
    """Record a workflow of your own as a run (see the module docstring).

    Args:
        run_dir: the run directory (a new run, or per ``exist_ok``). A directory this
            process already holds (``writing_run``) is recorded into as it is.
        llm: a model string or an ``LLMClient``.
        kind: the run's kind in ``run.json`` (what ``agentlab runs`` lists).
        config: what else ``run.json`` should keep (JSON-able); the model is added.
        seed: the simulator's seed (a model string) and the run's.
        clock: ``"virtual"`` (default for ``sim/`` models), ``"real"`` (default otherwise)
            or a clock object.
        run_id: the rows' ``run_id`` (default: the directory's name).
        exist_ok: ``False`` refuses an existing run, ``"replace"`` starts over, ``True``
            adds to it.

    ``run.json``'s status follows the block: ``running``, then ``done``, ``stopped``
    (Ctrl-C, a cancelled cell) or ``failed`` with the error.
    """
    from agentlab.llm import client_on_clock

    if clock is None:
        simulated = str(getattr(llm, "model", llm)).startswith("sim/")
        clock = "virtual" if simulated else "real"
    live_clock = clock_from_name(clock) if isinstance(clock, str) else clock
    client = client_on_clock(llm, live_clock, seed=seed)  # (refuses virtual on a real model)
    model = str(getattr(client, "model", client))
    settings = {"llm": model, **(config or {})}
    lock = (
        nullcontext()
        if held_here(run_dir)
        else writing_run(run_dir, kind=kind, config=settings, seed=seed, exist_ok=exist_ok)
    )
    with lock:
        services = RunServices(Path(run_dir), client, seed=seed, run_id=run_id or "",
                               clock="virtual" if live_clock.is_virtual else "real")  # fmt: skip
        services.bind_clock(live_clock)
        try:
            yield Recording(services, live_clock, model)
        finally:  # what ran is on disk, an interrupted block too
            services.flush()
