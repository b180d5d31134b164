"""A notebook-sized werewolf game on ``MsgHub``, pipelines and structured votes.

Roles: wolves (2, or 3 from 10 players), one seer, one witch, villagers. Each night the
wolves talk in a private hub and vote on a victim, the seer checks one player, and the
witch may save the victim (once) and poison someone (once). Each day the deaths are
announced, every living player speaks once in the day hub, and all vote to eliminate
someone. Votes are ``Literal`` models of the eligible names (built once per name set).

Every structured call has an explicit failure policy: an invalid or failed reply becomes an
abstention (or a seeded random choice with ``on_fault="random"``), is logged as a ``fault``
event, and the game goes on — a bad reply never crashes it. Same seed → same game.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from os import PathLike
from typing import Any, Literal

from pydantic import BaseModel

from agentlab.core.blocking import refuse_in_running_loop
from agentlab.core.clock import Clock, VirtualClock
from agentlab.errors import ConfigError, LLMError
from agentlab.messaging import (
    FailurePolicy,
    LLMAgent,
    MessageSink,
    Msg,
    MsgHub,
    choice_model,
    fanout,
    majority_vote,
)

__all__ = ["GameEvent", "WerewolfResult", "play_werewolf", "play_werewolf_sync"]

SCHEMA_VERSION = 1
NAMES = ("Alice", "Bob", "Cara", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivan", "Jude", "Kai",
         "Lena", "Milo", "Nora", "Omar", "Pia")  # fmt: skip


class WitchSave(BaseModel):
    """Whether the witch uses her healing potion on tonight's victim."""

    save: bool


@dataclass(frozen=True)
class GameEvent:
    """One thing that happened (``kind``: kill, check, save, poison, death, speech, vote,
    eliminated, fault, end)."""

    day: int
    phase: Literal["night", "day", "end"]
    kind: str
    actor: str | None = None
    target: str | None = None
    detail: str = ""
    schema_version: int = SCHEMA_VERSION


@dataclass
class WerewolfResult:
    """Outcome of a game: winner, length, roles, survivors and the full event log."""

    winner: Literal["villagers", "wolves", "draw"]
    days: int
    roles: dict[str, str]
    survivors: list[str]
    events: list[GameEvent] = field(default_factory=list)
    faults: int = 0
    seed: int = 0

    def events_df(self) -> Any:
        """The event log as a DataFrame."""
        import pandas as pd

        return pd.DataFrame([asdict(e) for e in self.events])


def _assign_roles(names: Sequence[str], rng: random.Random) -> dict[str, str]:
    wolves = 3 if len(names) >= 10 else 2
    n_villagers = len(names) - wolves - 2
    roles = ["wolf"] * wolves + ["seer", "witch"] + ["villager"] * n_villagers
    rng.shuffle(roles)
    return dict(zip(names, roles, strict=True))


class _Game:
    def __init__(self, client: Any, names: list[str], seed: int, max_days: int,
                 on_fault: str, clock: Clock, sink: MessageSink | None,
                 overrides: dict[str, Any]) -> None:  # fmt: skip
        self.rng = random.Random(seed)
        self.roles = _assign_roles(names, self.rng)
        self.alive = list(names)
        self.max_days, self.on_fault, self.clock, self.sink = max_days, on_fault, clock, sink
        self.events: list[GameEvent] = []
        self.faults = 0
        self.potions = {"save": True, "poison": True}
        wolves = [n for n in names if self.roles[n] == "wolf"]
        self.agents = {
            n: LLMAgent(
                n,
                f"You are {n}, playing werewolf as a {self.roles[n]}."
                + (f" Your fellow wolves: {', '.join(w for w in wolves if w != n)}." if n in wolves else "")
                + " Be brief.",
                client, role=self.roles[n], clock=clock, overrides=overrides,
            )
            for n in names
        }  # fmt: skip
        self.day = 0

    # --- helpers -------------------------------------------------------------------------
    def log(self, phase: Any, kind: str, actor: str | None = None, target: str | None = None,
            detail: str = "") -> None:  # fmt: skip
        self.events.append(GameEvent(self.day, phase, kind, actor, target, detail))

    def living(self, role: str | None = None) -> list[LLMAgent]:
        return [self.agents[n] for n in self.alive if role is None or self.roles[n] == role]

    def policy(self, field_name: str, choices: tuple[str, ...]) -> FailurePolicy:
        if self.on_fault == "random":
            return FailurePolicy(
                "default", default=lambda _e: {field_name: self.rng.choice(choices)}
            )
        return FailurePolicy("abstain")

    def note_faults(self, phase: str, replies: Sequence[Msg]) -> None:
        for m in replies:
            status = m.metadata.get("structured_status")
            if status not in (None, "ok", "repaired"):
                self.faults += 1
                self.log(phase, "fault", m.sender, detail=f"structured reply {status}")

    async def vote(self, voters: list[LLMAgent], choices: tuple[str, ...], phase: str,
                   instruction: str, label: str) -> str | None:  # fmt: skip
        model = choice_model(f"{label.title()}Vote", "target", choices)
        replies = await fanout(voters, None, instruction=instruction, response_format=model,
                               policy=self.policy("target", choices),
                               labels={"stage": label, "day": self.day})  # fmt: skip
        self.note_faults(phase, replies)
        votes = {m.sender: getattr(m.structured, "target", None) for m in replies}
        for voter, target in votes.items():
            self.log(phase, "vote", voter, target, detail=label)
        return majority_vote(votes, seed=self.rng).winner

    async def speak(self, agent: LLMAgent, phase: str, instruction: str) -> None:
        try:
            msg = await agent(instruction=instruction, labels={"stage": "speech", "day": self.day})
            self.log(phase, "speech", agent.name, detail=msg.content[:200])
        except LLMError as exc:  # a failed plain reply: the player stays silent
            self.faults += 1
            self.log(phase, "fault", agent.name, detail=f"speech failed: {exc.__class__.__name__}")

    def private(self, name: str, text: str) -> None:
        msg = Msg("moderator", text, role="user", ts=self.clock.now(), metadata={"to": [name]})
        self.agents[name].observe(msg)
        if self.sink is not None:
            self.sink.record(msg, [name], "private", self.day)

    def winner(self) -> Literal["villagers", "wolves"] | None:
        wolves = len(self.living("wolf"))
        if wolves == 0:
            return "villagers"
        return "wolves" if wolves >= len(self.alive) - wolves else None

    # --- phases --------------------------------------------------------------------------
    async def night(self) -> list[str]:
        wolves = self.living("wolf")
        prey = tuple(n for n in self.alive if self.roles[n] != "wolf")
        async with MsgHub(wolves, name="wolves", sink=self.sink, tick=self.day,
                          announcement=Msg("moderator", f"Night {self.day}: choose a victim among "
                                           f"{', '.join(prey)}.", role="user")):  # fmt: skip
            for w in wolves:
                await self.speak(w, "night", "Discuss with your pack whom to kill tonight.")
            victim = await self.vote(wolves, prey, "night", "Vote for tonight's victim.", "wolf")
        if victim:
            self.log("night", "kill", "wolves", victim)
        for seer in self.living("seer"):
            others = tuple(n for n in self.alive if n != seer.name)
            target = await self.vote([seer], others, "night", "Whose role do you check?", "seer")
            if target:
                side = "a wolf" if self.roles[target] == "wolf" else "not a wolf"
                self.private(seer.name, f"{target} is {side}.")
                self.log("night", "check", seer.name, target, side)
        dead = [victim] if victim else []
        for witch in self.living("witch"):
            dead = await self.witch(witch, victim, dead)
        return dead

    async def witch(self, witch: LLMAgent, victim: str | None, dead: list[str]) -> list[str]:
        if victim and self.potions["save"]:
            self.private(witch.name, f"The wolves attacked {victim} tonight.")
            m = await witch(instruction="Use your healing potion?", response_format=WitchSave,
                            policy="abstain", labels={"stage": "witch", "day": self.day},
                            sim_bool_p=0.3)  # fmt: skip
            self.note_faults("night", [m])
            if getattr(m.structured, "save", False):
                self.potions["save"] = False
                dead = [d for d in dead if d != victim]
                self.log("night", "save", witch.name, victim)
        if self.potions["poison"] and self.rng.random() < 0.5:
            # The witch poisons on about half the nights she could (her choice of target
            # is the model's; "none" lets it decline).
            choices = ("none", *[n for n in self.alive if n != witch.name])
            target = await self.vote([witch], choices, "night", "Poison someone?", "poison")
            if target and target != "none":
                self.potions["poison"] = False
                dead = [*dead, target] if target not in dead else dead
                self.log("night", "poison", witch.name, target)
        return dead

    async def day_phase(self, hub: MsgHub, dead: list[str]) -> None:
        for d in dead:
            self.alive.remove(d)
            self.log("day", "death", target=d, detail=self.roles[d])
        hub.remove(*dead)
        hub.tick = self.day
        text = f"Day {self.day}: " + (f"{', '.join(dead)} died." if dead else "nobody died.")
        await hub.broadcast(Msg("moderator", text, role="user", ts=self.clock.now()))
        if self.winner():
            return
        for a in self.living():
            await self.speak(a, "day", "Speak to the village: who do you suspect?")
        out = await self.vote(self.living(), tuple(self.alive), "day", "Vote to eliminate.", "day")
        if out:
            self.alive.remove(out)
            hub.remove(out)
            self.log("day", "eliminated", target=out, detail=self.roles[out])
            await hub.broadcast(Msg("moderator", f"{out} was eliminated.", role="user"))

    async def play(self) -> Literal["villagers", "wolves", "draw"]:
        async with MsgHub(self.living(), name="day", sink=self.sink,
                          announcement=Msg("moderator", "Welcome to werewolf. Players: "
                                           + ", ".join(self.alive), role="user")) as hub:  # fmt: skip
            while self.day < self.max_days:
                self.day += 1
                await self.day_phase(hub, await self.night())
                won = self.winner()
                if won:
                    return won
        return "draw"


async def play_werewolf(
    llm: Any = "sim/instant",
    players: int | Sequence[str] = 7,
    *,
    seed: int = 0,
    max_days: int = 8,
    on_fault: Literal["abstain", "random"] = "abstain",
    clock: Clock | None = None,
    sink: MessageSink | None = None,
    faults: dict[str, float] | None = None,
    run_dir: str | PathLike[str] | None = None,
    exist_ok: bool | Literal["replace"] = False,
) -> WerewolfResult:
    """Play one game to the end.

    Args:
        llm: a model string or an ``LLMClient`` (``sim/...`` runs offline).
        players: number of players (>= 7) or their names.
        seed: seeds roles, tie-breaks, the witch and the simulator.
        max_days: the game ends in a draw after this many days.
        on_fault: what a failed structured reply becomes: an abstention or a random choice.
        clock: defaults to a fresh :class:`VirtualClock` for ``sim/`` models.
        sink: optional message sink (the run log's ``messages`` dataset).
        faults: simulator fault rates applied to every call, e.g.
            ``{"sim_p_malformed": 0.3, "sim_p_rate_limit": 0.1}``.
        run_dir: a run directory to record the game in, as every driver does: its LLM
            calls (``llm_calls``, ``llm_attempts``, ``llm.call`` spans; labels ``stage``
            and ``day``, the player as ``agent_id``, run id ``game``) and, unless ``sink``
            is given, its messages. A directory the caller holds (``writing_run``, e.g. to
            replace an earlier game) is written as it is; any other becomes a new run of
            kind ``werewolf`` here (``run.json``: config, seed, status ``done`` /
            ``stopped`` / ``failed``). Without it the game's traffic is not recorded.
        exist_ok: when ``run_dir`` already holds a run (and the caller does not hold it):
            ``False`` refuses, ``"replace"`` starts over, ``True`` adds this game to it.
    """
    names = list(NAMES[:players]) if isinstance(players, int) else list(players)
    if len(names) < 7 or len(set(names)) != len(names):
        raise ConfigError(f"werewolf needs >= 7 distinct players, got {players!r}")
    if on_fault not in ("abstain", "random"):
        raise ConfigError(f"on_fault {on_fault!r}; valid: 'abstain', 'random'")
    client = llm
    if isinstance(client, str):
        from agentlab.llm import LLMClient

        client = LLMClient(client, seed=seed)
    simulated = str(client.model).startswith("sim/")
    clock = clock or (VirtualClock() if simulated else None)
    if clock is not None and hasattr(client, "with_clock"):
        client = client.with_clock(clock)
    overrides = dict(faults or {}) if simulated else {}
    if run_dir is None:
        return await _play(client, names, seed, max_days, on_fault, clock or _real(), sink,
                           overrides)  # fmt: skip
    from agentlab.runtime.recorded import recorded_run  # the one recording path

    # an unheld directory becomes a run of its own: without run.json the game's directory
    # read as kind None, status "interrupted", and `agentlab runs` / the browser missed it
    config = {"players": names, "max_days": max_days, "on_fault": on_fault,
              "faults": overrides}  # fmt: skip
    with recorded_run(run_dir, client, kind="werewolf", config=config, seed=seed,
                      clock=clock or "real", run_id="game", exist_ok=exist_ok) as rec:  # fmt: skip
        return await _play(rec.llm, names, seed, max_days, on_fault, clock or _real(),
                           sink if sink is not None else rec.messages(), overrides)  # fmt: skip


async def _play(
    client: Any, names: list[str], seed: int, max_days: int,
    on_fault: Literal["abstain", "random"], clock: Clock, sink: MessageSink | None,
    overrides: dict[str, float],
) -> WerewolfResult:  # fmt: skip
    game = _Game(client, names, seed, max_days, on_fault, clock, sink, overrides)
    winner = await game.play()
    game.log("end", "end", detail=winner)
    return WerewolfResult(winner, game.day, dict(game.roles), list(game.alive), game.events,
                          game.faults, seed)  # fmt: skip


def _real() -> Clock:
    from agentlab.core.clock import RealClock

    return RealClock()


def play_werewolf_sync(*args: Any, **kwargs: Any) -> WerewolfResult:
    """:func:`play_werewolf` for scripts; refuses inside a running loop (use ``await``
    there), as ``Experiment.run_sync`` does (``asyncio.run`` raised a bare RuntimeError)."""
    refuse_in_running_loop("an event loop is running (Jupyter?): use `await play_werewolf(...)`")
    return asyncio.run(play_werewolf(*args, **kwargs))
