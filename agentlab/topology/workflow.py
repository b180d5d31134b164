"""One AgentVerse run as the public agentraffic orchestrator runs it.

Per iteration (up to ``max_iterations``): 1 orchestrator call **recruits** N experts
(structured: role, responsibilities, contract; the evaluator's feedback of the previous
iteration is in its prompt); the topology's **discussion** protocol runs
(:mod:`agentlab.topology.protocols`); the N experts **execute** their subtasks in parallel
(N calls); the orchestrator **evaluates** the results (1 call, free text whose JSON
``score`` is parsed; accepted at ``score >= threshold``). After the last iteration the
orchestrator writes the **final** answer (1 call).

Discussion turns are free text whose agreement is a marker in the text (``[CONSENSUS]``,
``[APPROVED]``) by default; ``style="structured"`` asks for pydantic replies with
``agree`` / ``approve`` fields instead (the earlier variant). On ``sim/`` backends the
markers, the boolean fields and the evaluator's score occur at the configured rates
(:class:`WorkflowConfig`); real providers never see those ``sim_*`` overrides.

Every call carries the labels ``stage``, ``iteration``, ``round``, ``sender``,
``sender_role``, ``receiver_role`` (``receiver`` for full-mesh messages), ``call`` (the
original's call label, e.g. ``full_mesh_message``), ``topology``, ``run_id``, ``task_id``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentlab.errors import LLMError
from agentlab.messaging import FailurePolicy
from agentlab.messaging.structured import complete_structured
from agentlab.topology import prompts as P
from agentlab.topology.context import (
    PAPER_CONSENSUS_RATES,
    PAPER_PASS_RATES,
    STAGES,
    STYLES,
    RunContext,
    WorkflowConfig,
)
from agentlab.topology.models import Expert, expert_team_model
from agentlab.topology.protocols import PROTOCOLS, ask

__all__ = [
    "PAPER_CONSENSUS_RATES",
    "PAPER_PASS_RATES",
    "STAGES",
    "STYLES",
    "RunContext",
    "WorkflowConfig",
    "run_workflow",
]


async def _recruit(ctx: RunContext, it: int, feedback: str) -> list[Expert]:
    n = ctx.cfg.agents
    fb = f"\nFeedback from the previous iteration:\n{feedback}\n" if feedback else ""
    prompt = P.RECRUIT.format(task=ctx.task["prompt"], feedback=fb, n=n, roles=", ".join(P.ROLES))
    default = {"experts": [{"role": "executor", "responsibilities": "", "contract": ""}] * n}
    res = await complete_structured(
        ctx.client,
        [{"role": "system", "content": f"Orchestrator. Session {ctx.run_id}, iteration {it}."},
         {"role": "user", "content": prompt}],
        expert_team_model(n),
        policy=FailurePolicy("default", default=default),
        labels=ctx.labels("recruitment", it, None, sender="orchestrator",
                          sender_role="orchestrator", receiver_role="orchestrator",
                          call="expert_recruitment"),
        agent_id="orchestrator",
    )  # fmt: skip
    team: Any = res.value
    specs = list(getattr(team, "experts", None) or [])[:n]
    if len(specs) < n:  # an unusable reply: executors, as the original pads the team
        padded: Any = expert_team_model(n).model_validate(default)
        specs = [*specs, *padded.experts][:n]
    return [
        Expert(
            f"expert_{i + 1}", s.role, s.responsibilities, s.contract or f"You are the {s.role}."
        )
        for i, s in enumerate(specs)
    ]


async def _execute(ctx: RunContext, experts: list[Expert], plan: str, it: int) -> list[str]:
    async def one(e: Expert) -> str:
        sub = P.SUBTASK.format(role=e.role, responsibilities=e.responsibilities, plan=plan)
        prompt = P.EXECUTE.format(role=e.role, contract=e.contract, task=ctx.task["prompt"],
                                  subtask=sub, context=plan[: ctx.cfg.context_chars])  # fmt: skip
        text, _ = await ask(ctx, e.name, e.role, prompt,
                            ctx.labels("execution", it, None, receiver_role="orchestrator",
                                       call=f"execute_{e.role}"))  # fmt: skip
        return text

    return list(await asyncio.gather(*(one(e) for e in experts)))


async def _evaluate(
    ctx: RunContext, experts: list[Expert], outputs: list[str], it: int
) -> dict[str, Any]:
    cfg = ctx.cfg
    results = "\n\n".join(f"[{e.role}]:\n{o}" for e, o in zip(experts, outputs, strict=True))
    fields = dict(task=ctx.task["prompt"], iteration=it, max_iterations=cfg.max_iterations,
                  threshold=cfg.threshold)  # fmt: skip
    prompt = P.EVALUATE.format(results=results, **fields)
    if len(prompt) > cfg.eval_prompt_chars:  # keep the most recent results, as the original
        room = max(cfg.eval_prompt_chars - len(P.EVALUATE.format(results="", **fields)), 0)
        if room:
            prompt = P.EVALUATE.format(results=results[-room:], **fields)
    marker = f'{{"goal_achieved": true, "score": {cfg.pass_score}}}'
    p_pass = cfg.pass_rate(ctx.topology, ctx.task.get("category"))
    text, _ = await ask(
        ctx, "orchestrator", "orchestrator", prompt,
        ctx.labels("evaluation", it, None, receiver_role="orchestrator", call="evaluate_results"),
        **ctx.sim_kw(sim_marker=marker, sim_marker_p=p_pass),
    )  # fmt: skip
    ev = P.parse_evaluation(text)
    ev["accepted"] = ev["score"] >= cfg.threshold if cfg.threshold > 0 else ev["goal_achieved"]
    return ev


def _final_prompt(ctx: RunContext, experts: list[Expert], outputs: list[str],
                  history: list[dict[str, Any]]) -> str:  # fmt: skip
    cap = ctx.cfg.result_chars

    def clip(t: str) -> str:
        return t if len(t) <= cap else t[:cap] + f"\n... [truncated {len(t) - cap} chars]"

    results = "\n\n".join(f"[{e.role}]:\n{clip(o)}" for e, o in zip(experts, outputs, strict=True))
    iters = "\n".join(f"Iteration {h['iteration']}: score={h['score']}, experts={h['roles']}"
                      for h in history)  # fmt: skip
    last = history[-1]
    evaluation = f"Score: {last['score']}/100\nGoal achieved: {last['accepted']}\n"
    return P.FINAL.format(task=ctx.task["prompt"], iterations=iters or "(single iteration)",
                          results=results, evaluation=evaluation)  # fmt: skip


async def run_workflow(ctx: RunContext) -> dict[str, Any]:
    """Run one task under ``ctx.topology``; returns the run summary (a ``runs_df`` row).

    LLM failures that survive the client's retries end the run with ``status="error"``
    (recorded, not raised), so one bad call does not stop an experiment.
    """
    cfg = ctx.cfg
    protocol = PROTOCOLS[ctx.topology]
    start = ctx.clock.now()
    summary: dict[str, Any] = {"status": "ok", "score": None, "iterations": 0, "error": None}
    history: list[dict[str, Any]] = []
    try:
        feedback = ""
        experts: list[Expert] = []
        outputs: list[str] = []
        for it in range(1, cfg.max_iterations + 1):
            summary["iterations"] = it
            with ctx.stage("recruitment", it):
                experts = await _recruit(ctx, it, feedback)
            with ctx.stage("discussion", it):  # synthesis calls included
                plan = await protocol(ctx, experts, it)
            with ctx.stage("execution", it):
                outputs = await _execute(ctx, experts, plan, it)
            with ctx.stage("evaluation", it):
                ev = await _evaluate(ctx, experts, outputs, it)
            summary["score"] = ev["score"]
            ctx.stats["unscored"] += not ev["scored"]
            history.append({"iteration": it, "score": ev["score"], "accepted": ev["accepted"],
                            "roles": [e.role for e in experts]})  # fmt: skip
            if ev["accepted"]:
                break
            feedback = ev["feedback"] or (
                f"Score {ev['score']}/100 is below the acceptance threshold of {cfg.threshold}; "
                "adjust the team and address the gaps."
            )
        with ctx.stage("final", summary["iterations"]):
            await ask(ctx, "orchestrator", "orchestrator",
                      _final_prompt(ctx, experts, outputs, history),
                      ctx.labels("final", summary["iterations"], None, receiver_role="user",
                                 call="final_output"), max_tokens=4096)  # fmt: skip
    except LLMError as exc:
        summary.update(status="error", error=f"{type(exc).__name__}: {exc}")
    return {
        "run_id": ctx.run_id,
        "topology": ctx.topology,
        "task_id": ctx.task["id"],
        "category": ctx.task.get("category"),
        "agents": cfg.agents,
        "start": start,
        "end": ctx.clock.now(),
        "discussion_rounds": ctx.stats["rounds"],
        "early_stops": ctx.stats["early_stops"],
        "agreed_rounds": ctx.stats["agreed_rounds"],
        "unscored": ctx.stats["unscored"],
        "passed": bool(history and history[-1]["accepted"]),
        **summary,
    }
