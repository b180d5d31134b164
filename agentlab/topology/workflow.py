"""One AgentVerse-style run: recruitment → discussion → execution → evaluation → final.

Per run: 1 orchestrator call recruits N experts (structured, list length fixed to N); then,
per iteration, the discussion protocol of the topology runs, the N experts execute the plan
in parallel (N calls), and the orchestrator scores the result (1 call, 0-100). Below
``threshold`` the feedback goes back to the experts and the loop repeats, up to
``max_iterations``. Finally the orchestrator writes the final answer (1 call).
Every call carries the labels ``stage``, ``iteration``, ``round``, ``sender``,
``receiver_role``, ``topology``, ``run_id`` and ``task_id``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from agentlab.core.clock import Clock
from agentlab.errors import ConfigError, LLMError
from agentlab.messaging import (
    CompletionClient,
    FailurePolicy,
    LLMAgent,
    Memory,
    MessageSink,
    Msg,
    MsgHub,
    fanout,
)
from agentlab.topology.models import Evaluation, recruitment_model
from agentlab.topology.protocols import PROTOCOLS

__all__ = ["RunContext", "WorkflowConfig", "run_workflow"]

STAGES = ("recruitment", "discussion", "synthesis", "execution", "evaluation", "final")


@dataclass(frozen=True)
class WorkflowConfig:
    """Knobs of one run.

    Args:
        agents: number of experts N (>= 2).
        rounds: discussion rounds R (star: solver iterations).
        max_parallel: full-mesh worker pool size.
        agree_p: probability a simulated expert agrees (``sim_bool_p``; sim only).
        approve_p: probability a simulated reviewer approves (star; sim only).
        threshold: evaluation score needed to stop iterating.
        max_iterations: discussion → execution → evaluation loops at most.
        memory_window: messages each agent keeps in its prompt (bounds prompt growth).
    """

    agents: int = 4
    rounds: int = 3
    max_parallel: int = 5
    agree_p: float = 0.7
    approve_p: float = 0.7
    threshold: int = 50
    max_iterations: int = 3
    memory_window: int | None = 24

    def __post_init__(self) -> None:
        checks = {
            "agents": self.agents >= 2,
            "rounds": self.rounds >= 1,
            "max_parallel": self.max_parallel >= 1,
            "max_iterations": self.max_iterations >= 1,
            "agree_p": 0.0 <= self.agree_p <= 1.0,
            "approve_p": 0.0 <= self.approve_p <= 1.0,
            "threshold": 0 <= self.threshold <= 100,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            vals = {k: getattr(self, k) for k in bad}
            raise ConfigError(
                f"invalid workflow config {vals}: need agents>=2, rounds>=1, max_parallel>=1, "
                "max_iterations>=1, probabilities in [0, 1], threshold in [0, 100]"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunContext:
    """What the stages of one run share: client, config, identity, clock, message sink."""

    client: CompletionClient
    cfg: WorkflowConfig
    topology: str
    run_id: str
    task: dict[str, Any]
    clock: Clock
    sink: MessageSink | None = None
    simulated: bool = True
    stats: Counter[str] = field(default_factory=Counter)

    def labels(
        self, stage: str, iteration: int, rnd: int | None = None, **extra: Any
    ) -> dict[str, Any]:
        """The call labels of one call (``sender`` is added by the agent)."""
        return {
            "stage": stage,
            "iteration": iteration,
            "round": rnd,
            "topology": self.topology,
            "run_id": self.run_id,
            "task_id": self.task["id"],
            **extra,
        }

    def bool_kw(self, p: float) -> dict[str, Any]:
        """``sim_bool_p`` for the simulator only (real providers never see sim overrides)."""
        return {"sim_bool_p": p} if self.simulated else {}

    def hub(self, agents: Any, name: str, iteration: int, auto_broadcast: bool) -> MsgHub:
        """A hub whose deliveries land in the messages dataset (tick = iteration)."""
        return MsgHub(
            agents,
            auto_broadcast=auto_broadcast,
            name=name,
            sink=self.sink,
            tick=iteration,
            clock=self.clock,
        )


def _default_recruitment(n: int) -> dict[str, Any]:
    return {"experts": [{"role": f"generalist {i + 1}"} for i in range(n)]}


async def run_workflow(ctx: RunContext) -> dict[str, Any]:
    """Run one task under ``ctx.topology``; returns the run summary (a ``runs_df`` row).

    LLM failures that survive the client's retries end the run with ``status="error"``
    (recorded, not raised), so one bad call does not stop an experiment.
    """
    cfg, n = ctx.cfg, ctx.cfg.agents
    protocol = PROTOCOLS[ctx.topology]
    start = ctx.clock.now()
    orch = LLMAgent(
        "orchestrator",
        "You coordinate a team of experts: recruit them, evaluate their work, answer.",
        ctx.client,
        role="orchestrator",
        memory=Memory(cfg.memory_window),
        clock=ctx.clock,
    )
    task_msg = Msg("user", f"[{ctx.run_id}] Task: {ctx.task['prompt']}", role="user", ts=start)
    summary: dict[str, Any] = {"status": "ok", "score": None, "iterations": 0, "error": None}
    try:
        rec = await orch(
            task_msg,
            instruction=f"Recruit exactly {n} experts for this task (one role each).",
            response_format=recruitment_model(n),
            policy=FailurePolicy("default", default=_default_recruitment(n)),
            labels=ctx.labels("recruitment", 0, None, receiver_role="orchestrator"),
        )
        roles = [e.role for e in rec.structured.experts][:n]
        experts = [
            LLMAgent(
                f"expert_{i + 1}",
                f"You are expert {i + 1}: {roles[i]}. Work with your team on the task.",
                ctx.client,
                role="expert",
                memory=Memory(cfg.memory_window),
                clock=ctx.clock,
            )
            for i in range(n)
        ]
        for e in experts:
            e.observe(task_msg)
        for it in range(1, cfg.max_iterations + 1):
            summary["iterations"] = it
            plan = await protocol(ctx, experts, orch, it)
            results = await fanout(
                experts,
                plan,
                instruction="Execute your part of the plan and report the result.",
                labels=ctx.labels("execution", it, None, receiver_role="orchestrator"),
            )
            orch.observe(results)
            ev = await orch(
                instruction="Score the team's result from 0 to 100 and give feedback.",
                response_format=Evaluation,
                policy=FailurePolicy("default", default={"score": 0, "feedback": "unscored"}),
                labels=ctx.labels("evaluation", it, None, receiver_role="expert"),
            )
            summary["score"] = ev.structured.score
            if ev.structured.score >= cfg.threshold or it == cfg.max_iterations:
                break
            for e in experts:  # the evaluator's feedback starts the next iteration
                e.observe(ev)
        await orch(
            instruction="Write the final answer to the task.",
            labels=ctx.labels("final", summary["iterations"], None, receiver_role="user"),
        )
    except LLMError as exc:
        summary.update(status="error", error=f"{type(exc).__name__}: {exc}")
    return {
        "run_id": ctx.run_id,
        "topology": ctx.topology,
        "task_id": ctx.task["id"],
        "category": ctx.task.get("category"),
        "agents": n,
        "start": start,
        "end": ctx.clock.now(),
        "discussion_rounds": ctx.stats["rounds"],
        "early_stops": ctx.stats["early_stops"],
        "passed": summary["score"] is not None and summary["score"] >= cfg.threshold,
        **summary,
    }
