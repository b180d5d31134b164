"""``LLMAgent``: a persona, a memory of recent observations and a bounded ReAct tool loop.

Each step the agent observes the environment, asks the LLM what to do with the env's
tools offered, runs the tool calls it gets back (through ``services.env``, i.e. the
router), feeds the results back, and stops when the model answers in text or after
``max_iterations`` LLM calls. What happened goes into its memory, which is part of the
next prompt — so with the simulated backend a society of these agents produces a
visible, measurable stream of posts, likes and follows on the social feed.
"""

from __future__ import annotations

import json
from typing import Any

from agentlab.agents.base import AgentBase
from agentlab.agents.registry import register_agent
from agentlab.agents.skills import SkillSet, env_script_runner
from agentlab.core.records import LLMResponse, ToolCall
from agentlab.core.tools import run_tool_loop
from agentlab.errors import AgentlabError, ConfigError

__all__ = ["LLMAgent"]

_DEFAULT_SYSTEM = (
    "You are {name}, {description} You live in a small online community. Act in "
    "character: use the tools to read, post, reply, like and follow; keep posts short."
)


def _persona_text(persona: dict[str, Any]) -> tuple[str, str]:
    name = str(persona.get("name") or persona.get("id") or "an agent")
    parts = [persona.get("bio") or persona.get("description") or ""]
    for key, label in (("traits", "Traits"), ("interests", "Interests")):
        value = persona.get(key)
        if value:
            text = ", ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
            parts.append(f"{label}: {text}.")
    if persona.get("style_hint"):
        parts.append(f"Writing style: {persona['style_hint']}.")
    return name, (" ".join(p for p in parts if p) or "an ordinary person.")


@register_agent("llm")
class LLMAgent(AgentBase):
    """A persona-driven agent with memory and a ReAct loop over the env's tools.

    Config keys:
        persona: dict (``name``, ``bio``/``description``, ``traits``, ``interests`` ...).
        memory_size: observations kept (default 8).
        max_iterations: LLM calls per step at most (default 3; ``1`` = one call, tools
            called but their results not fed back).
        use_tools: offer the env's tools (default true).
        env_mode: ``"tools"`` (default: the ReAct loop above, one ``env.call`` per tool
            call) or ``"ask"``: one LLM call says in words what the persona does, and
            ``env.ask(text)`` hands it to the env's router (``react``, ``codegen``,
            ``plan``, ``two_tier`` — set per env module in the society config).
        system: a system-prompt template with ``{name}`` and ``{description}``.
        llm: extra keyword arguments for ``complete`` (e.g. ``max_tokens``).
        skills: Agent Skills (:mod:`agentlab.agents.skills`): skill directories, directories
            of them, or ``Skill.to_dict()`` forms (a notebook's ``Skill`` objects).
        skill_activation: ``"tool"`` (default: the model calls ``activate_skill``),
            ``"keyword"`` (a skill whose trigger words the observation names is activated
            before the LLM call) or ``"both"``.
        skill_catalogue_tokens: the skills catalogue's budget in the system prompt (400).
    """

    _skillset: SkillSet | None = None

    def initial_state(self) -> dict[str, Any]:
        for key in ("memory_size", "max_iterations"):
            v = self.config.get(key, 1)
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"LLMAgent {key} must be a positive int, got {v!r}")
        mode = self.config.get("env_mode", "tools")
        if mode not in ("tools", "ask"):
            raise ConfigError(f"LLMAgent env_mode must be 'tools' or 'ask', got {mode!r}")
        state: dict[str, Any] = {
            "memory": [], "steps": 0, "llm_calls": 0, "actions": {}, "last": ""
        }  # fmt: skip
        if self.config.get("skills"):
            state["skills"] = self.skillset.digest  # the run's record: resume checks it
        return state

    @property
    def skillset(self) -> SkillSet:
        """This agent's skills (loaded once per process and config)."""
        if self._skillset is None:
            self._skillset = SkillSet.from_config(self.config, self.agent_id)
        return self._skillset

    def _messages(self, tick: int, observation: str) -> list[dict[str, Any]]:
        name, desc = _persona_text(self.config.get("persona") or {})
        system = str(self.config.get("system") or _DEFAULT_SYSTEM).format(
            name=name, description=desc
        )
        if self.config.get("skills"):
            system += self.skillset.system_text()
        memory = "\n".join(f"- {m}" for m in self.state["memory"]) or "- (nothing yet)"
        user = (
            f"Tick {tick}. You are {self.agent_id}.\nWhat you remember:\n{memory}\n"
            f"What you see now:\n{observation or '(nothing new)'}\nWhat do you do?"
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _remember(self, item: str) -> None:
        mem = self.state["memory"]
        mem.append(item[:200])
        del mem[: max(0, len(mem) - int(self.config.get("memory_size", 8)))]

    async def step(self, tick: int) -> None:
        svc = self.services
        if svc is None:
            raise AgentlabError(f"agent {self.agent_id!r} stepped without services")
        env = svc.env
        observation = ""
        tools: list[dict[str, Any]] | None = None
        if env is not None:
            obs = await env.observe()
            observation = obs if isinstance(obs, str) else _canonical(obs)[:1500]
            if self.config.get("use_tools", True):
                tools = env.tools() or None
        messages = self._messages(tick, observation)
        skills = self.skillset if self.config.get("skills") else None
        env_tools = tools
        if skills is not None:
            skills.check(self.state.get("skills"))
            if env is not None and hasattr(env, "run_skill_script"):
                # scripts run where the env lives (this process or the Ray env actor)
                skills.script_runner = env_script_runner(env)
            skills.begin_step(self, tick, observation, messages)
            tools = skills.tools(env_tools)
        extra = dict(self.config.get("llm") or {})
        if env is not None and self.config.get("env_mode", "tools") == "ask":
            await self._ask(tick, messages, extra)
            return
        actions: dict[str, int] = self.state["actions"]
        offered = [tools]

        async def complete(iteration: int) -> LLMResponse:
            resp = await svc.llm.complete(
                messages,
                tools=offered[0],
                labels={"stage": "react", "iteration": iteration},
                **extra,
            )
            self.state["llm_calls"] += 1
            return resp

        async def call_tool(call: ToolCall) -> str:
            try:
                if skills is not None and skills.handles(call.name):
                    result = await skills.acall(self, tick, call.name, call.arguments)
                elif env is None:
                    raise AgentlabError(f"no env offers tool {call.name!r}")
                else:
                    result = await env.call(call.name, call.arguments, call_id=call.id)
                ok = True
            except AgentlabError as exc:  # a refused tool call is an observation
                result, ok = f"error: {exc}", False
            actions[call.name] = actions.get(call.name, 0) + 1
            text = result if isinstance(result, str) else _canonical(result)
            self._remember(
                f"t{tick} {call.name}({_short(call.arguments)}) -> {'ok' if ok else 'refused'}"
            )
            return text[:1000]

        def after_round(_: int) -> None:
            if skills is not None:  # an activated skill may bring run_skill_script
                offered[0] = skills.tools(env_tools)

        reply = ""
        max_iterations = int(self.config.get("max_iterations", 3))
        if max_iterations >= 1:
            end = await run_tool_loop(
                messages,
                complete=complete,
                call_tool=call_tool,
                max_iterations=max_iterations,
                stop=lambda _resp, _calls: env is None and skills is None,
                after_round=after_round,
            )
            reply = end.response.text if end.answered else ""
        if reply:
            self._remember(f"t{tick} thought: {reply[:80]}")
        self.state["last"] = reply[:200]
        self.state["steps"] += 1

    async def _ask(self, tick: int, messages: list[dict[str, Any]], extra: dict[str, Any]) -> None:
        # The persona says what it wants; the env's router turns the words into tool calls.
        svc = self.services
        assert svc is not None and svc.env is not None
        messages[-1]["content"] += " Answer with one sentence saying what you do on the feed."
        resp = await svc.llm.complete(messages, labels={"stage": "intent"}, **extra)
        self.state["llm_calls"] += 1
        intent = (resp.text or "").strip()[:500] or "read the feed"
        out = await svc.env.ask(intent)
        actions: dict[str, int] = self.state["actions"]
        for call in out.get("calls") or []:
            actions[call["tool"]] = actions.get(call["tool"], 0) + 1
        verdict = "ok" if out.get("ok") else "refused"
        self._remember(f"t{tick} asked: {intent[:80]} -> {verdict}: {out['observation'][:80]}")
        self.state["last"] = intent[:200]
        self.state["steps"] += 1

    def summary(self) -> dict[str, Any]:
        return {
            "steps": self.state["steps"],
            "llm_calls": self.state["llm_calls"],
            "actions": sum(self.state["actions"].values()),
            "memory": len(self.state["memory"]),
        }


#: ``json.dumps(value, default=str, sort_keys=True)`` without building an encoder per call
#: (the observation and each tool call's arguments and result are encoded every step)
_ENCODE = json.JSONEncoder(default=str, sort_keys=True).encode


def _canonical(value: Any) -> str:
    """JSON for a prompt: sorted keys, so the text (and the simulated reply, which hashes
    it) never depends on dict insertion order — e.g. of env state restored on resume."""
    return _ENCODE(value)


def _short(args: dict[str, Any]) -> str:
    s = _canonical(args)
    return s if len(s) <= 60 else s[:57] + "..."
