"""The step-time half of calibration (:mod:`agentlab.analysis.calibrate`): per-call load
features from recorded intervals, and the least-squares lines that give ``prefill_tps``,
``overhead_s``, ``decode_tps`` and ``decode_degrade``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["fit_lines", "load_features"]


def load_features(d: pd.DataFrame, group: list[str], degrade: float) -> pd.DataFrame:
    """Per call: others in flight at start, mean decoding batch, prefill tokens shared."""
    out = d.copy()
    out["others_at_start"] = 0
    out["n_batch"] = 1.0
    out["n_start"] = 1.0
    out["q_shared"] = 0.0
    out["ctx_bar"] = 0.0
    # each group's index labels (iterated: `.groups` warns of its keys changing in pandas 4)
    groups = [g.index for _, g in out.groupby(group, sort=False)] if group else [out.index]
    for idx in groups:
        g = out.loc[idx]
        s, e = g["start"].to_numpy(), g["end"].to_numpy()
        ss, es = np.sort(s), np.sort(e)
        # calls started at or before s (ties included: a fan-out sent at one instant shares
        # the server, none of them found it idle), less itself, less those already ended
        inflight = np.searchsorted(ss, s, side="right") - 1 - np.searchsorted(es, s, side="right")
        out.loc[idx, "others_at_start"] = np.maximum(inflight, 0)
        f = g["first_token"].to_numpy()
        ok = np.isfinite(f)
        if not ok.any():
            continue
        fa, ea, pa = f[ok], e[ok], g["prompt_tokens"].to_numpy()[ok]
        # step function n(t): number of calls decoding at t
        pts = np.concatenate([fa, ea])
        delta = np.concatenate([np.ones(len(fa)), -np.ones(len(ea))])
        order = np.argsort(pts, kind="stable")
        pts, delta = pts[order], delta[order]
        n_after = np.cumsum(delta)
        widths = np.diff(pts, append=pts[-1])
        w = 1.0 / (1.0 + degrade * np.maximum(n_after - 1, 0))  # steps per second, relative
        cum_w = np.concatenate([[0.0], np.cumsum(w * widths)])
        cum_nw = np.concatenate([[0.0], np.cumsum(n_after * w * widths)])

        iw = _integral(pts, cum_w, ea, w) - _integral(pts, cum_w, fa, w)
        nw = n_after * w
        inw = _integral(pts, cum_nw, ea, nw) - _integral(pts, cum_nw, fa, nw)
        nb = np.where(iw > 0, inw / np.where(iw > 0, iw, 1.0), 1.0)
        fs = np.argsort(fa)
        cum_p = np.concatenate([[0.0], np.cumsum(pa[fs])])
        fsorted = fa[fs]
        q = (
            cum_p[np.searchsorted(fsorted, ea, side="right")]
            - cum_p[np.searchsorted(fsorted, fa, side="right")]
        )
        # calls decoding just after its first token: set by the others' progress only, so
        # independent of this call's own speed (an instrument for n_batch, see fit_lines)
        i0 = np.clip(np.searchsorted(pts, fa, side="right") - 1, 0, len(pts) - 1)
        rows = np.asarray(idx)[ok]
        ctx = g["context_tokens"] if "context_tokens" in g else g["prompt_tokens"]
        c_all = g["completion_tokens"].to_numpy()[ok]
        out.loc[rows, "ctx_bar"] = _context_in_flight(fa, ea, ctx.to_numpy()[ok], c_all, degrade)
        out.loc[rows, "n_start"] = np.maximum(n_after[i0], 1.0)
        out.loc[rows, "n_batch"] = np.maximum(nb, 1.0)
        out.loc[rows, "q_shared"] = q
    return out


def _context_in_flight(
    f: np.ndarray, e: np.ndarray, prompt: np.ndarray, completion: np.ndarray, degrade: float
) -> np.ndarray:
    """Per call, the step-average over its decode window ``[f, e]`` of the summed context
    (prompt + tokens decoded so far, read by each step's attention) of every call decoding
    then, itself included. A call's context ramps linearly from ``prompt`` at its first
    token to ``prompt + completion`` at its end, so the sum is piecewise linear in time:
    its integral is accumulated over the sorted window edges (jumps and slope changes),
    weighted by the steps per second there (``1 / (1 + degrade (n - 1))``, as n_batch)."""
    rate = completion / np.maximum(e - f, 1e-12)
    t = np.concatenate([f, e])
    jump = np.concatenate([prompt, -(prompt + completion)]).astype(float)
    dslope = np.concatenate([rate, -rate])
    dn = np.concatenate([np.ones(len(f)), -np.ones(len(e))])
    order = np.argsort(t, kind="stable")
    t, jump, dslope, dn = t[order], jump[order], dslope[order], dn[order]
    slope = np.cumsum(dslope)
    w = 1.0 / (1.0 + degrade * np.maximum(np.cumsum(dn) - 1, 0))
    dt = np.diff(t, append=t[-1])
    # the sum just after edge k: the jumps so far plus what the ramps added since
    v = np.cumsum(jump) + np.concatenate([[0.0], np.cumsum(slope * dt)[:-1]])
    acc = np.concatenate([[0.0], np.cumsum(w * (v * dt + slope * dt * dt / 2))])
    steps = np.concatenate([[0.0], np.cumsum(w * dt)])

    def at(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = np.clip(np.searchsorted(t, x, side="right") - 1, 0, len(t) - 1)
        h = x - t[k]
        return acc[k] + w[k] * (v[k] * h + slope[k] * h * h / 2), steps[k] + w[k] * h

    (ce, se), (cf, sf) = at(e), at(f)
    return np.where(se - sf > 0, (ce - cf) / np.maximum(se - sf, 1e-300), prompt)


def _integral(pts: np.ndarray, cum: np.ndarray, t: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Integral from pts[0] to t of the step function with values ``vals`` after ``pts``."""
    i = np.clip(np.searchsorted(pts, t, side="right") - 1, 0, len(pts) - 1)
    return cum[i] + (t - pts[i]) * vals[i]


def fit_lines(f: pd.DataFrame, roofline: bool = False, attention: bool = False) -> dict[str, float]:
    """The regressions on one (possibly resampled) feature frame; ``roofline``: the idle
    TTFT is ``overhead_s + max(1 / decode_tps, prompt / prefill_tps)`` (the profile's
    ``step_roofline``), a line through ``overhead_s`` fitted on the prompts above the knee
    ``prefill_tps / decode_tps`` (found by iterating from all of them). ``attention``: the
    decode steps also pay ``attention_decode_s`` per context token of every decoding call
    (the engine's attention term), a fourth regressor: tokens x the context in flight
    (``ctx_bar``); off, the base and ``decode_degrade`` absorb that cost."""
    res: dict[str, float] = {}
    ttft = f["first_token"] - f["start"]
    idle = f[np.isfinite(ttft) & (f["others_at_start"] == 0)]
    dec = f[np.isfinite(f["first_token"]) & (f["completion_tokens"] >= 2)]
    if len(dec) >= 2:
        c1 = dec["completion_tokens"].to_numpy() - 1
        # n_batch depends on how the speeds of calls decoding together fell (a fast call
        # leaves a full batch); the replay spread in fit_calibration widens the CI for it.
        nb = dec["n_batch"].to_numpy()
        ctx = dec["ctx_bar"].to_numpy() if attention else np.zeros(len(dec))
        x = np.column_stack([c1, c1 * (nb - 1), dec["q_shared"].to_numpy(), c1 * ctx])
        y = (dec["end"] - dec["first_token"]).to_numpy()
        use = [0, 1, 2] if x[:, 2].any() else [0, 1]
        if attention and x[:, 3].any():
            use.append(3)
        if not x[:, 1].any():
            use = [u for u in use if u != 1]
        b, pred = _robust_fit(x, y, use)
        if b.get(3, 0.0) < 0.0:  # no attention cost seen: refit without the term
            b, pred = _robust_fit(x, y, [u for u in use if u != 3])
        good = (pred > 0) & (y > 0)
        # Speed factor by the method of moments on r = D / fit: the spread and the mean
        # of the service time are what queueing depends on (a log-scale estimate would
        # overstate the right tail when the noise is not log-normal, as on a busy CPU).
        # For a mean-1 log-normal speed s, E[1/s] = exp(sig^2) and CV^2 = exp(sig^2) - 1.
        sig = 0.0
        if good.sum() > 2:
            r = y[good] / pred[good]
            m = float(r.mean())
            sig = math.sqrt(math.log(1.0 + float(r.var()) / (m * m)))
            b[0] *= m  # the robust fit's level -> the mean level
            if 1 in b:
                b[1] *= m
            if 3 in b:
                b[3] *= m
        b0 = b[0] / math.exp(sig * sig)
        if attention:
            res["attention_decode_s"] = max(0.0, b.get(3, 0.0) / math.exp(sig * sig))
        res["decode_tps"] = 1.0 / b0 if b0 > 0 else 0.0
        res["decode_degrade"] = max(0.0, b.get(1, 0.0) / b[0]) if b[0] > 0 else 0.0
        res["decode_jitter"] = sig
    if len(idle) >= 2 and idle["prompt_tokens"].nunique() >= 2:
        p = idle["prompt_tokens"].to_numpy()
        y = (idle["first_token"] - idle["start"]).to_numpy()
        slope, icept = _line(p, y)
        base = 1.0 / res["decode_tps"] if res.get("decode_tps") else 0.0
        above = np.ones(len(p), dtype=bool)
        for _ in range(5 if roofline else 0):
            nxt = p * slope > base if slope > 0 else above
            if nxt.sum() < 2 or np.unique(p[nxt]).size < 2 or (nxt == above).all():
                break
            above = nxt
            slope, icept = _line(p[above], y[above])
        if roofline:
            res["prefill_tps"] = 1.0 / slope if slope > 0 else 0.0
            res["overhead_s"] = max(0.0, float(icept))
        elif icept < base:
            # The line crosses below the model's floor (one step, no overhead): TTFT is
            # convex in the prompt here (attention grows with it). Fit through the floor
            # instead, so short prompts are not all predicted ~|icept| too slow.
            slope = float(np.median((y - base) / np.maximum(p, 1)))
            icept = base
        if not roofline:
            res["prefill_tps"] = 1.0 / slope if slope > 0 else 0.0
            res["overhead_s"] = max(0.0, float(icept) - base)
    return res


def _robust_fit(
    x: np.ndarray, y: np.ndarray, use: list[int]
) -> tuple[dict[int, float], np.ndarray]:
    """Coefficients of ``y`` on the ``use`` columns of ``x`` and the fitted values.

    Noise is multiplicative (the speed factor), so errors are weighted relative to the
    fitted value; weighting by the observed value instead would favour fast calls and bias
    the slope. Iteratively reweighted, starting from the observed values. Huber weights on
    the log residual keep a few calls slowed by a busy machine (seen on the shared box: 5x)
    from dragging the fit."""
    wts = 1.0 / np.maximum(y, 1e-9)
    for _ in range(5):
        beta, *_ = np.linalg.lstsq(x[:, use] * wts[:, None], y * wts, rcond=None)
        pred = x[:, use] @ beta
        wts = 1.0 / np.maximum(pred, 1e-9)
        good = (pred > 0) & (y > 0)
        if good.sum() > 5:
            lr = np.zeros_like(y)
            lr[good] = np.log(y[good] / pred[good])
            mad = 1.4826 * float(np.median(np.abs(lr[good] - np.median(lr[good]))))
            k = 1.345 * max(mad, 1e-6)
            wts = wts * np.minimum(1.0, k / np.maximum(np.abs(lr), 1e-12))
    return dict(zip(use, (float(v) for v in beta), strict=True)), pred


def _line(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of TTFT on prompt tokens."""
    if len(p) <= 400:  # Theil-Sen: robust to calls slowed by a busy machine
        from scipy.stats import theilslopes

        # (its confidence interval, unused here, takes a sqrt of a negative variance
        # when prompt sizes repeat: scipy's RuntimeWarning reached the CLI's output)
        with np.errstate(invalid="ignore"):
            slope, icept, _, _ = theilslopes(y, p)
        return float(slope), float(icept)
    slope, icept = np.polyfit(p, y, 1)  # many calls: Theil-Sen is quadratic in the count
    return float(slope), float(icept)
