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

from agentlab.store.scratch import OWNER_PREFIX, ScratchDir, sweep_abandoned

_CHILD = """
import sys, time
from agentlab.store.scratch import ScratchDir
dirs = [ScratchDir(sys.argv[1], sys.argv[2]) for _ in range(3)]
for d in dirs:
    (d.path / "work.json").write_text("{}")
print(" ".join(str(d.path) for d in dirs), flush=True)
time.sleep(600)
"""


def _child(name: str, root: Path) -> tuple[subprocess.Popen[str], list[Path]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, name, str(root)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, [Path(p) for p in proc.stdout.readline().split()]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_killed_owner_s_dirs_are_swept_and_a_live_one_s_kept(tmp_path: Path) -> None:
    killed, killed_dirs = _child("agentlab-t", tmp_path)
    live, live_dirs = _child("agentlab-t", tmp_path)
    try:
        assert all(d.name.startswith("agentlab-t.") for d in killed_dirs + live_dirs)
        assert len(list(tmp_path.glob(f"{OWNER_PREFIX}*"))) == 2  # one owner file a process
        assert sweep_abandoned("agentlab-t", tmp_path) == []  # both owners alive
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(10)
        assert sorted(sweep_abandoned("agentlab-t", tmp_path)) == sorted(killed_dirs)
        assert not any(d.exists() for d in killed_dirs)
        assert all((d / "work.json").is_file() for d in live_dirs), "a live owner's dir was swept"
        assert len(list(tmp_path.glob(f"{OWNER_PREFIX}*"))) == 1  # the dead one's file too
    finally:
        live.kill()
        live.wait(10)
    # what the live one leaves when it is killed too: the first ScratchDir of a name in a
    # process sweeps it
    fresh = ScratchDir("agentlab-t", tmp_path)
    assert not any(d.exists() for d in live_dirs)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 2 and fresh.path.name in names, names  # it and its owner file
    fresh.close()


def test_close_gc_other_names_and_one_descriptor_a_process(tmp_path: Path) -> None:
    other = tmp_path / "agentlab-t2-old"  # another name, or the old mkdtemp form: not ours
    other.mkdir()
    a = ScratchDir("agentlab-t2", tmp_path)
    assert a.path.is_dir() and a.path.parent == tmp_path
    assert sweep_abandoned("agentlab-t2", tmp_path) == []  # its owner (this process) is alive
    a.close()
    a.close()  # idempotent
    assert not a.path.exists()
    b = ScratchDir("agentlab-t2", tmp_path)
    path = b.path
    del b
    gc.collect()
    assert not path.exists(), "a dropped ScratchDir kept its directory"
    assert other.is_dir()
    # a notebook may hold thousands of open runs: no descriptor per directory
    before = _fds()
    many = [ScratchDir("agentlab-t2", tmp_path) for _ in range(300)]
    assert _fds() == before and all(d.path.is_dir() for d in many)
    with pytest.raises(ValueError, match=r"no '\.'"):
        ScratchDir("a.b", tmp_path)


def test_a_normal_exit_leaves_nothing(tmp_path: Path) -> None:
    code = (
        "import sys; from agentlab.store.scratch import ScratchDir; "
        "keep = [ScratchDir('agentlab-t3', sys.argv[1]) for _ in range(2)]"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=60)
    assert list(tmp_path.iterdir()) == []  # its dirs and its owner file
