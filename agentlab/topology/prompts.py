"""Prompts, markers and history handling of the free-text AgentVerse workflow.

The structure follows the public agentraffic orchestrator (``agents/agent_a/orchestrator.py``
and ``prompts.py`` of ``dlamagna/agentraffic``): every expert call is one prompt carrying
the expert's contract, the task and what the protocol lets it see; agreement is a marker
the expert writes at the end of a free-text reply. The wording here is ours; the fields,
the markers, the history format and the truncation rule are the original's.

Markers (parsed as the original does, case-insensitively, also in the markdown forms
models produce): ``[CONSENSUS]`` / ``**CONSENSUS**`` / ``**CONSENSUS:**`` and the same for
``APPROVED``.

History truncation: before each round, a history longer than ``max_chars`` (default 6000,
the original's ``DISCUSSION_HISTORY_MAX_CHARS``) is replaced by the truncation note and its
last ``max_chars`` characters; the truncated text is kept and grows from there.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "APPROVED",
    "CONSENSUS",
    "ROLES",
    "TRUNCATION_NOTE",
    "has_approval",
    "has_consensus",
    "parse_evaluation",
    "truncate_history",
]

CONSENSUS = "[CONSENSUS]"
APPROVED = "[APPROVED]"
TRUNCATION_NOTE = "...[earlier rounds truncated]...\n"
#: the expert roles the original recruits from
ROLES = ("planner", "researcher", "executor", "critic", "summarizer")

_CONSENSUS_RE = re.compile(r"(?i)(\[CONSENSUS\]|\*{1,2}CONSENSUS[*:]*\*{0,2})")
_APPROVED_RE = re.compile(r"(?i)(\[APPROVED\]|\*{1,2}APPROVED[*:]*\*{0,2})")
_SCORE_RE = re.compile(r"(?im)score\s*[:\-]\s*([0-9]{1,3})")


def has_consensus(text: str) -> bool:
    """Whether a discussion reply carries the consensus marker (any accepted form)."""
    return bool(_CONSENSUS_RE.search(text or ""))


def has_approval(text: str) -> bool:
    """Whether a review carries the approval marker (any accepted form)."""
    return bool(_APPROVED_RE.search(text or ""))


def truncate_history(history: str, max_chars: int) -> str:
    """The history as the next round sees it: its tail when longer than ``max_chars``."""
    if max_chars > 0 and len(history) > max_chars:
        return TRUNCATION_NOTE + history[-max_chars:]
    return history


def _json_object(text: str) -> dict[str, Any] | None:
    body = text.strip()
    if body.startswith("```json"):
        body = body[7:]
    if body.startswith("```"):
        body = body[3:]
    if body.endswith("```"):
        body = body[:-3]
    body = body.strip()
    candidates = [body]
    lo, hi = body.find("{"), body.rfind("}") + 1
    if lo != -1 and hi > lo:
        candidates.append(body[lo:hi])
    for c in candidates:
        try:
            value = json.loads(c)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def parse_evaluation(text: str) -> dict[str, Any]:
    """``score`` (0-100), ``goal_achieved`` and ``feedback`` from the evaluator's reply.

    As the original: a JSON object (fenced or embedded) first, then a markdown
    ``score: N`` line; a reply with no usable score counts as 0 ("unscored").
    """
    obj = _json_object(text or "") or {}
    score: Any = obj.get("score")
    if score is None:
        m = _SCORE_RE.search(text or "")
        score = m.group(1) if m else None
    try:
        value = int(score)
    except (TypeError, ValueError):
        value = 0
    feedback = obj.get("feedback")
    return {
        "score": max(0, min(100, value)),
        "goal_achieved": bool(obj.get("goal_achieved", False)),
        "feedback": feedback if isinstance(feedback, str) else "",
        "scored": score is not None,
    }


# --- templates (str.format fields) -------------------------------------------------------

RECRUIT = """You are the orchestrator of a team of expert agents. Decide which experts the task needs.

Task:
{task}
{feedback}
Recruit exactly {n} experts. Each expert has a role (one of: {roles}), its responsibilities
and a contract: detailed instructions for that expert.
Reply with JSON only."""

SEQUENTIAL = """You are the {role} in a discussion among experts.

Your contract:
{contract}

Task:
{task}

Discussion so far:
{history}

Round: {round}

Give your expert input, taking what the others said into account.
If you think the team has reached consensus and nothing more is needed, end your reply with [CONSENSUS].
Otherwise add input that moves the team towards a solution."""

MESH = """You are the {role} in a full-mesh discussion: you write directly to each peer.

Your contract:
{contract}

Task:
{task}

Recipient of this message:
{receiver}

Full-mesh transcript so far:
{history}

Round: {round}

Write a focused message to the recipient that moves the joint decision forward: what should
this recipient consider from your point of view? Be concise but substantive.
If you think the team has reached consensus and nothing more is needed, end your reply with [CONSENSUS]."""

SOLVER = """You are the solver. Propose a solution to the task.

Your contract:
{contract}

Task:
{task}
{previous}{critiques}
Propose a detailed, specific and actionable solution."""

REVIEWER = """You are a {role} reviewing the solver's proposal.

Your contract:
{contract}

Task:
{task}

Proposal:
{proposal}

Review it critically: is it correct and complete, what is wrong or missing, what would you improve?
If the proposal is acceptable, reply with [APPROVED]. Otherwise give specific, constructive criticism."""

SYNTHESIS = """You are the orchestrator. Turn the discussion into a clear action plan.

Task:
{task}

Discussion:
{history}

Summarise clearly and actionably what should be done, based on the discussion."""

SUBTASK = """Acting as {role}:

Responsibilities: {responsibilities}

Carry out your part of the plan:
{plan}

Focus on what is relevant to your expertise."""

EXECUTE = """You are the {role} executing one subtask.

Your contract:
{contract}

Task:
{task}

Your subtask:
{subtask}

Context from the decision phase:
{context}

Carry out the subtask and report a detailed, specific result."""

EVALUATE = """You are the evaluator. Judge whether the team achieved the goal.

Task:
{task}

Results of the experts:
{results}

Iteration {iteration} of {max_iterations}. Score needed to accept: {threshold}/100.

Score completeness (30%), correctness (30%), clarity (15%), relevance (15%) and
actionability (10%), each 0-100, and give the weighted overall score.
Reply with JSON only: {{"goal_achieved": bool, "score": 0-100, "criteria": {{...}},
"rationale": str, "feedback": str (required below the threshold), "missing_aspects": [str],
"should_iterate": bool}}."""

FINAL = """You are the orchestrator writing the final, complete answer for the user.

Task:
{task}

Iterations:
{iterations}

Final results of the experts:
{results}

Evaluation:
{evaluation}

The user sees only this answer: make it complete and standalone, keep every detail, code
and step from the results, and structure it clearly."""
