"""The paper's IAT histograms, published and simulated, on the paper's own bins.

agentraffic publishes each topology's pooled discussion IATs (Table 2's: per run, the
differences of consecutive call starts in the discussion window, pooled over runs) as a
histogram, not as values: 8 log bins per decade, edges ``0.05 s * 10**(j / 8)`` from 50 us
to 500 s, every IAT inside them (``ui/data/public/summary.json`` ``iat.per_topology``,
copied unchanged into ``datasets/agentraffic_server.json``: ``iat.burst_*`` below 50 ms,
``iat.slow_*`` from 50 ms up). :func:`paper_iat_histogram_df` bins simulated calls on the
same edges, so the two compare bin by bin (:func:`~agentlab.analysis.figures.paper_iat_figure`
draws them).
"""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pandas as pd

from agentlab.analysis._frame import require_columns
from agentlab.analysis.iat import iat_df
from agentlab.analysis.paper import PAPER_WINDOW

__all__ = ["paper_iat_histogram_df", "published_iat_histogram_df"]

#: the extract's topology names -> the workflow's
_TOPOLOGY = {"horizontal": "sequential", "vertical": "star", "full_mesh": "full_mesh"}
_BINS_PER_DECADE = 8


@cache
def _published() -> tuple[tuple[float, ...], dict[str, tuple[int, ...]]]:
    """(edges, counts per topology) of the published histograms."""
    from agentlab.datasets import data_dir

    iat = json.loads((data_dir() / "agentraffic_server.json").read_text())["iat"]
    edges = tuple(iat["burst_bins_s"] + iat["slow_bins_s"][1:])
    counts = {}
    for theirs, ours in _TOPOLOGY.items():
        burst = iat["burst_counts"].get(theirs, [0] * (len(iat["burst_bins_s"]) - 1))
        c = tuple(burst + iat["slow_counts"][theirs])
        if sum(c) != iat["n"][theirs] or len(c) != len(edges) - 1:
            raise ValueError(f"published IAT histogram of {theirs!r} is inconsistent")
        counts[ours] = c
    return edges, counts


def _frame(topology: str, edges: np.ndarray, counts: np.ndarray) -> pd.DataFrame:
    n = counts.sum()
    out = pd.DataFrame({"topology": topology, "left": edges[:-1], "right": edges[1:]})
    out["center"] = np.sqrt(out["left"] * out["right"])
    out["count"] = counts
    out["fraction"] = counts / n if n else np.nan
    out["density_per_decade"] = out["fraction"] * _BINS_PER_DECADE
    return out


def published_iat_histogram_df() -> pd.DataFrame:
    """The paper's pooled discussion-IAT histogram of each topology, as published.

    Returns:
        One row per (topology, bin), topologies named as the workflow names them
        (``sequential``, ``star``, ``full_mesh``): ``left``, ``right``, ``center``
        (geometric), ``count``, ``fraction`` and ``density_per_decade`` (the columns of
        :func:`~agentlab.analysis.iat.log_histogram_df`), on the published edges.
    """
    edges, counts = _published()
    e = np.asarray(edges)
    return pd.concat([_frame(t, e, np.asarray(c)) for t, c in counts.items()], ignore_index=True)


def paper_iat_histogram_df(
    calls: pd.DataFrame,
    *,
    run: str = "run_id",
    start: str = "start",
    stage_col: str = "stage",
) -> pd.DataFrame:
    """Simulated against published: the discussion-window IATs of ``calls`` (Table 2's
    definition, as :func:`~agentlab.analysis.paper.paper_summary_df` computes them) binned
    on the published edges, beside the published histogram.

    IATs outside the published range are counted in its end bins (under 50 us, zeros
    included, in the first; over 500 s in the last); the published histogram has none
    there. Topologies without a published histogram are left out.

    Args:
        calls: LLM calls with ``topology``, ``run`` and ``start`` columns and the stage.

    Returns:
        One row per (topology, bin): ``left``, ``right``, ``center``, ``simulated`` and
        ``published`` (shares of the topology's IATs), ``simulated_count``,
        ``published_count`` and ``density_per_decade`` for each (``simulated_density``,
        ``published_density``).
    """
    require_columns(calls, ["topology", run, start, stage_col], "calls")
    edges, counts = _published()
    e = np.asarray(edges)
    win = calls[calls[stage_col].isin(PAPER_WINDOW)]
    iats = iat_df(win, stage=None, by=["topology", run], start=start)
    frames = []
    for topology, pub in counts.items():
        x = iats.loc[iats["topology"] == topology, "iat"].to_numpy(dtype=float)
        if not len(x):
            continue
        idx = np.clip(np.searchsorted(e, x, side="right") - 1, 0, len(e) - 2)
        sim = np.bincount(idx, minlength=len(e) - 1)
        f = _frame(topology, e, np.asarray(pub))
        s = _frame(topology, e, sim)
        frames.append(
            pd.DataFrame(
                {
                    "topology": topology,
                    "left": f["left"],
                    "right": f["right"],
                    "center": f["center"],
                    "simulated": s["fraction"],
                    "published": f["fraction"],
                    "simulated_count": s["count"],
                    "published_count": f["count"],
                    "simulated_density": s["density_per_decade"],
                    "published_density": f["density_per_decade"],
                }
            )
        )
    if not frames:
        cols: list[str] = ["topology", "left", "right", "center", "simulated", "published",
                           "simulated_count", "published_count", "simulated_density",
                           "published_density"]  # fmt: skip
        return pd.DataFrame(columns=cols)
    return pd.concat(frames, ignore_index=True)
