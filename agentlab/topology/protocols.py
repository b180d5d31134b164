"""Discussion protocols: how N experts talk before they execute (the independent variable).

Each protocol takes the run context, the expert agents, the orchestrator and the iteration
and returns the plan message the experts then execute:

- ``sequential``: up to R rounds; in each round the experts speak one after another, each
  seeing everything said so far; stop early when every turn in a round agrees; then one
  synthesis call by the orchestrator.
- ``star``: expert 1 (the solver) proposes, the N-1 others review in parallel; up to R
  solver iterations; stop early when all reviewers approve; no synthesis call.
- ``full_mesh``: each round all N(N-1) directed peer messages are submitted at once through
  a worker pool of ``max_parallel`` (default 5); stop early when every message agrees; then
  one synthesis call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from agentlab.messaging import LLMAgent, Msg, MsgHub, fanout, gather_limited
from agentlab.topology.models import DiscussionTurn, PeerMessage, Review

if TYPE_CHECKING:
    from agentlab.topology.workflow import RunContext

__all__ = ["PROTOCOLS", "Protocol", "full_mesh", "sequential", "star"]

Protocol = Callable[["RunContext", Sequence[LLMAgent], LLMAgent, int], Awaitable[Msg]]


def _agreed(msgs: Sequence[Msg], field: str) -> bool:
    # An abstained/defaulted turn (structured is None) counts as "not agreed".
    return all(bool(getattr(m.structured, field, False)) for m in msgs)


async def _synthesise(
    ctx: RunContext, orch: LLMAgent, hub: MsgHub, iteration: int, rnd: int
) -> Msg:
    orch.observe([m for m in hub.history if m.sender != orch.name])
    return await orch(
        instruction="Synthesise the discussion into one concrete plan the experts will execute.",
        labels=ctx.labels("synthesis", iteration, rnd, receiver_role="expert"),
    )


async def sequential(
    ctx: RunContext, experts: Sequence[LLMAgent], orch: LLMAgent, iteration: int
) -> Msg:
    """Round-robin discussion with early stop on unanimous agreement, then synthesis."""
    rnd = 0
    async with ctx.hub(experts, "discussion", iteration, auto_broadcast=True) as hub:
        for rnd in range(1, ctx.cfg.rounds + 1):
            turns = []
            for e in experts:
                turns.append(
                    await e(
                        instruction=f"Round {rnd}: give your opinion and say if you agree.",
                        response_format=DiscussionTurn,
                        policy="abstain",
                        labels=ctx.labels("discussion", iteration, rnd, receiver_role="group"),
                        **ctx.bool_kw(ctx.cfg.agree_p),
                    )
                )
            if _agreed(turns, "agree"):
                ctx.stats["early_stops"] += 1
                break
        ctx.stats["rounds"] += rnd
        return await _synthesise(ctx, orch, hub, iteration, rnd)


async def star(ctx: RunContext, experts: Sequence[LLMAgent], orch: LLMAgent, iteration: int) -> Msg:
    """Solver proposes, reviewers review in parallel; stop when all approve; no synthesis."""
    solver, reviewers = experts[0], list(experts[1:])
    proposal: Msg | None = None
    rnd = 0
    async with ctx.hub(experts, "discussion", iteration, auto_broadcast=False) as hub:
        for rnd in range(1, ctx.cfg.rounds + 1):
            proposal = await solver(
                instruction="Propose a solution (revise it using any reviews you received).",
                labels=ctx.labels("discussion", iteration, rnd, receiver_role="reviewer"),
            )
            await hub.broadcast(proposal)
            reviews = await fanout(
                reviewers,
                None,
                instruction="Review the solver's latest proposal; approve it or not.",
                response_format=Review,
                policy="abstain",
                labels=ctx.labels("discussion", iteration, rnd, receiver_role="solver"),
                **ctx.bool_kw(ctx.cfg.approve_p),
            )
            for review in reviews:
                await hub.send(review, to=[solver.name])
            if _agreed(reviews, "approve"):
                ctx.stats["early_stops"] += 1
                break
    ctx.stats["rounds"] += rnd
    assert proposal is not None  # rounds >= 1 is validated by the config
    return proposal


async def full_mesh(
    ctx: RunContext, experts: Sequence[LLMAgent], orch: LLMAgent, iteration: int
) -> Msg:
    """All N(N-1) directed messages per round through a worker pool; then synthesis."""
    pairs = [(s, t) for s in experts for t in experts if s is not t]
    rnd = 0

    def job(s: LLMAgent, t: LLMAgent, rnd: int) -> Callable[[], Awaitable[Msg]]:
        # remember=False: every prompt of a round is the state at the start of the round,
        # as if all messages were written at once; replies are delivered after the round.
        return lambda: s.reply(
            None,
            instruction=f"Round {rnd}: write your message to {t.name}; say if you agree.",
            response_format=PeerMessage,
            policy="abstain",
            remember=False,
            labels=ctx.labels("discussion", iteration, rnd, receiver_role="peer", receiver=t.name),
            **ctx.bool_kw(ctx.cfg.agree_p),
        )

    async with ctx.hub(experts, "discussion", iteration, auto_broadcast=False) as hub:
        for rnd in range(1, ctx.cfg.rounds + 1):
            outs = await gather_limited([job(s, t, rnd) for s, t in pairs], ctx.cfg.max_parallel)
            for (s, t), m in zip(pairs, outs, strict=True):
                s.memory.add(m)
                await hub.send(m, to=[t.name])
            if _agreed(outs, "agree"):
                ctx.stats["early_stops"] += 1
                break
        ctx.stats["rounds"] += rnd
        return await _synthesise(ctx, orch, hub, iteration, rnd)


#: topology name -> discussion protocol
PROTOCOLS: dict[str, Protocol] = {
    "sequential": sequential,
    "star": star,
    "full_mesh": full_mesh,
}
