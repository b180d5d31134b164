"""A society view's static snapshot at each run end, its rates, and its charts' empty states.

- The snapshot (``text/html``: nbconvert, HTML export, ``agentlab paper``) was refreshed only
  on ``stop()`` or when a run the view started ended: a run by ``society.run()`` in a
  later cell, or a kernel interrupt's stop, never reached it.
- The rates took a tick's duration from the gap between commits, so time when nothing ran
  (paused, stopped, a resume later) counted as the tick's.
- One committed tick is a point on every chart, not "no ticks yet".
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from pathlib import Path
from typing import Any

import pytest

from agentlab.viz import SocietyView, live
from agentlab.viz._society_model import NO_TICKS, STATIC_CHARTS
from agentlab.viz._static import fmt_num
from agentlab.viz.society_view import SERIES_COLUMNS, decode_series


def _society(path: Path, clock: str = "virtual", llm: str = "sim/instant") -> Any:
    from agentlab.runtime import Society

    return Society.create(path, agents=3, env=["social_feed"], llm=llm, seed=0, clock=clock,
                          progress=False)  # fmt: skip


def _count_updates(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each snapshot update (``StaticForm.update_static`` → ``update_everywhere``)."""
    import agentlab.core.kernel_display as kd

    sent: list[str] = []
    monkeypatch.setattr(kd, "update_everywhere",
                        lambda bundle, display_id: sent.append(bundle["text/plain"]))  # fmt: skip
    return sent


async def _until(cond: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_a_run_the_view_did_not_start_refreshes_the_snapshot_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dash = live(soc)``, then ``await soc.run(ticks=3)`` in a later cell: the snapshot
    shows tick 3 once the run ends, one update per run end and none per tick; ``stop()``
    still refreshes it."""
    sent = _count_updates(monkeypatch)
    soc = _society(tmp_path / "soc")
    dash = live(soc)
    dash._display_id = "shown"  # (as displayed: update_static sends)
    view = dash.society
    assert view is not None
    await asyncio.sleep(0.3)
    assert sent == []  # displaying an idle society is no run end
    await soc.run(ticks=3)
    await _until(lambda: len(sent) == 1)
    assert "tick 3" in sent[0], sent
    await soc.run(ticks=2)
    await _until(lambda: len(sent) == 2)
    await asyncio.sleep(0.5)  # (a poll or ten later: still one update for that run)
    assert len(sent) == 2 and "tick 5" in sent[1], sent
    view._cell_ends()  # a cell ending after the run: nothing new to send
    assert len(sent) == 2
    dash.stop()
    assert len(sent) == 3
    soc.close()


async def test_a_run_ending_inside_a_cell_is_sent_before_the_cell_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nbclient keeps only what a cell sends before its reply; the follower sees a run end
    a poll later. The end of every cell (IPython's ``post_run_cell``) sends it if it has
    not gone out; a run that ended while no cell ran goes out again at the next cell."""
    from agentlab.viz import _cells

    sent = _count_updates(monkeypatch)
    soc = _society(tmp_path / "soc")
    view = SocietyView(soc, society=soc, follow=False)  # (no follower thread: cells only)
    view._display_id = "shown"
    view.following = True  # (as a followed view: a stopped one sends nothing at cell ends)
    await soc.run(ticks=2)
    view._cell_ends()
    assert len(sent) == 1 and "tick 2" in sent[0], sent
    monkeypatch.setattr(_cells, "_RUNNING", [False])  # between cells
    await soc.run(ticks=1)
    view._after_run()
    assert len(sent) == 2 and view._resend
    view._cell_starts()  # the next cell: sent again, as that cell
    assert len(sent) == 3 and not view._resend and "tick 3" in sent[2]
    view.close()
    soc.close()


async def test_a_directory_view_refreshes_its_snapshot_when_the_run_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``show(dir)`` of a run another cell (or process) runs: its end, in ``run.json``."""
    sent = _count_updates(monkeypatch)
    soc = _society(tmp_path / "soc")
    await soc.run(ticks=1)
    view = SocietyView(tmp_path / "soc", poll_interval=0.01)
    view._display_id = "shown"
    await asyncio.sleep(0.3)
    assert sent == []  # the run there had ended before: nothing new
    await soc.run(ticks=2)
    await _until(lambda: bool(sent) and "tick 3" in sent[-1], timeout=10)
    view.close()
    soc.close()


def _tile(html: str, label: str) -> str:
    """The value of the snapshot's stat tile ``label``."""
    text = re.sub(r"<[^>]+>", "|", html)
    cells = [c for c in text.split("|") if c.strip()]
    return cells[cells.index(label) - 1]


async def test_rates_count_the_ticks_work_not_the_idle_time_between_runs(tmp_path: Path) -> None:
    """A real-clock society runs 2 ticks, sits idle, runs 2 more: every tick's rate is its
    steps over its own ``wall_s`` (the gap between commits counted the idle second), in the
    live series and in the snapshot alike; under the virtual clock, over the simulated
    seconds between commits."""
    from agentlab.store import open_run

    soc = _society(tmp_path / "real", clock="real")
    await soc.run(ticks=2)
    await asyncio.sleep(1.0)  # nothing runs
    await soc.run(ticks=2)
    soc.close()
    tl = open_run(tmp_path / "real").timeline_df()
    view = SocietyView(tmp_path / "real", follow=False)
    rates = decode_series(view.series_base)[:, SERIES_COLUMNS.index("steps_per_s")]
    assert list(rates) == pytest.approx(list(tl.steps / tl.wall_s))
    mean = tl.llm_calls.sum() / tl.wall_s.sum()
    assert view.summary["mean_calls_per_s"] == pytest.approx(mean)
    html = view._static_html()
    assert _tile(html, "LLM calls/s (clock)") == fmt_num(mean)
    view.close()

    virt = _society(tmp_path / "virt", llm="sim/vllm-3b")  # (sim/instant: no clock time)
    await virt.run(ticks=3)
    v = SocietyView(virt, society=virt, follow=False)
    tl = open_run(tmp_path / "virt").timeline_df()
    gaps = tl.ts.diff().fillna(tl.ts.iloc[0])  # (the virtual clock starts at 0)
    rates = decode_series(v.series_base)[:, SERIES_COLUMNS.index("calls_per_s")]
    assert v._model.virtual
    assert list(rates) == pytest.approx(list(tl.llm_calls / gaps))
    v.close()
    virt.close()


def _svgs(html: str) -> list[str]:
    return [base64.b64decode(b).decode() for b in re.findall(r"base64,([A-Za-z0-9+/=]+)", html)]


async def test_one_tick_is_a_point_on_every_chart_not_no_ticks_yet(tmp_path: Path) -> None:
    """The live charts drew the tick-1 point with "no ticks yet" over it; both forms say it
    only before the first tick, and the live view takes its words (``chart_empty``) from
    the snapshot's."""
    soc = _society(tmp_path / "soc", clock="real")
    view = SocietyView(soc, society=soc, follow=False)
    assert view.chart_empty == [NO_TICKS] * len(STATIC_CHARTS)
    assert all(NO_TICKS in svg for svg in _svgs(view._static_html()))
    await soc.run(ticks=1)
    view.refresh()
    assert NO_TICKS not in view.chart_empty
    assert view.chart_empty == [why for *_, why in STATIC_CHARTS]
    svgs = _svgs(view._static_html())
    assert len(svgs) == 4 and all("<circle" in svg for svg in svgs), svgs
    assert not any(NO_TICKS in svg for svg in svgs)
    view.close()
    soc.close()
