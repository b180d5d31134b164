"""The paper's IAT histograms (agentlab.analysis.paper_iat) and their figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agentlab.analysis import (
    paper_iat_figure,
    paper_iat_histogram_df,
    published_iat_histogram_df,
)


def _call(topology: str, run: str, stage: str, start: float) -> dict[str, object]:
    return {"topology": topology, "run_id": run, "stage": stage, "start": start,
            "end": start + 1.0}  # fmt: skip


def test_published_histogram_is_summary_json():
    """summary.json iat.per_topology: n 6,513 / 7,355 / 14,493; Star's bin [50, 66.7) s
    holds 101 and its burst gaps (under 50 ms) 3,918; Sequential has none under 1.58 s;
    8 bins per decade, contiguous, 50 us to 500 s."""
    h = published_iat_histogram_df()
    assert h.groupby("topology")["count"].sum().to_dict() == {
        "sequential": 6513, "star": 7355, "full_mesh": 14493}  # fmt: skip
    for _, g in h.groupby("topology"):
        assert g["fraction"].sum() == pytest.approx(1.0)
        assert np.allclose(g["left"].to_numpy()[1:], g["right"].to_numpy()[:-1])
        assert g["left"].iloc[0] == pytest.approx(5e-5) and g["right"].iloc[-1] == 500.0
        assert np.allclose(np.log10(g["right"] / g["left"]), 1 / 8, atol=1e-5)
        assert np.allclose(g["density_per_decade"], g["fraction"] * 8)
    star = h[h.topology == "star"]
    assert int(star.loc[np.isclose(star.left, 50.0), "count"].iloc[0]) == 101
    assert int(star.loc[star.right <= 0.05 + 1e-12, "count"].sum()) == 3918
    seq = h[h.topology == "sequential"]
    assert int(seq.loc[seq.left < 1.58, "count"].sum()) == 0


def test_simulated_iats_on_the_published_bins_by_hand():
    """One star run: window starts 0, 0.0003, 10.0003, 70.0003 (IATs 0.3 ms, 10 s, 60 s);
    an execution call between is outside the window; a second run's two calls at the same
    instant give a zero IAT, counted in the first bin (50-66.7 us); a topology the paper
    has no histogram for ('solo') is left out."""
    rows = [_call("star", "a", "discussion", t) for t in (0.0, 0.0003, 10.0003, 70.0003)]
    rows += [_call("star", "a", "execution", 30.0),
             _call("star", "b", "discussion", 5.0), _call("star", "b", "discussion", 5.0),
             _call("solo", "c", "discussion", 0.0), _call("solo", "c", "discussion", 1.0)]  # fmt: skip
    h = paper_iat_histogram_df(pd.DataFrame(rows))
    assert set(h.topology) == {"star"}
    got = h[h.simulated_count > 0].set_index("left")["simulated_count"].to_dict()
    assert len(got) == 4 and sum(got.values()) == 4
    lefts = sorted(got)
    assert lefts[0] == pytest.approx(5e-5)  # the zero IAT
    assert lefts[1] == pytest.approx(0.000281171)  # 0.3 ms in [0.281, 0.375) ms
    assert lefts[2] == pytest.approx(8.8914)  # 10 s in [8.89, 11.9) s
    assert lefts[3] == pytest.approx(50.0)  # 60 s in [50, 66.7) s
    assert h["simulated"].sum() == pytest.approx(1.0)
    assert h["published"].sum() == pytest.approx(1.0)
    assert np.allclose(h["simulated_density"], h["simulated"] * 8)
    pub = published_iat_histogram_df()
    assert h["published_count"].tolist() == pub[pub.topology == "star"]["count"].tolist()


def test_paper_iat_figure_panels():
    """A panel per topology: published (grey, dotted) and simulated step lines and the burst
    threshold; the published trace draws the published densities over the bins that hold
    values (simulated or published)."""
    rows = [_call("star", "a", "discussion", t) for t in (0.0, 0.0003, 10.0003)]
    rows += [_call("sequential", "s", "discussion", t) for t in (0.0, 4.0, 9.0)]
    fig = paper_iat_figure(pd.DataFrame(rows))
    names = [t.name for t in fig.data]
    assert names == ["sequential published", "sequential simulated", "threshold 50 ms",
                     "star published", "star simulated", "threshold 50 ms"]  # fmt: skip
    assert [t.showlegend for t in fig.data if t.name.startswith("threshold")] == [True, False]
    assert fig.layout.xaxis.type == "log"
    pub = published_iat_histogram_df()
    star = pub[(pub.topology == "star") & (pub["count"] > 0)]
    trace = fig.data[3]
    assert trace.line.dash == "dot"
    assert trace.x[0] == pytest.approx(min(star.left.min(), 0.000281171))
    assert max(trace.y) == pytest.approx(star.density_per_decade.max())


def test_paper_iat_figure_refuses_calls_the_paper_has_nothing_for():
    """A social-feed run (no topology the paper published) or one window call a run (no
    IAT): a clear error, not an empty figure."""
    from agentlab.errors import ConfigError

    other = pd.DataFrame([_call("solo", "a", "discussion", t) for t in (0.0, 1.0)])
    with pytest.raises(ConfigError, match="no discussion-window IATs"):
        paper_iat_figure(other)
    lone = pd.DataFrame(
        [_call("star", "a", "discussion", 0.0), _call("star", "b", "discussion", 1.0)]
    )
    with pytest.raises(ConfigError, match="sequential, star, full_mesh"):
        paper_iat_figure(lone)
    with pytest.raises(ConfigError, match="topology"):
        paper_iat_figure(other.drop(columns="topology"))
