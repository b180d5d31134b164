"""Reference: the simulator's engine before the incremental plan and the KV model
(agentlab/llm/sim_engine.py at commit 47dfa3e), kept verbatim for the differential test in
``test_sim_engine_identity.py`` (the new engine with its mechanisms off must give the same
times). Not part of the package; do not edit.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from agentlab.llm.sim_profiles import SimProfile

__all__ = ["Engine", "EngineRequest"]

_EPS = 1e-9


@dataclass(slots=True)
class EngineRequest:
    """One request inside the engine (times are clock seconds)."""

    rid: int
    arrival: float  # when it reaches the scheduler (sent + overhead_s)
    prompt: int  # prompt tokens to prefill
    output: int  # tokens it will generate
    speed: float = 1.0  # tokens added per decode step
    deadline: float = math.inf  # client gives up here; aborted at the next step boundary
    prefilled: int = 0
    decoded: float = 0.0
    admitted: float | None = None
    first_token: float | None = None
    end: float | None = None
    aborted: bool = False
    # decode phases: (start, step time, tokens at start, steps) -> times of later tokens
    segments: list[tuple[float, float, float, int]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        """Finished or aborted."""
        return self.end is not None or self.aborted

    def time_of_token(self, m: float) -> float | None:
        """When its ``m``-th token was (or is planned to be) produced; None if never."""
        if m <= 1:
            return self.first_token
        for t0, dt, d0, k in self.segments:
            if d0 + k * self.speed >= min(m, self.output) - _EPS:
                j = max(1, math.ceil((min(m, self.output) - d0) / self.speed - _EPS))
                return t0 + min(j, k) * dt
        return None

    def copy(self) -> EngineRequest:
        """An independent copy for prediction: its segments hold only the future.

        (Tokens already produced are read from the original, so predictions need not copy
        a long request's whole history.)
        """
        c = EngineRequest(
            self.rid,
            self.arrival,
            self.prompt,
            self.output,
            self.speed,
            self.deadline,
            self.prefilled,
            self.decoded,
            self.admitted,
            self.first_token,
            self.end,
            self.aborted,
        )
        return c

    def to_dict(self) -> dict[str, Any]:
        """JSON-able state."""
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
            "segments": [list(s) for s in self.segments],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineRequest:
        """Inverse of :meth:`to_dict`."""
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
        )
        r.segments = [(float(a), float(b), float(c), int(k)) for a, b, c, k in d["segments"]]
        return r


class Engine:
    """The scheduler state of one simulated vLLM server; see the module docstring."""

    def __init__(self, profile: SimProfile) -> None:
        self.profile = profile
        self.t = -math.inf  # end of the last executed step (engine busy until then)
        self.pending: deque[EngineRequest] = deque()  # sent, not yet at the scheduler
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.version = 0  # bumped on every arrival: invalidates predictions
        self.steps_total = 0
        self.finished_total = 0
        self.aborted_total = 0
        self.generated_total = 0  # tokens of finished requests
        self._pred_version = -1
        self._pred: dict[int, EngineRequest] = {}

    # --- public -------------------------------------------------------------------------

    def add(self, req: EngineRequest) -> None:
        """Queue a request (arrivals must come in non-decreasing ``arrival`` order)."""
        self.pending.append(req)
        self.version += 1

    def advance(self, now: float, *, inclusive: bool = False) -> None:
        """Execute every step that starts before ``now``.

        A step starting exactly at ``now`` is left for later (``inclusive=False``), so a
        request arriving at ``now`` joins it: simultaneous arrivals batch together.
        """
        self._run(self.pending, self.waiting, self.running, now, record=True, inclusive=inclusive)

    def predict(self, req: EngineRequest) -> EngineRequest:
        """``req``'s planned future assuming no further arrivals (a lower bound in time)."""
        if req.done:
            return req
        if self._pred_version != self.version or req.rid not in self._pred:
            pending = deque(r.copy() for r in self.pending)
            waiting = deque(r.copy() for r in self.waiting)
            running = [r.copy() for r in self.running]
            everyone = {r.rid: r for r in (*pending, *waiting, *running)}
            saved_t = self.t
            self._run(pending, waiting, running, math.inf, record=False)
            self.t = saved_t
            self._pred, self._pred_version = everyone, self.version
        return self._pred.get(req.rid, req)

    def load(self) -> tuple[int, int]:
        """(running, waiting) right now (waiting includes requests still in transit)."""
        return len(self.running), len(self.waiting) + len(self.pending)

    def export_state(self) -> dict[str, Any]:
        """Everything that affects future steps, JSON-able."""
        return {
            "t": None if math.isinf(self.t) else self.t,
            "pending": [r.to_dict() for r in self.pending],
            "waiting": [r.to_dict() for r in self.waiting],
            "running": [r.to_dict() for r in self.running],
            "steps_total": self.steps_total,
            "finished_total": self.finished_total,
            "aborted_total": self.aborted_total,
            "generated_total": self.generated_total,
        }

    def restore_state(self, d: dict[str, Any]) -> dict[int, EngineRequest]:
        """Load :meth:`export_state` output; returns the restored requests by id."""
        self.t = -math.inf if d.get("t") is None else float(d["t"])
        self.pending = deque(EngineRequest.from_dict(x) for x in d.get("pending", []))
        self.waiting = deque(EngineRequest.from_dict(x) for x in d.get("waiting", []))
        self.running = [EngineRequest.from_dict(x) for x in d.get("running", [])]
        self.steps_total = int(d.get("steps_total", 0))
        self.finished_total = int(d.get("finished_total", 0))
        self.aborted_total = int(d.get("aborted_total", 0))
        self.generated_total = int(d.get("generated_total", 0))
        self.version += 1
        return {r.rid: r for r in (*self.pending, *self.waiting, *self.running)}

    # --- the step loop ------------------------------------------------------------------

    def _step_time(self, n_seqs: int, prefill_tokens: int) -> float:
        p = self.profile
        dt = (1.0 + p.decode_degrade * (n_seqs - 1)) / p.decode_tps if p.decode_tps else 0.0
        if p.prefill_tps:
            dt += prefill_tokens / p.prefill_tps
        return dt

    def _run(
        self,
        pending: deque[EngineRequest],
        waiting: deque[EngineRequest],
        running: list[EngineRequest],
        until: float,
        *,
        record: bool,
        inclusive: bool = True,
    ) -> None:
        p = self.profile
        limit = until + _EPS if inclusive else until - _EPS
        while True:
            t = self.t
            if not running and not waiting:
                if not pending or pending[0].arrival >= limit:
                    return
                t = max(t, pending[0].arrival)  # idle engine: wake at the next arrival
            if t >= limit:
                return
            while pending and pending[0].arrival <= t + _EPS:
                waiting.append(pending.popleft())
            # client aborts take effect at the step boundary
            if any(r.deadline <= t + _EPS for r in running):
                for r in running:
                    if r.deadline <= t + _EPS:
                        r.aborted = True
                        self.aborted_total += record
                running[:] = [r for r in running if not r.aborted]
            if any(r.deadline <= t + _EPS for r in waiting):
                for r in waiting:
                    if r.deadline <= t + _EPS:
                        r.aborted = True
                        self.aborted_total += record
                waiting = _keep(waiting)
            if not running and not waiting:
                self.t = t
                continue
            budget = p.max_num_batched_tokens if p.max_num_batched_tokens > 0 else math.inf
            chunks: list[tuple[EngineRequest, int]] = []
            decodes: list[EngineRequest] = []
            for r in running:
                if budget < 1:
                    break
                if r.prefilled < r.prompt:
                    c = int(min(r.prompt - r.prefilled, budget))
                    chunks.append((r, c))
                    budget -= c
                else:
                    decodes.append(r)
                    budget -= 1
            while waiting and budget >= 1 and (p.slots <= 0 or len(running) < p.slots):
                r = waiting.popleft()
                r.admitted = t
                running.append(r)
                c = int(min(r.prompt - r.prefilled, budget))
                chunks.append((r, c))
                budget -= c
            n_seqs = len(chunks) + len(decodes)
            if n_seqs == 0:  # budget too small for anyone: cannot happen with budget >= 1
                self.t = t
                return
            prefill = sum(c for _, c in chunks)
            dt = self._step_time(n_seqs, prefill)
            k = 1
            if not chunks and decodes:
                # identical decode-only steps until someone finishes, arrives or aborts
                k = min(math.ceil((r.output - r.decoded) / r.speed - _EPS) for r in decodes)
                if dt > 0:
                    horizon = [limit] if not math.isinf(limit) else []
                    if pending:
                        horizon.append(pending[0].arrival)
                    if waiting and (p.slots <= 0 or len(running) < p.slots):
                        horizon.append(t)  # cannot happen: waiting would have been admitted
                    horizon.extend(r.deadline for r in running if not math.isinf(r.deadline))
                    if horizon:
                        k_time = min(math.ceil((h - t) / dt - _EPS) for h in horizon)
                        k = max(1, min(k, k_time))
            t_end = t + k * dt
            for r, c in chunks:
                r.prefilled += c
                if r.prefilled >= r.prompt:
                    r.first_token = t_end
                    r.decoded = 1.0
            for r in decodes:
                r.segments.append((t, dt, r.decoded, k))
                r.decoded = min(float(r.output), r.decoded + k * r.speed)
            finished = [r for r in running if r.first_token is not None and _full(r)]
            for r in finished:
                r.end = t_end
                if record:
                    self.finished_total += 1
                    self.generated_total += r.output
            if finished:
                running[:] = [r for r in running if r.end is None]
            self.t = t_end
            if record:
                self.steps_total += k


def _full(r: EngineRequest) -> bool:
    return r.decoded >= r.output - _EPS


def _keep(q: deque[EngineRequest]) -> deque[EngineRequest]:
    # drop aborted requests in place (the deque object is shared with the caller)
    alive = [r for r in q if not r.aborted]
    q.clear()
    q.extend(alive)
    return q
