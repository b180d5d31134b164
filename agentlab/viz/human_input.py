"""HumanInput: pending ``ask_user`` requests shown as forms; answers go back into the log.

Follows ``human_requests`` and ``human_answers``. The pending list is derived from the log
(requests without an answer), so it survives a browser reload or a new widget on the same
run. A submitted answer is validated against the request's schema and appended to
``human_answers`` with :func:`agentlab.store.human.answer_request`; the waiting
``ask_user`` coroutine (same kernel or another process) sees it on its next poll.
"""

from __future__ import annotations

import json
from typing import Any

import traitlets as t

from agentlab.errors import AgentlabError
from agentlab.store.human import ANSWERS, REQUESTS, answer_request, decode_json_text
from agentlab.viz._base import LiveWidget, load_css, load_esm
from agentlab.viz._static import card, esc

__all__ = ["HumanInput", "HumanModel"]


class HumanModel:
    """Requests and answers from the log → pending and recently answered lists."""

    def __init__(self, keep_answered: int = 20) -> None:
        self.requests: dict[str, dict[str, Any]] = {}
        self.answers: dict[str, Any] = {}
        self.keep_answered = keep_answered

    def ingest(self, dataset: str, rows: list[dict[str, Any]]) -> bool:
        """Add rows of ``human_requests`` or ``human_answers``."""
        for r in rows:
            rid = str(r.get("request_id") or "")
            if not rid:
                continue
            if dataset == REQUESTS:
                self.requests.setdefault(
                    rid,
                    {
                        "request_id": rid,
                        "agent_id": str(r.get("agent_id") or ""),
                        "question": str(r.get("question") or ""),
                        "schema": decode_json_text(r.get("schema")) or {},
                        "ts": r.get("ts"),
                        "tick": r.get("tick"),
                    },
                )
            elif dataset == ANSWERS:
                self.answers.setdefault(rid, decode_json_text(r.get("answer")))
        return bool(rows)

    def pending(self) -> list[dict[str, Any]]:
        """Requests without an answer, oldest first."""
        return [r for rid, r in self.requests.items() if rid not in self.answers]

    def answered(self) -> list[dict[str, Any]]:
        """The most recent answered requests with their answers (as JSON text)."""
        done = [
            {**self.requests[rid], "answer": json.dumps(a)}
            for rid, a in self.answers.items()
            if rid in self.requests
        ]
        return done[-self.keep_answered :]


class HumanInput(LiveWidget):
    """Forms for pending human requests of a run.

    Args:
        run: run directory, store ``Run`` or ``Society``.
        answered_by: name recorded with each answer.
        **kwargs: see :class:`~agentlab.viz._base.LiveWidget`.
    """

    _esm = load_esm("human_input.js")
    _css = load_css()

    datasets = (REQUESTS, ANSWERS)
    pending: t.List[Any] = t.List().tag(sync=True)
    answered: t.List[Any] = t.List().tag(sync=True)
    error = t.Unicode("").tag(sync=True)

    def __init__(self, run: Any, *, answered_by: str = "human", **kwargs: Any) -> None:
        self._model = HumanModel()
        self._answered_by = answered_by
        super().__init__(run, **kwargs)

    def _ingest(self, dataset: str, rows: list[dict[str, Any]]) -> bool:
        return self._model.ingest(dataset, rows)

    def _frame(self) -> dict[str, Any]:
        return {"pending": self._model.pending(), "answered": self._model.answered()}

    def answer(self, request_id: str, answer: Any) -> None:
        """Answer a pending request from Python (what the form's submit button does)."""
        req = self._model.requests.get(request_id)
        schema = req["schema"] if req else None
        answer_request(
            self.run_dir, request_id, answer, answered_by=self._answered_by, schema=schema
        )

    def _on_front_msg(self, msg: dict[str, Any]) -> None:
        if msg.get("type") != "answer":
            return
        rid = str(msg.get("request_id") or "")
        try:
            if rid not in self._model.requests:
                raise AgentlabError(f"unknown human request {rid!r}")
            self.answer(rid, msg.get("answer"))
            self.error = ""
        except AgentlabError as e:
            self.error = str(e)
            return
        # show the answer right away instead of waiting for the next poll
        self._follower.step(force=True)

    # --- static form -------------------------------------------------------------------

    def _text(self) -> str:
        m = self._model
        return (
            f"HumanInput {self.run_dir}: {len(m.pending())} pending, "
            f"{len(m.answers)} answered requests"
        )

    def _static_html(self) -> str:
        m = self._model
        rows = [
            '<div style="border:1px solid #e0c060;border-radius:3px;padding:3px;margin:2px 0">'
            f"<b>{esc(r['agent_id'])}</b> asks (pending): "
            f'<span style="white-space:pre-wrap">{esc(r["question"])}</span></div>'
            for r in m.pending()
        ]
        rows += [
            '<div style="border-top:1px solid #eee;padding:2px 0">'
            f"<b>{esc(r['agent_id'])}</b>: {esc(r['question'])} → "
            f"<code>{esc(r['answer'])}</code></div>"
            for r in m.answered()
        ]
        status = f"{len(m.pending())} pending, {len(m.answers)} answered"
        body = "".join(rows) or '<div style="color:#777">(no requests)</div>'
        return card("human", "Human input", status, body)
