"""Pages of runs with unusual contents: tool errors alone, a tick that never committed.
``agentlab view --bundle`` of a folder refuses the whole folder over one broken page or
link, so each of these broke every run's pages."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _run(path: Path) -> tuple[Any, Any]:
    from agentlab.store import ReplaySink, Tracer, catalog, write_manifest

    write_manifest(path, kind="society", config={"model": "sim/x"}, seed=1)
    sink, tracer = ReplaySink(path, shard="s"), Tracer(path, shard="s")
    catalog.register(sink, ("llm_calls",), module=__name__)  # its columns, as a driver does
    return sink, tracer


def test_a_run_whose_only_errors_are_tool_errors_has_an_errors_page(tmp_path: Path) -> None:
    """The errors table of a run with tool errors and no step error or LLM failure had a
    ``request_id`` column of NaN (float64) that pandas 3 would not fill with call ids: its
    errors page raised, and with it ``agentlab view --bundle`` of the whole folder (a
    200-agent persona society on ``sim/vllm-3b``: 9 tool errors over 10 ticks)."""
    from agentlab.store import open_run
    from agentlab.view import build_site, render_page
    from agentlab.view.data import errors_df

    run = tmp_path / "runs" / "tools"
    sink, tracer = _run(run)
    sink.extend("llm_calls", [{"request_id": f"r{i}", "agent_id": "a0", "tick": 1, "start": i,
                               "end": i + 1.0, "outcome": "ok", "run_id": "tools"}
                              for i in range(2)])  # fmt: skip
    span = tracer.start_span("env.tool", **{"gen_ai.agent.id": "a0", "agentlab.tick": 1})
    tracer.end_span(span, "error", "post: text too long")
    sink.flush()
    tracer.flush()
    page = render_page(tmp_path / "runs", "r/tools/errors-1.html") or ""
    assert "post: text too long" in page and "tool error" in page
    assert "prompt &amp; reply</a>" in page  # the agent's last call at that tick, linked
    errs = errors_df(open_run(run))
    assert list(errs["request_id"]) == ["r1"] and list(errs["kind"]) == ["tool error"]
    assert (build_site(tmp_path / "runs", tmp_path / "site")).exists()


def test_agents_of_an_uncommitted_tick_are_named_not_linked(tmp_path: Path) -> None:
    """A society killed in its first tick (nothing committed, not reopened) keeps that
    tick's spans; its spans page linked their agents to pages that do not exist (an
    agent's page is one that stepped, called an LLM or sent a message)."""
    from agentlab.view import build_site, render_page

    run = tmp_path / "runs" / "killed"
    _, tracer = _run(run)
    span = tracer.start_span("agent.step", **{"gen_ai.agent.id": "llm-00000", "agentlab.tick": 1})
    tracer.end_span(span)
    tracer.flush()
    page = render_page(tmp_path / "runs", "r/killed/spans-1.html") or ""
    assert "llm-00000" in page and "agent-llm-00000.html" not in page
    assert render_page(tmp_path / "runs", "r/killed/agent-llm-00000.html") is None
    assert build_site(tmp_path / "runs", tmp_path / "site").exists()


def test_a_page_that_fails_to_render_does_not_cost_the_folder_its_bundle(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """One page raising (as the errors page above did) stopped the crawl with a traceback:
    no site at all. The page is written saying why (as the server answers it), every other
    page is written, and the error names it afterwards."""
    import pytest

    from agentlab.errors import ConfigError
    from agentlab.view import build_site, data

    for name in ("a", "b"):
        sink, _ = _run(tmp_path / "runs" / name)
        sink.extend("llm_calls", [{"request_id": "r0", "agent_id": "a0", "tick": 1,
                                   "start": 0.0, "end": 1.0, "outcome": "ok", "run_id": name}])  # fmt: skip
        sink.flush()
    real = data.errors_df

    def errors_df(run: Any) -> Any:
        if run.path.name == "b":
            raise ValueError("damaged")
        return real(run)

    monkeypatch.setattr(data, "errors_df", errors_df)
    with pytest.raises(ConfigError, match=r"wrote the site to .*1 page\(s\) failed to render"):
        build_site(tmp_path / "runs", tmp_path / "site")
    site = tmp_path / "site"
    assert "could not render this page" in (site / "r/b/errors-1.html").read_text()
    assert "ValueError: damaged" in (site / "r/b/errors-1.html").read_text()
    for page in ("index.html", "r/a/errors-1.html", "r/b/index.html", "r/b/calls-1.html"):
        assert (site / page).exists(), page


def test_a_stopped_run_page_says_how_to_go_on(tmp_path: Path) -> None:
    """A stopped or killed society's page said "stopped" and no more; it names the call that
    resumes it (the report does too), and a finished run's page says nothing of it."""
    from agentlab.store.lifecycle import mark_status
    from agentlab.view import render_page

    for name, status in (("stopped", "stopped"), ("finished", "done")):
        sink, _ = _run(tmp_path / name)
        sink.flush()
        mark_status(tmp_path / name, status)
    page = render_page(tmp_path, "r/stopped/index.html") or ""
    assert "<h2>Unfinished</h2>" in page and "Society.open(" in page and "resumes it" in page
    assert "Unfinished" not in (render_page(tmp_path, "r/finished/index.html") or "x Unfinished")
