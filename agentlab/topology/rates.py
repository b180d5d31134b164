"""Workflow rates from observed runs: stop rounds and evaluator acceptance, from the calls.

What a recorded run (real or simulated) tells about the workflow's stop rates, using only
the ``llm_calls`` labels (``topology``, ``run_id``, ``iteration``, ``stage``, ``round``):

- A discussion (one run, one iteration) whose last round r is below ``rounds`` stopped
  because round r agreed. So for r < ``rounds``: rate_r = discussions that stopped at r /
  discussions that reached r. At r = ``rounds`` the discussion ends either way, so that
  rate cannot be seen in the calls; it is reported as NaN and, in :func:`workflow_rates`,
  carried over from the round before (the published per-round rates barely change
  between rounds 2 and 3: 0.265 / 0.268 sequential).
- An iteration i < ``max_iterations`` was accepted iff it is its run's last iteration;
  the last allowed iteration ends the run either way and is left out.

Runs recorded with ``early_stop=False`` never stop early: their rates read as 0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from agentlab.errors import ConfigError

if TYPE_CHECKING:  # pandas loads lazily: `import agentlab` stays light
    import pandas as pd

__all__ = ["workflow_rates", "workflow_rates_df"]

_NEEDED = ("topology", "run_id", "iteration", "stage", "round")


def workflow_rates_df(
    calls: pd.DataFrame, *, rounds: int = 3, max_iterations: int = 3
) -> pd.DataFrame:
    """Per topology: ``kind`` (``consensus`` per ``round``, or ``pass``), ``reached``,
    ``agreed`` (stopped there / accepted), ``rate`` (NaN where not identifiable)."""
    missing = [c for c in _NEEDED if c not in calls.columns]
    if missing:
        raise ConfigError(f"calls lack the columns {missing}; need {list(_NEEDED)}")
    if rounds < 1 or max_iterations < 1:
        raise ConfigError(f"need rounds>=1 and max_iterations>=1, got {rounds}, {max_iterations}")
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for topo, sub in calls.groupby("topology", sort=True):
        disc = sub[sub["stage"] == "discussion"]
        last = disc.groupby(["run_id", "iteration"])["round"].max().astype(int)
        for r in range(1, rounds + 1):
            reached = int((last >= r).sum())
            agreed = int((last == r).sum()) if r < rounds else 0
            ok = r < rounds and reached > 0
            rows.append({"topology": topo, "kind": "consensus", "round": r, "reached": reached,
                         "agreed": agreed if ok else None,
                         "rate": agreed / reached if ok else math.nan})  # fmt: skip
        its = sub.groupby("run_id")["iteration"].agg(["max"])
        pairs = sub[["run_id", "iteration"]].drop_duplicates()
        pairs = pairs[pairs["iteration"] < max_iterations]
        accepted = pairs["iteration"].to_numpy() == its.loc[pairs["run_id"], "max"].to_numpy()
        n = len(pairs)
        rows.append({"topology": topo, "kind": "pass", "round": None, "reached": n,
                     "agreed": int(accepted.sum()) if n else None,
                     "rate": float(accepted.mean()) if n else math.nan})  # fmt: skip
    return pd.DataFrame(rows)


def workflow_rates(
    calls: pd.DataFrame, *, rounds: int = 3, max_iterations: int = 3
) -> dict[str, dict[str, Any]]:
    """``{"consensus_rates": {topology: (r1, ..., rR)}, "pass_rates": {topology: p}}``,
    ready for ``WorkflowConfig(**workflow_rates(calls))``; see the module docstring.

    Raises:
        ConfigError: a topology's rounds before the last are never reached, or no
            iteration before the last was observed. (Runs recorded with
            ``early_stop=False`` give rates of 0 — indistinguishable in the calls from
            discussions that never agree.)
    """
    df = workflow_rates_df(calls, rounds=rounds, max_iterations=max_iterations)
    consensus: dict[str, tuple[float, ...]] = {}
    passes: dict[str, float] = {}
    for topo, sub in df.groupby("topology", sort=True):
        cons = sub[sub["kind"] == "consensus"].sort_values("round")["rate"].tolist()
        seen = cons[:-1] if rounds > 1 else []
        if any(math.isnan(x) for x in seen):
            raise ConfigError(f"{topo}: rounds 1..{rounds - 1} are not all observed; "
                              "record more runs")  # fmt: skip
        consensus[str(topo)] = tuple(seen + seen[-1:]) if seen else (math.nan,)
        p = float(sub[sub["kind"] == "pass"]["rate"].iloc[0])
        if math.isnan(p):
            raise ConfigError(f"{topo}: no iteration before iteration {max_iterations}")
        passes[str(topo)] = p
    return {"consensus_rates": consensus, "pass_rates": passes}
