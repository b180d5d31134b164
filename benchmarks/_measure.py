"""Shared timers for the benchmarks: CPU and wall kept apart, the whole process tree, repeats.

Every figure a benchmark divides by another is a :class:`Measure`, which carries its *kind*
(``"cpu"`` or ``"wall"``); :func:`ratio` refuses to divide measures of different kinds, so a
floor timed in wall time can no longer be held against a subject timed in CPU time.

- :class:`Timer` times a block in one kind: ``cpu`` is this process's CPU (every thread,
  ``time.process_time``), ``tree`` is the CPU of this process **and every live or reaped
  descendant** (``/proc/<pid>/stat`` utime + stime + cutime + cstime, per process, before
  and after, differenced per process: Ray's raylet, GCS and workers, a ``sim-serve`` child,
  a compression pool), ``wall`` is ``time.perf_counter``. ``cpu`` and ``tree`` are both of kind ``"cpu"``.
- :func:`repeat` runs functions interleaved (A, B, A, B, ...) and keeps the min and median of
  each, so a load spike hits both sides of a ratio alike.
- :func:`load_line` is the line printed beside every table: load average, cores.

The clocks are module attributes (``clock_cpu``, ``clock_wall``, ``clock_tree``) so a test
can inject a fake slow clock and check that a ratio does not move.

    from _measure import Timer, ratio   # benchmarks/ is on sys.path when run as a script
    with Timer("cpu") as t:
        work()
    print(ratio(t.measure(n), floor_measure))
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["cpu", "wall"]
#: timer names and the kind of time each measures
TIMERS: dict[str, Kind] = {"cpu": "cpu", "tree": "cpu", "wall": "wall"}
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _pid_cpu(pid: int) -> tuple[float, float, int] | None:
    """(own utime + stime, reaped children's cutime + cstime, ppid) in seconds; None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces: split after its last ')'
    fields = raw[raw.rfind(b")") + 2 :].split()
    own = (int(fields[11]) + int(fields[12])) / _TICK
    reaped = (int(fields[13]) + int(fields[14])) / _TICK
    return own, reaped, int(fields[1])


@dataclass(frozen=True)
class TreeSample:
    """Per-process CPU of one process tree at one moment: ``pid -> (own, reaped, ppid)``.

    ``after - before`` is the tree's CPU in between (see :meth:`__sub__`), never negative:
    summing the whole tree at two moments and subtracting is not, because a descendant
    counted in ``before`` that exits and is reaped *outside* the tree (reparented to init
    when its parent died, or its parent ignores ``SIGCHLD``) takes its whole past CPU out of
    the second sum — a leftover child from earlier work once made a benchmark test read
    -3.4 s.
    """

    procs: dict[int, tuple[float, float, int]]

    def __sub__(self, before: TreeSample) -> float:
        after, was = self.procs, before.procs
        total = 0.0
        # what each surviving process reaped during the interval
        credit = {pid: after[pid][1] - was[pid][1] for pid in after if pid in was}
        for pid, (own, reaped, _) in after.items():
            if pid in was:
                total += max(0.0, own - was[pid][0])
            else:  # born during the interval: all of it is new
                total += own + reaped
        for pid, (own, reaped, ppid) in was.items():
            if pid in after:
                continue
            # gone: if its parent survives, the parent reaped it (or will; a zombie still shows)
            # and its cutime now holds the child's whole life: take out the part before the
            # interval. A child whose parent is gone too was orphaned and reaped outside the
            # tree: its CPU during the interval is lost (counted as 0, never negative).
            if ppid in credit:
                credit[ppid] -= own + reaped
        return total + sum(max(0.0, c) for c in credit.values())


def tree_sample(root: int | None = None) -> TreeSample:
    """The CPU of ``root`` (default: this process) and every live descendant, per process.

    Live descendants are found by walking ``/proc`` for parent links; a descendant that
    exits and is reaped between two samples is counted through its parent's
    ``cutime``/``cstime``. Children that exit *without* being reaped inside the tree are
    missed: sample before and after the work while the tree is alive (Ray: before
    ``ray.shutdown()``).
    """
    root = os.getpid() if root is None else root
    stats: dict[int, tuple[float, float, int]] = {}
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        got = _pid_cpu(int(name))
        if got is not None:
            stats[int(name)] = got
            children.setdefault(got[2], []).append(int(name))
    procs: dict[int, tuple[float, float, int]] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            procs[pid] = stats[pid]
            todo.extend(children.get(pid, ()))
    return TreeSample(procs)


def tree_cpu_s(root: int | None = None) -> float:
    """CPU seconds of ``root`` and its live descendants plus everything they reaped, now.

    A level, not a meter: the difference of two such levels can go *down* (see
    :class:`TreeSample`); time an interval with ``Timer("tree")``.
    """
    return sum(own + reaped for own, reaped, _ in tree_sample(root).procs.values())


def _tree_clock() -> TreeSample:
    return tree_sample()


#: the clocks, replaceable in tests
clock_cpu: Callable[[], float] = time.process_time
clock_wall: Callable[[], float] = time.perf_counter
clock_tree: Callable[[], Any] = _tree_clock  # a TreeSample; ``after - before`` is seconds


def _clock(timer: str) -> Callable[[], Any]:
    if timer not in TIMERS:
        raise ValueError(f"timer {timer!r}: valid: {', '.join(TIMERS)}")
    return {"cpu": clock_cpu, "wall": clock_wall, "tree": clock_tree}[timer]


@dataclass(frozen=True)
class Measure:
    """A time in seconds per unit of work, with the kind of clock that took it."""

    seconds: float
    kind: Kind
    timer: str = ""

    @property
    def us(self) -> float:
        return self.seconds * 1e6

    def __add__(self, other: Measure) -> Measure:
        _same_kind(self, other, "+")
        timer = self.timer if self.timer == other.timer else f"{self.timer}+{other.timer}"
        return Measure(self.seconds + other.seconds, self.kind, timer)


def _same_kind(a: Measure, b: Measure, op: str) -> None:
    if not isinstance(a, Measure) or not isinstance(b, Measure):
        raise TypeError(f"{op}: both sides must be Measure, got {type(a)!r} and {type(b)!r}")
    if a.kind != b.kind:
        raise ValueError(
            f"{op}: mixes {a.kind} time ({a.timer}) with {b.kind} time ({b.timer}); "
            "time both sides with the same kind of clock"
        )


def ratio(subject: Measure, floor: Measure) -> float:
    """``subject / floor``; raises ``ValueError`` if one is CPU time and the other wall time."""
    _same_kind(subject, floor, "ratio")
    return subject.seconds / floor.seconds


class Timer:
    """Times a ``with`` block with one clock (``cpu``, ``tree`` or ``wall``)."""

    def __init__(self, timer: str = "cpu") -> None:
        self._clock = _clock(timer)  # raises on an unknown timer
        self.timer = timer
        self.kind: Kind = TIMERS[timer]
        self.seconds = 0.0

    def __enter__(self) -> Timer:
        self._t0 = self._clock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = self._clock() - self._t0

    def measure(self, per: float = 1) -> Measure:
        """The timed seconds divided by ``per`` (units of work), as a :class:`Measure`."""
        return Measure(self.seconds / per, self.kind, self.timer)


def time_call(fn: Callable[[], Any], timer: str = "cpu", per: float = 1) -> Measure:
    """Run ``fn`` once under ``timer``; seconds per unit of work."""
    with Timer(timer) as t:
        fn()
    return t.measure(per)


@dataclass(frozen=True)
class Repeats:
    """Every repeat of one measured function, with min and median."""

    values: tuple[Measure, ...]

    @property
    def min(self) -> Measure:
        return min(self.values, key=lambda m: m.seconds)

    @property
    def median(self) -> Measure:
        m = self.values[0]
        return Measure(statistics.median(v.seconds for v in self.values), m.kind, m.timer)

    def fmt_us(self) -> str:
        return f"{self.min.us:.1f} / {self.median.us:.1f}"


def repeat(fns: dict[str, Callable[[], Measure]], k: int = 3) -> dict[str, Repeats]:
    """Run each function ``k`` times, interleaved (a, b, a, b, ...); min and median of each."""
    got: dict[str, list[Measure]] = {name: [] for name in fns}
    for _ in range(max(1, k)):
        for name, fn in fns.items():
            got[name].append(fn())
    return {name: Repeats(tuple(v)) for name, v in got.items()}


def checkout_env(src: str | None) -> dict[str, str]:
    """This process's environment, with the checkout ``src`` (if any) first on
    ``PYTHONPATH``: a child started with it imports that checkout's agentlab ahead of the
    installed one (the ``--before DIR`` runs of ``society.py`` and ``million.py``)."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def load_line() -> str:
    """``load average 1.23 / 1.10 / 0.98 (1/5/15 min) on 2 cores`` — print beside each table."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min) on {os.cpu_count()} cores"
