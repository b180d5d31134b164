"""``length_corr``: the replies of one run run long or short together, each call's length
law unchanged (a Gaussian copula over the law's normal score), checked against the hand
computation of the scores the lengths were drawn at."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from agentlab.errors import ConfigError
from agentlab.llm import LLMClient, get_profile
from agentlab.llm.sim_profiles import SimProfile, load_profile

MEDIAN, SIGMA = 1000.0, 0.5  # a log-normal law long enough that rounding moves no score


def _profile(**corr: float) -> SimProfile:
    return get_profile("instant").replace(
        lengths={"x": [MEDIAN, SIGMA], "y": [MEDIAN, SIGMA]},
        length_corr=corr,
        max_completion=100_000,
    )


async def _lengths(
    prof: SimProfile, tmp_path: Path, runs: int, calls: int, reverse: bool = False
) -> dict[tuple[int, int], int]:
    # a file per profile: equal client configs (the same path) share one simulated server
    # in a process (llm/_live.py), loaded with the first profile
    name = "p" + "".join(f"-{k}{v}" for k, v in prof.length_corr) + ".toml"
    c = LLMClient(f"sim/{prof.save(tmp_path / name)}", seed=5)
    keys = [(r, i) for r in range(runs) for i in range(calls)]
    out = {}
    for r, i in reversed(keys) if reverse else keys:
        res = await c.complete([{"role": "user", "content": f"run {r} call {i}"}],
                               labels={"call": "x", "run_id": f"run-{r}"})  # fmt: skip
        out[(r, i)] = res.record.completion_tokens
    return out


def _scores(lengths: dict[tuple[int, int], int], runs: int, calls: int) -> np.ndarray:
    """The normal score each length was drawn at: log(n / median) / sigma, by run."""
    z = np.empty((runs, calls))
    for (r, i), n in lengths.items():
        z[r, i] = math.log(n / MEDIAN) / SIGMA
    return z


async def test_a_runs_scores_correlate_by_rho_and_each_law_is_unchanged(tmp_path: Path) -> None:
    runs, calls, rho = 300, 6, 0.6
    z = _scores(await _lengths(_profile(x=rho), tmp_path, runs, calls), runs, calls)
    # each call's law: scores standard normal (300 x 6 draws; with rho the pooled mean
    # moves with the 300 run scores: its standard error is sqrt(rho / runs) ~ 0.045)
    assert abs(z.mean()) < 0.15 and z.std() == pytest.approx(1.0, abs=0.08)
    # within a run: the variance of a run's mean is rho + (1 - rho) / calls for a Gaussian
    # copula with correlation rho (0.667 here; 1 / calls = 0.167 for independent draws)
    between = z.mean(axis=1).var()
    assert between == pytest.approx(rho + (1 - rho) / calls, rel=0.2)
    pairs = np.corrcoef(z[:, 0], z[:, 1])[0, 1]
    assert pairs == pytest.approx(rho, abs=0.12)


async def test_calls_not_listed_draw_as_before_and_a_group_is_order_free(tmp_path: Path) -> None:
    """Calls of a label without a ``length_corr`` draw exactly the lengths of a profile
    without the table (the call's own score is taken either way, so the content stream
    is the same); the group's score depends on the seed and the run alone, so the same
    calls in the reverse order draw the same lengths."""
    plain = await _lengths(_profile(), tmp_path, 20, 3)
    assert await _lengths(_profile(y=0.9), tmp_path, 20, 3) == plain
    corr = await _lengths(_profile(x=0.7), tmp_path, 20, 3)
    assert corr != plain
    assert await _lengths(_profile(x=0.7), tmp_path, 20, 3, reverse=True) == corr


def test_length_corr_is_looked_up_as_the_laws_and_round_trips_through_toml(
    tmp_path: Path,
) -> None:
    prof = SimProfile(name="t", length_corr={"x": 0.2, "x@star": 0.8, "execution": 0.5})
    assert prof.length_rho({"call": "x", "topology": "star"}) == 0.8
    assert prof.length_rho({"call": "x", "topology": "sequential"}) == 0.2
    assert prof.length_rho({"call": "z", "stage": "execution"}) == 0.5
    assert prof.length_rho({"call": "z"}) == 0.0 and prof.length_rho(None) == 0.0
    back = load_profile(prof.save(tmp_path / "t.toml"))
    assert back.length_corr == prof.length_corr and back.length_corr_by == "run_id"
    assert get_profile("instant", length_corr_by="agent_id").length_corr_by == "agent_id"


@pytest.mark.parametrize("bad", [{"x": 1.0}, {"x": -0.1}, {"x": "high"}, [("x",)]])
def test_a_rho_outside_0_to_1_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match="length_corr"):
        get_profile("instant", length_corr=bad)


def test_a_profile_built_directly_checks_its_rhos_too() -> None:
    assert SimProfile(name="t", length_corr=(("x", 0.3),)).length_rho({"call": "x"}) == 0.3
    with pytest.raises(ConfigError, match="length_corr"):
        SimProfile(name="t", length_corr=(("x", 1.5),))


def test_an_empty_grouping_label_is_refused_however_the_profile_is_made() -> None:
    with pytest.raises(ConfigError, match="length_corr_by must name a label"):
        SimProfile(name="t", length_corr_by="")
    with pytest.raises(ConfigError, match="length_corr_by must name a label"):
        get_profile("instant", length_corr_by="")
