"""Helpers for the runtime tests: a tiny order-independent env and log comparison."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from agentlab.env.base import EnvBase
from agentlab.env.registry import register_env
from agentlab.env.tools import tool

# Columns that legitimately differ between two runs of the same seed.
VOLATILE = {
    "_shard",
    "_seq",
    "ts",
    "wall_s",
    "start",
    "end",
    "first_token",
    "queue_wait",
    "request_id",
    "aimd_limit",
    "in_flight",
    "latency",
    "ttft",
    "latency_mean_s",  # (a timeline row's: its calls' latencies, real time on a real clock)
    # which prompt blocks the simulated server still holds depends on arrival order, which
    # a real clock does not fix (a virtual clock does: those tests compare it)
    "cached_tokens",
    # diagnostic text whose frames differ by executor (Ray worker vs local)
    "traceback",
}


@register_env("test_notes")
class NoteBoard(EnvBase):
    """A shared board of short notes. Notes posted during a tick appear after it."""

    def init(self, seed: int = 0) -> None:
        super().init(seed)
        self.notes: list[list[str]] = []
        self.pending: list[list[str]] = []

    @tool
    def post(self, text: str, agent_id: str) -> str:
        """Post a note.

        Args:
            text: the note.
        """
        self.pending.append([agent_id, text[:40]])
        return "posted"

    @tool
    def count(self) -> int:
        """How many notes are on the board."""
        return len(self.notes)

    def observe(self, agent_id: str) -> str:
        return "; ".join(f"{a}: {t}" for a, t in self.notes[-3:])

    def step(self, tick: int) -> None:
        super().step(tick)
        # Sorted: the board does not depend on the order agents ran in (local == Ray).
        for a, t in sorted(self.pending):
            self.notes.append([a, t])
            self.emit("note", author=a, tick_override=tick)
        self.pending = []

    def state_dict(self) -> dict[str, Any]:
        return {"notes": self.notes, "pending": self.pending}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.notes = [list(n) for n in state["notes"]]
        self.pending = [list(n) for n in state["pending"]]


# Build the tool schemas once here: forked children of the kill test inherit them warm.
NoteBoard.tool_specs()


def log_rows(run_dir: Path) -> dict[str, Counter[str]]:
    """Every replay row per dataset, volatile columns dropped, as a multiset."""
    out: dict[str, Counter[str]] = {}
    for d in sorted((run_dir / "replay").iterdir()):
        if not d.is_dir():
            continue
        rows: Counter[str] = Counter()
        for f in sorted(d.glob("*.jsonl")):
            for line in f.read_bytes().splitlines():
                row = json.loads(line)
                rows[
                    json.dumps({k: v for k, v in row.items() if k not in VOLATILE}, sort_keys=True)
                ] += 1
        out[d.name] = rows
    return out


def span_rows(run_dir: Path) -> Counter[str]:
    """Spans reduced to (name, status, agent, tick) — ids and times are random."""
    c: Counter[str] = Counter()
    for f in sorted((run_dir / "trace").glob("*.jsonl")):
        for line in f.read_bytes().splitlines():
            s = json.loads(line)
            attrs = s.get("attributes") or s.get("attrs") or {}
            agent, tick = attrs.get("gen_ai.agent.id"), attrs.get("agentlab.tick")
            c[f"{s['name']}|{s.get('status')}|{agent}|{tick}"] += 1
    return c


def final_state(run_dir: Path) -> dict[str, Any]:
    """Agents (at the committed tick), env checkpoint states, and the committed tick."""
    from agentlab.runtime import Society

    s = Society.open(run_dir, progress=False)
    return {
        "tick": s.tick,
        "agents": s.agent_states(),
        "env": [{k: v for k, v in d.items()} for d in s.env_state()],
    }
