"""Reply-length laws of the simulated backend: :class:`LengthDist` per call label.

A law is a piecewise log-normal fitted through published quartiles, the p95 and the mean
(:mod:`agentlab.llm.sim_profiles` holds them per call / stage label, qualified by topology
and round: :func:`length_keys`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from agentlab.errors import ConfigError

__all__ = ["NO_STOP", "SLOPE_FIELDS", "LengthDist", "Lengths", "length_keys"]

_Z75 = 0.6744897501960817  # standard normal 75th percentile
_Z95 = 1.6448536269514722  # ... and 95th
_SQRT2 = math.sqrt(2.0)


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / _SQRT2)


def _log_phi(x: float) -> float:
    """log of the standard normal cdf, without underflow far in the left tail."""
    if x > -30.0:
        return math.log(max(_phi(x), 1e-300))
    x2 = x * x  # asymptotic series of the Mills ratio
    return -x2 / 2 - math.log(-x) - 0.5 * math.log(2 * math.pi) + math.log1p(-1 / x2 + 3 / x2**2)


def _piece(a: float, b: float, c: float, s: float) -> float:
    """``integral_a^b exp(c + s z) phi(z) dz = exp(c + s^2/2) (Phi(b - s) - Phi(a - s))``,
    in logs (a steep slope cut at a finite ``b`` would overflow the plain form)."""
    if b == math.inf:  # Phi(inf) - Phi(a - s) = Phi(s - a)
        e = c + s * s / 2 + (_log_phi(s - a) if a > -math.inf else 0.0)
        return math.exp(e) if e < 700.0 else math.inf  # a steep uncut tail: no finite mean
    lb = _log_phi(b - s)
    ratio = math.exp(_log_phi(a - s) - lb) if a > -math.inf else 0.0
    return math.exp(c + s * s / 2 + lb) * max(0.0, 1.0 - ratio)


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A completion-length law that keeps the published quantiles and the mean.

    Its quantile at the standard-normal score ``z`` is piecewise log-linear in ``z``: slope
    ``sigma_lo`` below the median, ``sigma_hi`` up to the third quartile (z75),
    ``sigma_tail`` up to the 95th percentile (z95) and ``sigma_far`` above it. So a
    log-normal body goes through the published p25 / median / p75, ``sigma_tail`` through
    a published p95 and ``sigma_far`` sets the mean (:meth:`from_quantiles`). With all four
    slopes equal it is the plain log-normal (:meth:`lognormal`), drawn as before.
    """

    median: float
    sigma_lo: float
    sigma_hi: float
    sigma_tail: float
    sigma_far: float
    # replies drawn above this score never stop (a repetition loop): they run to the output
    # cap; share 1 - Phi(z_nostop) (:attr:`cap_share`); inf: none
    z_nostop: float = math.inf

    @classmethod
    def lognormal(cls, median: float, sigma: float) -> LengthDist:
        s = float(sigma)
        return cls(float(median), s, s, s, s)

    @classmethod
    def from_quantiles(
        cls,
        p25: float,
        median: float,
        p75: float,
        mean: float | None = None,
        p95: float | None = None,
        cap: float = math.inf,
    ) -> LengthDist:
        """Through the quartiles (and ``p95``); the slope of the far tail solved for
        ``mean`` (of lengths cut at ``cap``, the server's output limit). Without ``p95`` the
        tail continues the body's upper slope up to z95; without ``mean`` the far tail
        continues the slope before it.

        Raises:
            ConfigError: quantiles out of order, or a mean below what they allow.
        """
        if not 0 < p25 <= median <= p75 <= (p95 if p95 is not None else math.inf):
            raise ConfigError(
                f"length quantiles {p25}, {median}, {p75}, {p95}: need 0 < p25 <= median"
                " <= p75 <= p95"
            )
        lo, hi = math.log(median / p25) / _Z75, math.log(p75 / median) / _Z75
        tail = hi if p95 is None else math.log(p95 / p75) / (_Z95 - _Z75)
        if mean is None:
            return cls(float(median), lo, hi, tail, tail)
        if cls(median, lo, hi, tail, 0.0).mean(cap) > mean or cap <= mean:
            raise ConfigError(
                f"length mean {mean} is below what quantiles {p25}/{median}/{p75}/{p95} allow"
            )
        a, b = 0.0, 40.0
        for _ in range(100):
            mid = (a + b) / 2
            a, b = (mid, b) if cls(median, lo, hi, tail, mid).mean(cap) < mean else (a, mid)
        return cls(float(median), lo, hi, tail, (a + b) / 2)

    @property
    def is_lognormal(self) -> bool:
        same = self.sigma_lo == self.sigma_hi == self.sigma_tail == self.sigma_far
        return same and self.z_nostop == math.inf

    @property
    def cap_share(self) -> float:
        """The share of replies that never stop (run to the server's output cap)."""
        return 1.0 - _phi(self.z_nostop) if self.z_nostop < math.inf else 0.0

    def with_cap_share(self, share: float) -> LengthDist:
        """This law with ``share`` of the replies (its top scores) never stopping."""
        from statistics import NormalDist

        z = NormalDist().inv_cdf(1.0 - share) if share > 0 else math.inf
        return dataclasses.replace(self, z_nostop=z)

    def _pieces(self) -> tuple[tuple[float, float, float, float], ...]:
        """(z from, z to, log offset c, slope s): ``log(x / median) = c + s * z``."""
        hi, t, f = self.sigma_hi, self.sigma_tail, self.sigma_far
        c75 = (hi - t) * _Z75
        c95 = c75 + (t - f) * _Z95
        return (
            (-math.inf, 0.0, 0.0, self.sigma_lo),
            (0.0, _Z75, 0.0, hi),
            (_Z75, _Z95, c75, t),
            (_Z95, math.inf, c95, f),
        )

    def at(self, z: float) -> float:
        """The length at standard-normal score ``z`` (one draw: ``z = rng.normal()``)."""
        if z > self.z_nostop:
            return NO_STOP
        if z <= 0.0:
            return self.median * math.exp(self.sigma_lo * z)
        if z <= _Z75 or self.sigma_tail == self.sigma_far == self.sigma_hi:
            return self.median * math.exp(self.sigma_hi * z)
        _, _, c, s = self._pieces()[2 if z <= _Z95 else 3]
        return self.median * math.exp(c + s * z)

    def quantile(self, q: float) -> float:
        from statistics import NormalDist

        return self.at(NormalDist().inv_cdf(q))

    def cdf(self, x: float) -> float:
        """P(length <= x) (the quantile function inverted piece by piece)."""
        if x <= 0:
            return 0.0
        y = math.log(x / self.median)
        for a, b, c, s in self._pieces():
            if s <= 0:
                continue
            z = (y - c) / s
            if z <= b:
                return min(_phi(max(z, a)), _phi(self.z_nostop))
        return 1.0 if x >= NO_STOP else _phi(self.z_nostop)

    def mean(self, cap: float = math.inf) -> float:
        """The mean of ``min(length, cap)``: per piece ``exp(c + s^2 / 2) * (Phi(b - s) -
        Phi(a - s))`` up to the cap's score, plus ``cap`` times the share above it."""
        zc = math.inf
        if cap < math.inf:
            y = math.log(cap / self.median)
            for a, b, c, s in self._pieces():
                if s > 0 and (y - c) / s <= b:
                    zc = max((y - c) / s, a)
                    break
        zc = min(zc, self.z_nostop)
        if zc < math.inf and cap == math.inf:
            return math.inf
        total = 0.0
        for a, b, c, s in self._pieces():
            b = min(b, zc)
            if a < b:
                total += _piece(a, b, c, s)
        return self.median * total + (cap * (1.0 - _phi(zc)) if zc < math.inf else 0.0)

    def to_toml(self, cap: float = math.inf) -> Any:
        """``[median, sigma]`` for a log-normal, else ``{p25, median, p75, p95, mean}`` (the
        mean of lengths cut at ``cap``) when those give this law back, else its slopes
        ``{median, sigma_lo, sigma_hi, sigma_tail, sigma_far}``."""
        if self.is_lognormal:
            return [self.median, self.sigma_lo]
        if self.z_nostop < math.inf:
            body = dataclasses.replace(self, z_nostop=math.inf).to_toml(cap)
            if "mean" in body and math.isclose(self.sigma_far, self.sigma_tail, rel_tol=1e-9):
                del body["mean"]  # the far tail continues the p75-p95 slope: p95 gives it
            elif "mean" in body:
                body = {f: getattr(self, f) for f in ("median", *SLOPE_FIELDS)}
            return body | {"cap_share": round(self.cap_share, 6)}
        out = {"p25": round(self.quantile(0.25), 3), "median": self.median}
        out["p75"] = round(self.quantile(0.75), 3)
        out["p95"] = round(self.quantile(0.95), 3)
        out["mean"] = round(self.mean(cap), 3)
        try:
            back = LengthDist.from_quantiles(
                out["p25"], out["median"], out["p75"], out["mean"], out["p95"], cap
            )
        except ConfigError:
            back = None
        if back is not None and all(
            math.isclose(getattr(back, f), getattr(self, f), rel_tol=1e-3, abs_tol=1e-3)
            for f in SLOPE_FIELDS
        ):
            return out
        return {f: getattr(self, f) for f in ("median", *SLOPE_FIELDS)}


SLOPE_FIELDS = ("sigma_lo", "sigma_hi", "sigma_tail", "sigma_far")
#: the length drawn for a reply that never stops: the server's output cap cuts it
NO_STOP = 1e9


#: (label, length distribution) per call / stage label, qualified by ``@topology`` and
#: ``#round`` (:func:`length_keys`)
Lengths = tuple[tuple[str, LengthDist], ...]


def length_keys(labels: dict[str, Any] | None) -> list[str]:
    """The ``lengths`` keys a call's labels look up, most specific first.

    For ``call`` then ``stage`` (or ``label``): ``name@topology#round``, ``name#round``,
    ``name@topology``, ``name`` (qualifiers only where the labels carry them); with a
    ``task_category`` label each is looked up first qualified by it, ``name#round/math``
    (the published lengths differ by task category: a math run's replies run away more
    often than a research run's).
    """
    if not labels:
        return []
    topo, rnd = labels.get("topology"), labels.get("round")
    out = []
    for name in (labels.get("call"), labels.get("stage", labels.get("label"))):
        if name is None:
            continue
        name = str(name)
        if topo is not None and rnd is not None:
            out.append(f"{name}@{topo}#{rnd}")
        if rnd is not None:
            out.append(f"{name}#{rnd}")
        if topo is not None:
            out.append(f"{name}@{topo}")
        out.append(name)
    cat = labels.get("task_category")
    if cat is None:
        return out
    return [k for key in out for k in (f"{key}/{cat}", key)]
