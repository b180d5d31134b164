"""The minimal agent protocol hubs and pipelines need, and an LLM-backed agent.

``HubAgent`` is the contract: a ``name``, an ``observe(msg)`` that stores what the agent
saw, and ``await agent(msg) -> Msg`` which produces a reply and, while the agent sits in an
open :class:`~agentlab.messaging.hub.MsgHub`, hands the reply to the hub for broadcast.
``LLMAgent`` implements ``reply`` with an :class:`~agentlab.llm.LLMClient` (anything with
its ``complete`` shape), optionally returning structured output under a failure policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import BaseModel

from agentlab.core.clock import Clock
from agentlab.core.tools import run_tool_loop
from agentlab.errors import AgentlabError, ConfigError
from agentlab.messaging.msg import Msg
from agentlab.messaging.structured import (
    CompletionClient,
    FailurePolicy,
    StructuredResult,
    complete_structured,
)

__all__ = ["HubAgent", "LLMAgent", "Memory"]


class Memory:
    """An append-only list of the messages an agent has seen (its own included).

    ``add`` is O(1) and stores the shared message object. ``to_chat`` renders the last
    ``window`` messages as OpenAI chat messages from the owner's point of view.
    """

    def __init__(self, window: int | None = None) -> None:
        self.window = window
        self._items: list[Msg] = []

    def add(self, msg: Msg | Iterable[Msg] | None) -> None:
        """Append one message or several (``None`` is ignored)."""
        if msg is None:
            return
        if isinstance(msg, Msg):
            self._items.append(msg)
        else:
            self._items.extend(msg)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Msg]:
        return iter(self._items)

    def __getitem__(self, i: int) -> Msg:
        return self._items[i]

    def clear(self) -> None:
        """Forget everything."""
        self._items.clear()

    def __repr__(self) -> str:
        # at the end of a cell: how much, and the last few messages (a memory of hundreds
        # printed whole would flood the notebook; index or iterate it for the rest)
        shown = self._items[-5:]
        head = f"Memory({len(self._items)} messages" + (
            f", window {self.window})" if self.window is not None else ")"
        )
        if not shown:
            return head
        more = f"\n  ... {len(self._items) - len(shown)} earlier" if len(self._items) > 5 else ""
        return head + more + "".join(f"\n  {m!r}" for m in shown)

    def to_chat(self, owner: str, sys_prompt: str | None = None) -> list[dict[str, Any]]:
        """Chat messages: the owner's messages as ``assistant``, others prefixed by sender."""
        items = self._items if self.window is None else self._items[-self.window :]
        out: list[dict[str, Any]] = []
        if sys_prompt:
            out.append({"role": "system", "content": sys_prompt})
        for m in items:
            if m.sender == owner and m.role == "assistant":
                out.append({"role": "assistant", "content": m.content})
            else:
                out.append({"role": "user", "content": f"{m.sender}: {m.content}"})
        return out


class HubAgent:
    """Base class: subclasses implement ``reply``; ``__call__`` adds hub broadcasting.

    Args:
        name: unique name within a hub.
        role: free-form role label (``"expert"``, ``"wolf"``) used in call labels.
        memory: where observed messages go (a fresh :class:`Memory` by default).
    """

    def __init__(self, name: str, role: str = "", memory: Memory | None = None) -> None:
        self.name = name
        self.role = role
        self.memory = memory if memory is not None else Memory()
        self._hubs: list[Any] = []

    def observe(self, msg: Msg | Iterable[Msg] | None) -> None:
        """Store a message this agent saw."""
        self.memory.add(msg)

    async def reply(self, msg: Msg | None = None, **kwargs: Any) -> Msg:
        """Produce a reply; subclasses override."""
        raise NotImplementedError

    async def __call__(self, msg: Msg | None = None, **kwargs: Any) -> Msg:
        """Reply to ``msg`` and let every open hub this agent is in broadcast the reply."""
        out = await self.reply(msg, **kwargs)
        for hub in list(self._hubs):
            await hub._on_reply(self, out)
        return out

    def __repr__(self) -> str:
        role = f", role={self.role!r}" if self.role else ""  # (an empty role is noise)
        memory = getattr(self, "memory", None)
        seen = f", {len(memory)} messages in memory" if isinstance(memory, Memory) else ""
        return f"{type(self).__name__}({self.name!r}{role}{seen})"


class LLMAgent(HubAgent):
    """An agent whose replies come from an LLM.

    Args:
        name: agent name (also the ``agent_id`` of its calls).
        sys_prompt: system prompt.
        client: an ``LLMClient`` or anything with its ``complete`` signature.
        role: role label, added to call labels as ``sender_role``.
        memory: conversation memory (default unbounded; pass ``Memory(window=k)``).
        labels: labels added to every call (``stage`` etc. may be overridden per call).
        policy: default failure policy for structured replies.
        clock: used to stamp replies when a response has no record.
        overrides: default ``complete`` overrides (``sim_bool_p``, ``max_tokens``...).
        skills: Agent Skills, as an ``agentlab.agents.skills.SkillSet`` (the one
            implementation; messaging does not import it): the catalogue joins the system
            prompt; each reply activates by keyword the skills the incoming text names and
            (unstructured replies) offers the skill tools for up to ``skill_rounds`` calls.
            ``SkillSet.record_to(sink)`` records ``skill_activations``;
            ``SkillSet.script_runner`` enables ``run_skill_script``.
        skill_rounds: skill tool calls allowed per reply before the model must answer.
    """

    def __init__(
        self,
        name: str,
        sys_prompt: str,
        client: CompletionClient,
        *,
        role: str = "",
        memory: Memory | None = None,
        labels: dict[str, Any] | None = None,
        policy: FailurePolicy | str = "raise",
        clock: Clock | None = None,
        overrides: dict[str, Any] | None = None,
        skills: Any = None,
        skill_rounds: int = 3,
    ) -> None:
        super().__init__(name, role, memory)
        if not isinstance(skill_rounds, int) or skill_rounds < 0:
            raise ConfigError(f"skill_rounds must be an int >= 0, got {skill_rounds!r}")
        self.skills = skills
        self.skill_rounds = skill_rounds
        self.sys_prompt = sys_prompt
        self.client = client
        self.labels = dict(labels or {})
        self.policy = FailurePolicy.coerce(policy)
        self.clock = clock
        self.overrides = dict(overrides or {})
        #: the last structured result (status, attempts, error) for inspection
        self.last_result: StructuredResult[Any] | None = None

    async def reply(
        self,
        msg: Msg | None = None,
        *,
        instruction: str | None = None,
        response_format: type[BaseModel] | None = None,
        policy: FailurePolicy | str | None = None,
        labels: dict[str, Any] | None = None,
        remember: bool = True,
        **overrides: Any,
    ) -> Msg:
        """Observe ``msg``, call the LLM, remember and return the reply.

        Args:
            msg: input message (observed first), or ``None``.
            instruction: a user turn appended for this call only (not remembered).
            response_format: a pydantic model → structured reply under ``policy``.
            policy: overrides the agent's failure policy for this call.
            labels: extra call labels for this call.
            remember: store the reply in this agent's memory.
            **overrides: passed to ``client.complete``.
        """
        self.observe(msg)
        skills = self.skills
        system = self.sys_prompt
        if skills is not None:
            skills.active = {}  # a reply is a step: last reply's activations end
            system += skills.system_text()
            seen = f"{msg.content if msg is not None else ''} {instruction or ''}"
            for text in skills.activate_matching(self, None, seen):
                system += "\n\n" + text
        chat = self.memory.to_chat(self.name, system)
        if instruction:
            chat.append({"role": "user", "content": instruction})
        call_labels = {"sender": self.name, "sender_role": self.role, **self.labels}
        call_labels.update(labels or {})
        kw = {**self.overrides, **overrides}
        if response_format is None:
            if skills is not None:
                resp = await self._complete_with_skills(chat, call_labels, kw)
            else:
                resp = await self.client.complete(
                    chat, labels=call_labels, agent_id=self.name, **kw
                )
            out = Msg(self.name, resp.text, ts=resp.record.end, usage=resp.usage)
        else:
            res = await complete_structured(
                self.client,
                chat,
                response_format,
                policy=policy if policy is not None else self.policy,
                labels=call_labels,
                agent_id=self.name,
                **kw,
            )
            self.last_result = res
            out = _structured_msg(self.name, res, self.clock)
        if remember:
            self.memory.add(out)
        return out

    async def _complete_with_skills(
        self, chat: list[dict[str, Any]], labels: dict[str, Any], kw: dict[str, Any]
    ) -> Any:
        """Complete with the skill tools offered; run the model's skill calls (a refused
        one is an ``error: ...`` tool message) until it answers or ``skill_rounds`` pass."""
        skills = self.skills

        async def complete(round_: int) -> Any:
            tools = skills.tools(None) if round_ < self.skill_rounds else None
            return await self.client.complete(
                chat, tools=tools, labels=labels, agent_id=self.name, **kw
            )

        async def call_tool(c: Any) -> str:
            try:
                text = await skills.acall(self, None, c.name, c.arguments)
            except AgentlabError as exc:
                text = f"error: {exc}"
            return text[:4000]

        end = await run_tool_loop(
            chat,
            complete=complete,
            call_tool=call_tool,
            max_iterations=self.skill_rounds + 1,
            stop=lambda _resp, calls: not all(skills.handles(c.name) for c in calls),
        )
        return end.response


def _structured_msg(name: str, res: StructuredResult[Any], clock: Clock | None) -> Msg:
    value = res.value
    if res.response is not None and res.ok:
        text, ts, usage = res.response.text, res.response.record.end, res.response.usage
    else:
        # Defaults and abstentions are explicit in the transcript, never an empty reply.
        text = value.model_dump_json() if isinstance(value, BaseModel) else f"[{res.status}]"
        ts = clock.now() if clock is not None else 0.0
        usage = None
    return Msg(
        name,
        text,
        ts=ts,
        usage=usage,
        structured=value,
        metadata={"structured_status": res.status, "attempts": res.attempts},
    )
