"""Scratch directories: removed by their owner, and by the next process's sweep when the
owner was killed (a real SIGKILL of a real child process: no cleanup runs in it)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab.store.scratch import ScratchDir, sweep_abandoned

_CHILD = """
import sys, time
from agentlab.store.scratch import ScratchDir
d = ScratchDir(sys.argv[1], sys.argv[2])
(d.path / "work.json").write_text("{}")
print(d.path, flush=True)
time.sleep(600)
"""


def _child(name: str, root: Path) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, name, str(root)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_a_killed_owner_s_dir_is_swept_and_a_live_one_is_kept(tmp_path: Path) -> None:
    killed, killed_dir = _child("agentlab-t", tmp_path)
    live, live_dir = _child("agentlab-t", tmp_path)
    try:
        assert killed_dir.name.startswith("agentlab-t.") and (killed_dir / "work.json").is_file()
        assert sweep_abandoned("agentlab-t", tmp_path) == []  # both owners alive
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(10)
        assert sweep_abandoned("agentlab-t", tmp_path) == [killed_dir]
        assert not killed_dir.exists()
        assert (live_dir / "work.json").is_file(), "a live owner's dir was swept"
    finally:
        live.kill()
        live.wait(10)
    # what the live one leaves when it is killed too: the next ScratchDir of this process
    # sweeps it (the first one of a name in a process does)
    fresh = ScratchDir("agentlab-t", tmp_path)
    assert not live_dir.exists()
    assert [p.name for p in tmp_path.iterdir()] == [fresh.path.name]
    fresh.close()


def test_close_gc_and_other_names(tmp_path: Path) -> None:
    other = tmp_path / "agentlab-t2-old"  # another name, or the old mkdtemp form: not ours
    other.mkdir()
    a = ScratchDir("agentlab-t2", tmp_path)
    assert a.path.is_dir() and a.path.parent == tmp_path
    # in use by this very process: a sweep (another open file description) sees it held
    assert sweep_abandoned("agentlab-t2", tmp_path) == []
    a.close()
    a.close()  # idempotent
    assert not a.path.exists()
    b = ScratchDir("agentlab-t2", tmp_path)
    path = b.path
    del b
    gc.collect()
    assert not path.exists(), "a dropped ScratchDir kept its directory"
    assert other.is_dir()
    with pytest.raises(ValueError, match=r"no '\.'"):
        ScratchDir("a.b", tmp_path)
