"""agentlab's errors in a notebook: the user's frames and the message, not agentlab's."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import agentlab
from agentlab.errors import TRACEBACK_ENV, AgentlabError, ConfigError, short_traceback

PACKAGE = str(Path(agentlab.__file__).parent)


def _typo(tmp_path: Path) -> None:
    agentlab.Society.create(tmp_path / "r", agents=2, env=["socialfeed"], llm="sim/instant")


def test_agentlabs_frames_are_left_out_and_the_callers_kept(tmp_path: Path) -> None:
    with pytest.raises(AgentlabError) as info:
        _typo(tmp_path)
    lines = short_traceback(info.value)
    # (other tests register env types of their own: the list is not only social_feed)
    assert lines[-2].startswith("UnknownNameError: unknown env type 'socialfeed'; registered: ")
    assert "social_feed" in lines[-2]
    text = "\n".join(lines)
    assert "in _typo" in text and 'env=["socialfeed"]' in text  # the caller and its line
    assert PACKAGE not in text  # (the whole traceback has frames in agentlab/runtime)
    assert any(PACKAGE in str(f.filename) for f in _tb_frames(info.value))


def _tb_frames(exc: BaseException) -> list:
    import traceback

    return traceback.extract_tb(exc.__traceback__)


def test_a_cause_agentlab_did_not_raise_is_shown_whole() -> None:
    def agent_step() -> None:
        raise ZeroDivisionError("in the user's agent")

    def wrap() -> None:
        try:
            agent_step()
        except ZeroDivisionError as e:
            raise ConfigError("the step failed") from e

    with pytest.raises(ConfigError) as info:
        wrap()
    text = "\n".join(short_traceback(info.value))
    assert (
        text.index("ZeroDivisionError: in the user's agent")
        < text.index("direct cause")
        < text.index("ConfigError: the step failed")
    )
    assert "in agent_step" in text


def test_full_tracebacks_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    err = ConfigError("x")
    assert hasattr(err, "_render_traceback_")  # what IPython asks
    monkeypatch.setenv(TRACEBACK_ENV, "full")
    assert not hasattr(err, "_render_traceback_")


def test_a_notebook_shows_the_cell_and_the_message(tmp_path: Path) -> None:
    """A real kernel: IPython draws the error through ``_render_traceback_``."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import agentlab\n"
        f"agentlab.Society.create({str(tmp_path / 'r')!r}, agents=2, env=['socialfeed'],"
        " llm='sim/instant')")]  # fmt: skip
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    (err,) = [o for o in nb.cells[0].outputs if o.output_type == "error"]
    tb = [re.sub(r"\x1b\[[0-9;]*m", "", t) for t in err.traceback]
    assert err.ename == "UnknownNameError"
    assert tb[:2] == ["Traceback (most recent call last):", "Cell In[1], line 2, in <module>"]
    assert tb[-2].startswith("UnknownNameError: unknown env type 'socialfeed'")
    assert len(tb) <= 6, tb  # (was 59 lines through the society's builder)
