"""Discussion protocols: what each expert is shown and who waits for whom (the variable).

As the public agentraffic orchestrator runs them (``force_structure`` in brackets); R is
``WorkflowConfig.rounds`` (3), N the experts:

- ``sequential`` [horizontal]: up to R rounds; in a round the experts are called one after
  another, each shown its contract, the task and the discussion history *up to the end
  of the previous round* (the history grows after the round, as
  ``--- Round r ---`` + ``ROLE: reply`` lines); a round agrees when every reply carries
  ``[CONSENSUS]``; then 1 synthesis call on the history. N·r + 1 calls.
- ``star`` [vertical]: the solver (the first planner, else the first expert) proposes,
  shown its previous proposal and the reviewers' critiques; the N-1 reviewers, shown only
  the current proposal, review it in parallel; up to R solver iterations; the round
  agrees when every review carries ``[APPROVED]`` (Star always stops there); no synthesis (the plan is the last
  proposal). N·r calls.
- ``full_mesh``: each round all N(N-1) directed messages (sender → receiver), each shown
  the sender's contract, the receiver's role and the full-mesh history of the previous
  rounds, go through a pool of ``max_parallel`` (5) workers; the round agrees when every
  message carries ``[CONSENSUS]``; the history grows by ``SENDER -> RECEIVER: reply``
  lines sorted by (sender, receiver); then 1 synthesis call. N(N-1)·r + 1 calls.

Before each round the history is cut to its last ``history_chars`` characters
(:func:`agentlab.topology.prompts.truncate_history`). With ``early_stop`` (default) the
discussion ends at the first round that agrees; otherwise all R rounds run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from agentlab.messaging import FailurePolicy, gather_limited
from agentlab.messaging.structured import complete_structured
from agentlab.topology import prompts as P
from agentlab.topology.models import DiscussionTurn, Expert, PeerMessage, Review

if TYPE_CHECKING:
    from agentlab.topology.context import RunContext

__all__ = ["PROTOCOLS", "Protocol", "ask", "full_mesh", "sequential", "star", "turn"]

Protocol = Callable[["RunContext", list[Expert], int], Awaitable[str]]


def _chat(
    ctx: RunContext, sender: str, role: str, prompt: str, labels: dict[str, Any]
) -> list[dict[str, Any]]:
    # The session line makes every call's messages distinct — across runs of one task,
    # iterations, and full-mesh messages to two peers of the same role — so the seeded
    # simulator draws them independently, as a sampling model would (a dozen tokens).
    to = f", to {labels['receiver']}" if labels.get("receiver") else ""
    session = f"Session {ctx.run_id}, iteration {labels.get('iteration')}{to}."
    return [
        {"role": "system", "content": f"You are {sender}, the {role}. {session}"},
        {"role": "user", "content": prompt},
    ]


async def ask(
    ctx: RunContext, sender: str, role: str, prompt: str, labels: dict[str, Any], **kw: Any
) -> tuple[str, float]:
    """One free-text call; returns the reply and its end time.

    ``cfg.max_tokens`` (when set) caps the call's ``max_tokens``, explicit or not.
    """
    labels = {"sender": sender, "sender_role": role, **labels}
    cap = ctx.cfg.max_tokens
    if cap:
        kw["max_tokens"] = min(int(kw.get("max_tokens") or cap), cap)
    resp = await ctx.client.complete(
        _chat(ctx, sender, role, prompt, labels), labels=labels, agent_id=sender, **kw
    )
    return resp.text, resp.record.end


_STRUCTURED: dict[str, tuple[type[BaseModel], str, str]] = {
    P.CONSENSUS: (DiscussionTurn, "opinion", "agree"),
    P.APPROVED: (Review, "critique", "approve"),
}


async def turn(
    ctx: RunContext,
    e: Expert,
    prompt: str,
    labels: dict[str, Any],
    marker: str,
    p: float,
    mesh: bool = False,
) -> tuple[str, bool, float]:
    """A discussion turn: (reply text, whether it agrees, end time), in the config's style."""
    if ctx.cfg.style == "free_text":
        text, end = await ask(
            ctx, e.name, e.role, prompt, labels, **ctx.sim_kw(sim_marker=marker, sim_marker_p=p)
        )
        check = P.has_consensus if marker == P.CONSENSUS else P.has_approval
        return text, check(text), end
    model, text_field, flag = _STRUCTURED[marker]
    if mesh:
        model, text_field = PeerMessage, "message"
    res = await complete_structured(
        ctx.client,
        _chat(ctx, e.name, e.role, prompt, labels),
        model,
        policy=FailurePolicy("abstain"),
        labels={"sender": e.name, "sender_role": e.role, **labels},
        agent_id=e.name,
        **ctx.sim_kw(sim_bool_p=p),
    )
    end = res.response.record.end if res.response is not None else ctx.clock.now()
    value = res.value
    if value is None:  # abstained: an explicit non-agreeing turn
        return f"[{res.status}]", False, end
    return str(getattr(value, text_field)), bool(getattr(value, flag)), end


def _finish(ctx: RunContext, rnd: int, agreed: bool, always: bool = False) -> bool:
    """Book-keeping after a round; True when the discussion stops here.

    ``always``: Star stops on approval whatever ``early_stop`` says, as the original.
    """
    if agreed:
        ctx.stats["agreed_rounds"] += 1
    stop = agreed and (ctx.cfg.early_stop or always)
    if stop:
        ctx.stats["early_stops"] += 1
    return stop


async def _synthesise(ctx: RunContext, history: str, it: int, rnd: int) -> str:
    prompt = P.SYNTHESIS.format(task=ctx.task["prompt"], history=history)
    labels = ctx.labels("synthesis", it, rnd, receiver_role="expert", call="synthesize_discussion")
    text, _ = await ask(ctx, "orchestrator", "orchestrator", prompt, labels, max_tokens=2048)
    return text


async def sequential(ctx: RunContext, experts: list[Expert], it: int) -> str:
    """Round-robin discussion on the previous rounds' history; then synthesis."""
    cfg, history, rnd = ctx.cfg, "", 0
    k = cfg.rates_agents  # turns per round at the N the rates were measured at
    for rnd in range(1, cfg.rounds + 1):
        history = P.truncate_history(history, cfg.history_chars)
        shown = history or "(No discussion yet)"
        replies: list[tuple[Expert, str]] = []
        agreed = True
        for e in experts:
            prompt = P.SEQUENTIAL.format(role=e.role, contract=e.contract, task=ctx.task["prompt"],
                                         history=shown, round=rnd)  # fmt: skip
            labels = ctx.labels("discussion", it, rnd, receiver_role="group",
                                call="horizontal_discussion")  # fmt: skip
            text, ok, end = await turn(ctx, e, prompt, labels, P.CONSENSUS, ctx.marker_p(rnd, k))
            ctx.record(e.name, text, end, [x.name for x in experts if x is not e], it)
            replies.append((e, text))
            agreed = agreed and ok
        history += f"\n--- Round {rnd} ---\n" + "".join(
            f"{e.role.upper()}: {t}\n" for e, t in replies
        )
        if _finish(ctx, rnd, agreed):
            break
    ctx.stats["rounds"] += rnd
    return await _synthesise(ctx, history, it, rnd)


async def star(ctx: RunContext, experts: list[Expert], it: int) -> str:
    """Solver proposes, reviewers review the proposal in parallel; no synthesis."""
    cfg = ctx.cfg
    solver = next((e for e in experts if e.role == "planner"), experts[0])
    reviewers = [e for e in experts if e is not solver]
    proposal, critiques, rnd = "", "", 0
    k = cfg.rates_agents - 1  # reviews per round at the rates' N
    for rnd in range(1, cfg.rounds + 1):
        prev = f"\nYour previous proposal:\n{proposal}\n" if proposal else ""
        crit = f"\nReviewer critiques:\n{critiques}\n" if critiques else ""
        prompt = P.SOLVER.format(contract=solver.contract, task=ctx.task["prompt"],
                                 previous=prev, critiques=crit)  # fmt: skip
        labels = ctx.labels("discussion", it, rnd, receiver_role="reviewer", call="vertical_solver")
        proposal, end = await ask(ctx, solver.name, solver.role, prompt, labels)
        ctx.record(solver.name, proposal, end, [r.name for r in reviewers], it)

        async def review(r: Expert, proposal: str = proposal, rnd: int = rnd) -> tuple[str, bool]:
            prompt = P.REVIEWER.format(role=r.role, contract=r.contract, task=ctx.task["prompt"],
                                       proposal=proposal)  # fmt: skip
            labels = ctx.labels("discussion", it, rnd, receiver_role="solver",
                                call="vertical_reviewer")  # fmt: skip
            text, ok, end = await turn(ctx, r, prompt, labels, P.APPROVED, ctx.marker_p(rnd, k))
            ctx.record(r.name, text, end, [solver.name], it)
            return text, ok

        reviews = await asyncio.gather(*(review(r) for r in reviewers))
        critiques = "\n".join(
            f"{r.role}: {t}" for r, (t, _) in zip(reviewers, reviews, strict=True)
        )
        if _finish(ctx, rnd, bool(reviews) and all(ok for _, ok in reviews), always=True):
            break
    ctx.stats["rounds"] += rnd
    return proposal


async def full_mesh(ctx: RunContext, experts: list[Expert], it: int) -> str:
    """All N(N-1) directed messages per round through a worker pool; then synthesis."""
    cfg, history, rnd = ctx.cfg, "", 0
    pairs = [(s, t) for s in experts for t in experts if s is not t]
    k = cfg.rates_agents * (cfg.rates_agents - 1)  # messages per round at the rates' N
    for rnd in range(1, cfg.rounds + 1):
        history = P.truncate_history(history, cfg.history_chars)
        shown = history or "(No prior full-mesh messages)"
        p = ctx.marker_p(rnd, k)

        def job(
            s: Expert, t: Expert, rnd: int = rnd, shown: str = shown, p: float = p
        ) -> Callable[[], Awaitable[tuple[str, bool]]]:
            async def go() -> tuple[str, bool]:
                prompt = P.MESH.format(role=s.role, contract=s.contract, task=ctx.task["prompt"],
                                       receiver=t.role, history=shown, round=rnd)  # fmt: skip
                labels = ctx.labels("discussion", it, rnd, receiver_role="peer", receiver=t.name,
                                    call="full_mesh_message")  # fmt: skip
                text, ok, end = await turn(ctx, s, prompt, labels, P.CONSENSUS, p, mesh=True)
                ctx.record(s.name, text, end, [t.name], it)
                return text, ok

            return go

        outs = await gather_limited([job(s, t) for s, t in pairs], cfg.max_parallel)
        history += f"\n--- Full-Mesh Round {rnd} ---\n" + "".join(
            f"{s.role.upper()} -> {t.role.upper()}: {text}\n"
            for (s, t), (text, _) in zip(pairs, outs, strict=True)
        )
        if _finish(ctx, rnd, bool(outs) and all(ok for _, ok in outs)):
            break
    ctx.stats["rounds"] += rnd
    return await _synthesise(ctx, history, it, rnd)


#: topology name -> discussion protocol
PROTOCOLS: dict[str, Protocol] = {
    "sequential": sequential,
    "star": star,
    "full_mesh": full_mesh,
}
