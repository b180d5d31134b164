"""The paper's discussion prompt and reply lengths by call label and round, published and
simulated.

agentraffic publishes, per discussion call label (Sequential's turns, Star's solver and
reviewers, Full mesh's messages) and round, the quartiles and the mean of the prompt and
completion tokens (``ui/data/public/workflow.json`` ``groups.all.<topology>.context``,
copied unchanged into ``datasets/agentraffic_server.json``: ``workflow.context`` and
``workflow.context_mean``), and the same per task category (math, research, consulting,
coding: ``groups.<category>``, ``workflow.context_by_task``). ``sim/vllm-3b``'s length laws
take the reply quartiles and means per category as inputs; the prompts follow from the
replies the next calls quote, so the prompt rows are a held-out check. A reply of 6,144
tokens or more ran to the paper server's output cap (a runaway generation: ``at_cap``).
"""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pandas as pd

from agentlab.analysis._frame import require_columns

__all__ = ["CAP_TOKENS", "paper_lengths_df", "published_lengths_df"]

#: the paper server's output cap (``LLM_MAX_TOKENS``; ``server_config.max_tokens``)
CAP_TOKENS = 6144
#: the published call labels and the topology of each, as the workflow names them
_CALLS = {"horizontal_discussion": "sequential", "vertical_solver": "star",
          "vertical_reviewer": "star", "full_mesh_message": "full_mesh"}  # fmt: skip
_KINDS = ("prompt", "completion")
_STATS = ["n", "p25", "median", "p75", "mean"]


@cache
def _published(
    by_category: bool,
) -> tuple[tuple[str, str, str, int, str, float, float, float, float, float], ...]:
    from agentlab.datasets import data_dir

    wf = json.loads((data_dir() / "agentraffic_server.json").read_text())["workflow"]
    groups = [("all", wf)]
    if by_category:
        byt = wf["context_by_task"]
        groups += [(cat, byt[cat]) for cat in byt["categories"]]
    rows = []
    for cat, g in groups:
        for call, topology in _CALLS.items():
            for kind in _KINDS:
                quartiles, means = g["context"][call][kind], g["context_mean"][call][kind]
                for rnd, ((p25, med, p75, n), mean) in enumerate(
                    zip(quartiles, means, strict=True), start=1
                ):
                    rows.append((cat, topology, call, rnd, kind, n, p25, med, p75, mean))
    return tuple(rows)


def published_lengths_df(*, by_category: bool = False) -> pd.DataFrame:
    """The paper's discussion prompt and completion tokens by call label and round.

    Args:
        by_category: also per task category (a ``category`` column: ``all``, then
            ``math``, ``research``, ``consulting``, ``coding``).

    Returns:
        One row per (topology, call, round, kind): ``topology`` (``sequential``, ``star``,
        ``full_mesh``), ``call`` (the paper's label), ``round`` (1-3), ``kind``
        (``prompt`` or ``completion``), ``n`` (calls), ``p25``, ``median``, ``p75``,
        ``mean`` (tokens).
    """
    cols = ["category", "topology", "call", "round", "kind", *_STATS]
    df = pd.DataFrame(list(_published(by_category)), columns=cols)
    return df if by_category else df.drop(columns="category")


def paper_lengths_df(
    calls: pd.DataFrame,
    *,
    labels: str = "labels",
    topology: str = "topology",
    round_col: str = "round",
    by_category: bool = False,
) -> pd.DataFrame:
    """Simulated against published: the prompt and completion tokens of ``calls`` by the
    paper's call labels (``labels["call"]``) and round, next to the published ones.

    Args:
        calls: ``llm_calls`` rows (``Run.llm_calls_df()``, ``ExperimentResults.calls_df()``);
            failed calls are left out where an ``outcome`` column says so.
        by_category: also per task category (``labels["task_category"]``; a ``category``
            column, ``all`` for every category together).

    Returns:
        One row per published (topology, call, round, kind) that ``calls`` hold: the
        simulated ``n``, ``p25``, ``median``, ``p75``, ``mean``, the ``published_*`` of each,
        ``mean_ratio`` (simulated / published mean) and, for completions, ``at_cap`` (the
        share of replies of ``CAP_TOKENS`` or more; NaN for prompts).

    Raises:
        ConfigError: a column is missing.
    """
    require_columns(calls, [labels, topology, round_col, "prompt_tokens", "completion_tokens"],
                    "paper_lengths_df")  # fmt: skip
    c = calls
    if "outcome" in c:
        c = c[c["outcome"] == "ok"]

    def label(name: str) -> pd.Series:
        return c[labels].map(lambda d: d.get(name) if isinstance(d, dict) else None)

    call = label("call")
    cat = label("task_category") if by_category else None
    pub = published_lengths_df(by_category=True)
    if not by_category:
        pub = pub[pub["category"] == "all"]
    rows = []
    for key, p in pub.groupby(["category", "topology", "call", "round", "kind"], sort=False):
        group, topo, name, rnd, kind = key  # type: ignore[misc]
        hit = (call == name) & (c[topology] == topo) & c[round_col].eq(rnd).fillna(False)
        if cat is not None and group != "all":
            hit &= cat == group
        x = c.loc[hit.astype(bool), f"{kind}_tokens"].to_numpy(dtype=float)
        if not len(x):
            continue
        q25, q50, q75 = np.percentile(x, [25, 50, 75])
        row = {"category": group, "topology": topo, "call": name, "round": rnd, "kind": kind,
               "n": len(x), "p25": q25, "median": q50, "p75": q75,
               "mean": float(x.mean())}  # fmt: skip
        row |= {f"published_{s}": p[s].iloc[0] for s in _STATS}
        row["mean_ratio"] = row["mean"] / row["published_mean"]
        row["at_cap"] = float((x >= CAP_TOKENS).mean()) if kind == "completion" else np.nan
        rows.append(row)
    cols = ["category", "topology", "call", "round", "kind", *_STATS,
            *(f"published_{s}" for s in _STATS), "mean_ratio", "at_cap"]  # fmt: skip
    out = pd.DataFrame(rows, columns=cols)
    return out if by_category else out.drop(columns="category")
