"""The cyclic GC set up for the length of a :meth:`~agentlab.runtime.society.Society.run`
and of an ``AgentSystem``'s busy period (first driver to last, ``runtime/threads``)."""

from __future__ import annotations

import gc
import os
import threading

__all__ = ["GC_GEN1_THRESHOLD", "GCTuning"]


#: GC generation-1 threshold while a society runs (CPython's default is 10), see GCTuning
GC_GEN1_THRESHOLD = 100


class GCTuning:
    """The cyclic GC set up while at least one :meth:`Society.run` of this process runs;
    :meth:`restore` (the last run to end) puts it back.

    A tick's rows, spans and step tasks live until their batch ends (a few thousand
    agent-steps), so they outlive the young generation; with CPython's defaults they are
    walked again in a generation-1 collection every 10 young ones and promoted to the old
    generation, which then triggers full collections that walk the whole long-lived heap
    (imports, the society) again. Measured at N = 10k (sim/instant, packed): GC ~11 us of
    a ~70 us agent-step (``runtime/README.md``, "The GC for the length of a run"). For the
    run, with CPython's documented API:

    - ``gc.freeze()``: every object alive at the start is parked in the permanent
      generation, out of the collections' reach; :meth:`restore` ``gc.unfreeze()``s them,
      so a cycle among them that became garbage during the run is collected after it
      (nothing is kept for good, and no ``gc.collect()`` is paid per run). Skipped when
      something else froze objects first (the litellm import heap,
      ``llm/litellm_backend.py``): unfreezing would undo theirs.
    - generation-1 threshold :data:`GC_GEN1_THRESHOLD`: a batch's rows die in
      generation 1 instead of being walked ten times as often and promoted.

    Runs that overlap (two societies in one process, one in a worker thread, an
    ``AgentSystem``'s busy period) share one setup: the first to start makes it, the last
    to end undoes it.
    ``AGENTLAB_GC_FREEZE=0`` turns it off (as it does litellm's freeze).
    """

    __slots__ = ("active",)

    _lock = threading.Lock()
    _runs = 0  # runs of this process inside the setup
    _saved: tuple[tuple[int, int, int], bool] | None = None  # thresholds, froze

    def __init__(self) -> None:
        self.active = os.environ.get("AGENTLAB_GC_FREEZE", "1") != "0"
        if not self.active:
            return
        cls = GCTuning
        with cls._lock:
            cls._runs += 1
            if cls._runs > 1:
                return
            froze = gc.get_freeze_count() == 0
            if froze:
                gc.freeze()
            before = gc.get_threshold()
            cls._saved = (before, froze)
            gc.set_threshold(before[0], max(before[1], GC_GEN1_THRESHOLD), before[2])

    def restore(self) -> None:
        """Leave the setup; the last run out puts thresholds back and unfreezes what the
        first froze. Idempotent."""
        if not self.active:
            return
        self.active = False
        cls = GCTuning
        with cls._lock:
            cls._runs -= 1
            if cls._runs or cls._saved is None:
                return
            (thresholds, froze), cls._saved = cls._saved, None
            gc.set_threshold(*thresholds)
            if froze:
                gc.unfreeze()
