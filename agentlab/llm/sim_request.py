"""A request inside the simulated vLLM engine (:mod:`agentlab.llm.sim_engine`), and the
scheduler state that holds requests (the committed one, or the plan's).

A request's decoded tokens are kept as *segments*: runs of identical decode steps (start,
step time, tokens at start, steps, growth of the step time per step), so the time of any
token is computed, not stored. They are stored flat, five values a segment in one list
(``EngineRequest.flat_segments``; ``segments`` reads them as tuples): a tuple per request
and phase was a container the cyclic GC had to track (about 19 a simulated call at 1,000
clients on 8 slots, most of the young objects each collection traversed; issue 22).
Callgrind of ``benchmarks/sim_engine.py``'s driver at 1,000 clients, (6,000 - 2,000 calls)
/ 4,000: 202.7k -> 196.3k instructions a call (generation-0 collections 194 -> 61 in the
6,000 calls).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

__all__ = ["EPS", "EngineRequest", "Segment", "Snap", "State"]

EPS = 1e-9

_new_request = object.__new__  # (EngineRequest.copy: an instance without ``__init__``)

# (start, step time, tokens at start, steps, step-time growth per step)
Segment = tuple[float, float, float, int, float]


@dataclass(slots=True, eq=False)
class EngineRequest:
    """One request inside the engine (times are clock seconds).

    Compared by identity (``eq=False``): the engine's list operations (``list.remove``)
    then run in C, not through a field-by-field ``__eq__`` per element."""

    rid: int
    arrival: float  # when it reaches the scheduler (sent + overhead_s)
    prompt: int  # prompt tokens to prefill
    output: int  # tokens it will generate
    speed: float = 1.0  # tokens added per decode step
    deadline: float = math.inf  # client gives up here; aborted at the next step boundary
    prefilled: int = 0  # tokens computed by prefill (prompt, + recomputed output if preempted)
    decoded: float = 0.0
    admitted: float | None = None
    first_token: float | None = None
    end: float | None = None
    aborted: bool = False
    # decode phases -> times of later tokens: each Segment's five values in turn (see the
    # module docstring; ``segments`` groups them)
    flat_segments: list[float] = field(default_factory=list)
    hashes: tuple[int, ...] = ()  # the prompt's full-block hash chain (prefix caching)
    target: int = 0  # tokens to prefill before decoding (prompt; more after a preemption)
    cached_tokens: int = 0  # prompt tokens found in the prefix cache at first scheduling
    preemptions: int = 0
    plan_cached: int = 0  # cached tokens the plan assumes
    held: int = 0  # KV blocks held
    hashed: list[int] = field(default_factory=list)  # cached blocks it references
    nreg: int = 0  # prompt blocks considered for caching so far
    left_at: float | None = None  # the plan's step that took it off the queue (in or aborted)
    init: tuple[float, float | None, float | None, int] | None = None  # plan reset values
    seen_ev: int = 0  # the KV cache's evictions when ``plan_cached`` was last bounded
    # restored with the bound a saved plan had admitted it with, and the evictions then
    # (``plan_cached``, ``seen_ev`` of the saved plan's copy): :meth:`copy` moves it to the
    # first plan's copy, whose admission takes them (``Planner._bound``), as the saved
    # engine's plan did; a plan dropped before that admission drops it too
    keep: tuple[int, int] | None = field(default=None, repr=False)
    # ``output`` as a float and less EPS (the decoded tokens at which it has finished): the
    # same values as computed from the int, read by every decode step (float with float is
    # the interpreter's specialised arithmetic; the int would be converted each time)
    outf: float = field(init=False, repr=False)
    stop: float = field(init=False, repr=False)
    promptf: float = field(init=False, repr=False)  # ``prompt`` as a float (the contexts)
    # a plan view whose ``end`` (or ``aborted``) is a forecast (``Planner._forecast``): the
    # plan's own state has not reached it, so its segments stop short; the engine's method
    # that simulates them (for :meth:`time_of_token` of a token before the last), else None
    fc: Callable[[EngineRequest], None] | None = field(default=None, init=False, repr=False)
    # (the two below are left unset until a forecast writes them: no store per request)
    fd: float = field(init=False, repr=False)  # decoded tokens in a forecast
    # the time of its last token where a forecast ends it (as :meth:`time_of_token` computes
    # it from the segment of that phase)
    ftok: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.target <= 0:
            self.target = self.prompt
        self.outf = float(self.output)
        self.stop = self.outf - EPS
        self.promptf = float(self.prompt)

    @property
    def segments(self) -> list[Segment]:
        """The decode segments as tuples (a copy; see the module docstring)."""
        it = iter(self.flat_segments)
        # (the steps come back as the ints appended: the list's type cannot say so)
        return cast("list[Segment]", list(zip(it, it, it, it, it, strict=True)))

    @property
    def done(self) -> bool:
        """Finished or aborted."""
        return self.end is not None or self.aborted

    def time_of_token(self, m: float) -> float | None:
        """When its ``m``-th token was (or is planned to be) produced; None if never."""
        if m <= 1:
            return self.first_token
        if self.fc is not None:  # a forecast view: the time of its last token was kept
            if m >= self.output:  # (none if aborted); any other needs the segments
                return self.ftok if self.end is not None else None
            self.fc(self)
        top = min(m, self.output)
        low = top - EPS
        segs, speed = self.flat_segments, self.speed
        # the first segment reaching ``top`` (their ends only grow): asked mostly for the
        # last tokens, so search back from the end rather than walk a long history
        i = len(segs)
        while i and segs[i - 3] + segs[i - 2] * speed >= low:
            i -= 5
        if i == len(segs):
            return None
        t0, dt, d0, k, ddt = segs[i : i + 5]
        j = min(k, max(1, math.ceil((top - d0) / speed - EPS)))
        return t0 + j * dt + ddt * (j * (j - 1) / 2) if ddt else t0 + j * dt

    def copy(self) -> EngineRequest:
        """An independent copy for the plan: its segments hold only the future.

        (Tokens already produced are read from the original, so predictions need not copy
        a long request's whole history.)
        """
        # (every slot set here, not through ``__init__``: the dataclass's generated
        # ``__init__`` and ``__post_init__`` frames cost about twice this, once a call;
        # the derived floats are copied, equal to recomputing them)
        c = _new_request(EngineRequest)
        c.rid, c.arrival, c.prompt, c.output = self.rid, self.arrival, self.prompt, self.output
        c.speed, c.deadline, c.prefilled = self.speed, self.deadline, self.prefilled
        c.decoded, c.admitted, c.first_token = self.decoded, self.admitted, self.first_token
        c.end, c.aborted, c.flat_segments, c.hashes = self.end, self.aborted, [], self.hashes
        c.target, c.cached_tokens = self.target, self.cached_tokens
        c.preemptions, c.plan_cached, c.held, c.hashed = self.preemptions, self.plan_cached, 0, []
        c.nreg, c.left_at, c.seen_ev, c.fc = 0, None, self.seen_ev, None
        c.keep, self.keep = self.keep, None  # (a saved plan's bound goes to the next plan)
        c.init = (self.decoded, self.first_token, self.admitted, self.target)
        c.outf, c.stop, c.promptf = self.outf, self.stop, self.promptf
        return c

    def _reset(self) -> None:
        # back to the state it had when the plan took it (a queued request)
        assert self.init is not None
        self.decoded, self.first_token, self.admitted, self.target = self.init
        self.prefilled = 0
        self.end = None
        self.aborted = False
        self.left_at = None
        self.flat_segments.clear()

    def to_dict(self) -> dict[str, Any]:
        """JSON-able state."""
        flat = self.flat_segments  # each segment's five values, sliced as lists
        return {
            "rid": self.rid,
            "arrival": self.arrival,
            "prompt": self.prompt,
            "output": self.output,
            "speed": self.speed,
            "deadline": None if math.isinf(self.deadline) else self.deadline,
            "prefilled": self.prefilled,
            "decoded": self.decoded,
            "admitted": self.admitted,
            "first_token": self.first_token,
            "end": self.end,
            "aborted": self.aborted,
            "segments": [flat[i : i + 5] for i in range(0, len(flat), 5)],
            "hashes": list(self.hashes),
            "target": self.target,
            "cached_tokens": self.cached_tokens,
            "preemptions": self.preemptions,
            "plan_cached": self.plan_cached,
            "held": self.held,
            "hashed": list(self.hashed),
            "nreg": self.nreg,
            "seen_ev": self.seen_ev,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineRequest:
        """Inverse of :meth:`to_dict` (also reads states saved before the KV model)."""
        r = cls(
            int(d["rid"]),
            float(d["arrival"]),
            int(d["prompt"]),
            int(d["output"]),
            float(d["speed"]),
            math.inf if d.get("deadline") is None else float(d["deadline"]),
            int(d["prefilled"]),
            float(d["decoded"]),
            d.get("admitted"),
            d.get("first_token"),
            d.get("end"),
            bool(d.get("aborted", False)),
            hashes=tuple(int(h) for h in d.get("hashes", ())),
            target=int(d.get("target", 0)),
            cached_tokens=int(d.get("cached_tokens", 0)),
            preemptions=int(d.get("preemptions", 0)),
            plan_cached=int(d.get("plan_cached", 0)),
            held=int(d.get("held", 0)),
            hashed=[int(h) for h in d.get("hashed", ())],
            nreg=int(d.get("nreg", 0)),
            seen_ev=int(d.get("seen_ev", 0)),
            keep=None if (k := d.get("plan_bound")) is None else (int(k[0]), int(k[1])),
        )
        for s in d["segments"]:
            r.flat_segments.extend((float(s[0]), float(s[1]), float(s[2]), int(s[3]),
                                    float(s[4]) if len(s) > 4 else 0.0))  # fmt: skip
        return r


class State:
    """A scheduler state: the committed one, or the plan's (on copies of the requests)."""

    __slots__ = ("dmin", "q", "qi", "rem", "running", "t")

    def __init__(self) -> None:
        self.t = -math.inf  # end of the last executed step (engine busy until then)
        self.q: list[EngineRequest] = []  # arrival order; q[qi:] not yet admitted
        self.qi = 0
        self.running: list[EngineRequest] = []
        # least deadline of ``running`` carried from the last phase (None: recompute it);
        # whoever replaces ``running`` or lowers a running deadline sets it to None
        self.dmin: float | None = None
        # least decode steps a running request needs to finish, carried from the last phase
        # (None: recompute it; also when one is in prefill); whoever replaces ``running``
        # or changes a running request's tokens sets it to None
        self.rem: float | None = None


# plan snapshot at a phase start: (state t before it, queue index, running requests, marks,
# cut). A running request's state at the phase start is what it had before the first of
# its segments starting at or after ``cut`` (the phase start; a decode's state changes only
# by the segment each phase appends, and phase starts strictly increase); ``marks`` keep the
# others whole: (request, prefilled, decoded, length of its flat segments, first token) of
# those still in prefill, or of everyone (``cut`` infinite) when the phase starts where the
# one before it did. Running requests ``None`` for a phase that cannot end with room (all
# slots taken, no abort): no arrival re-plans from it.
_Mark = tuple[EngineRequest, int, float, int, float | None]
Snap = tuple[float, int, list[EngineRequest] | None, list[_Mark] | tuple[()], float]
