"""Example games built on ``agentlab.messaging`` (werewolf)."""

from agentlab.games.werewolf import GameEvent, WerewolfResult, play_werewolf, play_werewolf_sync

__all__ = ["GameEvent", "WerewolfResult", "play_werewolf", "play_werewolf_sync"]
