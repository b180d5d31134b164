"""``Lineages``: which threads' histories continue what this system handed its model and
committed, so a model call can name the messages it saw before (``KnownPrefix``).

A thread's history only grows between compactions: a slice hands the model the history
and its new messages, then commits exactly those plus the reply. So message ``k`` of one
unbroken chain of such slices is the same message in every later call of that chain. A
chain is named by a process-wide number (a *lineage*). The simulator keys what it derived
from a conversation (its request hash, prompt tokens and context scan) by lineage
(:mod:`agentlab.llm.sim_slots`): a call then reads the messages added since the thread's
last call instead of hashing the whole decoded history again, fresh strings whose every
character the hash would read (per-call cost flat as histories grow, issue 26).

A chain continues only while the store hands back the very state object this system
committed last for the thread (identity: the in-memory store keeps the object it was
given), and only after a commit: a slice that handed its model a list and then did not
commit (it failed) ends the chain, as do a store that returns copies (SQLite), another
writer, a deleted or compacted history; the next call starts a new lineage and the
simulator keys it by content as before.
"""

from __future__ import annotations

import itertools
from typing import Any

from agentlab.llm.encoded_history import EncodedHistory
from agentlab.llm.sim_slots import KnownPrefix

__all__ = ["Lineages"]

#: process-wide: a lineage number is never reused (the simulator's tables are per process)
_numbers = itertools.count(1)


class Lineages:
    """Per thread: ``(lineage, state bytes committed last)``. Kept only for a store that
    returns the objects it holds (else a thread's chain could not be told apart from a
    copy), and bounded like the simulator's own tables (past ``limit`` threads the older
    half by first commit is dropped, in one pass; a thread without an entry starts a new
    lineage)."""

    __slots__ = ("_chains", "_states", "limit")

    def __init__(self, store: Any, limit: int = 1 << 16) -> None:
        from agentlab.runtime.threads.stores import MemoryThreadStore

        self.limit = limit if isinstance(store, MemoryThreadStore) else 0
        self._chains: dict[str, int] = {}
        self._states: dict[str, bytes | None] = {}

    def of(self, tid: str, raw_state: bytes | None) -> int:
        """The lineage of the history stored with ``raw_state``: the thread's chain if this
        system committed that very object last, else a new one (0: not kept)."""
        if not self.limit:
            return 0
        if raw_state is not None and self._states.get(tid) is raw_state:
            return self._chains[tid]
        return next(_numbers)

    def fresh(self) -> int:
        """A new lineage (a compacted history starts one; 0: not kept)."""
        return next(_numbers) if self.limit else 0

    def hand(
        self,
        tid: str,
        msgs: list[dict[str, Any]] | None,
        lineage: int,
        lines: bytes | bytearray = b"",
        new: list[dict[str, Any]] | None = None,
        n: int = 0,
    ) -> list[dict[str, Any]] | EncodedHistory:
        """What to hand the model for a call on ``msgs`` (lineage ``lineage``'s, all of
        them: the slice commits exactly these and the reply, or the chain ends here until
        :meth:`committed`). A copy either way: ``msgs`` lives on in the next slice, and a
        model that keeps its list must not see later turns appear in it. ``msgs`` ``None``:
        the history is still encoded (``lines``, ``n`` messages) and followed by ``new``;
        the model then decodes only what it reads (a lineage-keyed simulator call: the
        last few)."""
        if msgs is not None and (not lineage or not msgs):
            return list(msgs)
        states = self._states
        if lineage and tid in states:
            states[tid] = None  # no load continues it until the commit
        if msgs is None:
            return EncodedHistory(lines, n, new or [], lineage)
        return KnownPrefix(msgs, lineage)

    def continued(self, tid: str, lineage: int) -> bool:
        """Whether ``lineage`` (from :meth:`of`) goes on the chain this system committed
        last for the thread (so the state's message count is the history's: checked at
        the chain's start, :meth:`committed`)."""
        return bool(lineage) and self._chains.get(tid) == lineage

    def committed(
        self, tid: str, lineage: int, raw_state: bytes, lines: bytes | bytearray, n: int
    ) -> None:
        """The slice of lineage ``lineage`` committed ``raw_state`` and the history
        ``lines`` whose message count the state says is ``n`` (the chain goes on). A chain
        starts only if ``lines`` holds ``n`` messages (one count at its start: from then on
        this system's slices keep the two in step, and a handed ``EncodedHistory`` takes
        the state's count)."""
        if not self.limit or not lineage:
            return
        chains, states = self._chains, self._states
        if chains.get(tid) != lineage and lines.count(b"\n") != n:
            return
        chains[tid] = lineage
        states[tid] = raw_state
        if len(chains) > self.limit:
            # one pass for half of them: deleting from a dict's front one at a time makes
            # each next(iter(...)) rescan the deleted slots
            for old in list(itertools.islice(chains, len(chains) // 2)):
                del chains[old]
                states.pop(old, None)
